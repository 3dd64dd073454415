"""Jobs with Hugging Face checkpoints: the plan from config.json, the SFT experiment, and input
paths a pod could not read refused at launch."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.model.args import MODEL_PRESETS
from contract.model.hf_config import model_args_from_hf
from jobs.validate import JobConfigError
from testing_support.hf_models import build_llama
from tests.jobs.conftest import CLUSTER, SAMPLE_DATA, build
from trainer.hf.config import read_hf_config
from trainer.storage.s3 import S3Storage

S3_MODEL = "s3://models/Meta-Llama-3.1-8B-Instruct"
S3_CHAT = "s3://data/chat.jsonl"


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    return build_llama(tmp_path_factory.mktemp("hf") / "tiny-llama", tied=True)


def test_plan_counts_parameters_from_config_json(hf_dir: Path):
    job = build(["model=hf", f"model.init_from={hf_dir}", f"data.path={SAMPLE_DATA}"])
    expected = model_args_from_hf(read_hf_config(str(hf_dir)), str(hf_dir)).num_params()
    assert job.plan.params == expected
    assert job.plan.model == "tiny-llama"
    assert f"{expected / 1e6:,.1f}M parameters" in str(job.plan)
    assert job.spec.trainer_config["data"]["tokenizer"] is None  # the checkpoint's own


def test_sft_experiment_renders_two_p5_nodes_from_s3(tmp_path: Path):
    job = build(
        [
            "experiment=llama3_8b_sft_p5x2",
            *CLUSTER,
            f"model.init_from={S3_MODEL}",
            f"data.path={S3_CHAT}",
        ]
    )
    assert (job.spec.nodes, job.spec.instance_type, job.spec.nproc_per_node) == (
        2,
        "p5.48xlarge",
        8,
    )
    trainer = job.spec.trainer_config
    assert trainer["model"]["init_from"] == S3_MODEL
    assert trainer["data"]["path"] == S3_CHAT
    assert trainer["trainer"]["export_hf"] is True
    assert job.plan.params == MODEL_PRESETS["llama3_8b"].num_params()
    kinds = [m["kind"] for m in job.manifests]
    assert kinds == ["ConfigMap", "TrainJob", "NetworkPolicy"]  # job.api's default
    assert S3_MODEL in job.manifests[0]["data"]["config.yaml"]


@pytest.mark.parametrize(
    ("key", "value"),
    [("model.init_from", "hf"), ("data.tokenizer", "hf"), ("data.path", SAMPLE_DATA)],
)
def test_cluster_backends_refuse_local_paths(hf_dir: Path, key: str, value: str):
    value = str(hf_dir) if value == "hf" else value
    overrides = ["experiment=llama3_8b_sft_p5x2", *CLUSTER, f"model.init_from={S3_MODEL}",
                 f"data.path={S3_CHAT}", f"{key}={value}"]  # fmt: skip
    if key == "model.init_from":
        overrides.append("model.name=null")
    with pytest.raises(JobConfigError) as err:
        build(overrides)
    message = str(err.value)
    assert message.startswith(f"{key}: ") and "not inside the trainer image" in message
    assert "s3://bucket/prefix" in message and "\n" not in message


def test_the_images_own_sample_data_is_allowed_on_the_cluster():
    job = build(["experiment=smoke", "compute=g5.12xlarge", *CLUSTER])
    assert job.spec.trainer_config["data"]["path"] == "data/sample/train.jsonl"


def test_s3_init_from_without_a_preset_is_sized_from_its_config_json(
    hf_dir: Path, s3_direct, s3_bucket
):
    S3Storage(f"s3://{s3_bucket}/models").upload_dir(hf_dir, "tiny-llama")
    uri = f"s3://{s3_bucket}/models/tiny-llama"
    job = build(["model=hf", f"model.init_from={uri}", *CLUSTER, "compute=g5.12xlarge"])
    assert job.plan.params == model_args_from_hf(read_hf_config(str(hf_dir)), uri).num_params()
    assert job.spec.trainer_config["model"]["init_from"] == uri


def test_an_unreadable_s3_init_from_without_a_preset_is_refused(s3_direct, s3_bucket):
    uri = f"s3://{s3_bucket}/models/absent"
    with pytest.raises(JobConfigError, match=r"^model\.init_from: cannot read config\.json"):
        build(["model=hf", f"model.init_from={uri}", *CLUSTER, "compute=g5.12xlarge"])
