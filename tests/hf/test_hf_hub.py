"""Issue 26 item 3: model.init_from=hf://org/name[@revision] against a stand-in Hub on
127.0.0.1 (HF_ENDPOINT) serving a model built here: a local run fetches it once into the
Hugging Face cache and trains from it; a cluster job gets a model initializer filling the run
storage cache keyed by repo and revision; a gated repo without job.secrets.hf_token is one line
at launch. Nothing comes from the internet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from jobs.validate import JobConfigError
from testing_support.hf_models import build_llama, word_corpus
from tests.hf.fake_hub import Repo, fake_hub
from tests.hf.test_hf_finetune_export import finetune_args
from tests.jobs.conftest import CLUSTER, build
from trainer.errors import ConfigError
from trainer.hf.hub import parse_hub
from trainer.hf.hub_cache import MARKER
from trainer.hf.hub_cache import main as hub_cache

V1 = "1" * 40


PYTORCHJOB = "job.api=pytorchjob"
"""A TrainJob refuses hf:// (no model-initializer step yet: tests/jobs/test_trainjob.py)."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_llama(tmp_path_factory.mktemp("hub") / "tiny", tied=True)


@pytest.fixture
def hub(model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    repos = {
        "org/tiny": Repo(model_dir, {"main": "a" * 40, "v1": V1}),
        "org/gated": Repo(model_dir, {"main": "b" * 40}, gated=True),
    }
    with fake_hub(repos) as served:
        monkeypatch.setenv("HF_ENDPOINT", served.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
        yield served


@pytest.mark.slow
def test_a_local_run_fetches_once_into_the_hf_cache_and_trains(hub, tmp_path, run_trainer):
    corpus = word_corpus(tmp_path / "words.jsonl", docs=40)
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf-home")}
    args = finetune_args("hf://org/tiny@v1", corpus, "trainer.max_steps=2")
    first = run_trainer(0, args, env=env, small=False)
    assert first.returncode == 0, first.stderr
    assert "initialized from" in first.stdout
    snapshot = tmp_path / f"hf-home/hub/models--org--tiny/snapshots/{V1}"
    assert (snapshot / "config.json").is_file() and (snapshot / "tokenizer.json").is_file()
    record = yaml.safe_load((Path(first.run_dir) / "config.yaml").read_text())
    assert record["model"]["init_from"] == "hf://org/tiny@v1"
    fetched = len(hub.downloads)
    assert fetched == len(list(snapshot.iterdir()))
    again = finetune_args("hf://org/tiny@v1", corpus, "trainer.max_steps=3")
    second = run_trainer(0, again, env=env, run_dir=first.run_dir, small=False)
    assert second.returncode == 0, second.stderr
    assert len(hub.downloads) == fetched  # nothing fetched twice


def test_the_plan_reads_config_json_from_the_hub(hub, tmp_path):
    corpus = word_corpus(tmp_path / "words.jsonl", docs=5)
    job = build(["model=hf", "model.init_from=hf://org/tiny", "data=jsonl", f"data.path={corpus}"])
    config = json.loads(Path(hub.repos["org/tiny"].directory / "config.json").read_text())
    assert job.plan.params > 0 and hub.downloads == ["org/tiny/config.json"]
    assert config["model_type"] == "llama"


def test_a_gated_repo_without_a_token_is_one_line_at_launch(hub):
    overrides = ["model=hf", "model.init_from=hf://org/gated", "data=sample", *CLUSTER,
                 "compute=g5.12xlarge", "model.name=tiny", PYTORCHJOB]  # fmt: skip
    with pytest.raises(JobConfigError) as raised:
        build(overrides)
    message = str(raised.value)
    assert message.startswith("model.init_from: org/gated is gated") and "\n" not in message
    assert "job.secrets.hf_token" in message
    job = build([*overrides, "job.secrets.hf_token={name: hf, key: token}"])
    assert job.spec.model_cache is not None


def test_a_cluster_job_gets_a_model_initializer_and_the_cache_as_init_from(hub):
    job = build(["model=hf", "model.init_from=hf://org/tiny@v1", "data=sample", *CLUSTER,
                 "compute=g5.12xlarge", "compute.nodes=2", "model.name=tiny",
                 PYTORCHJOB])  # fmt: skip
    root = job.cfg.storage.root.rstrip("/")
    cache = f"{root}/models/org--tiny/v1"
    assert job.spec.trainer_config["model"]["init_from"] == cache
    replicas = job.manifests[1]["spec"]["pytorchReplicaSpecs"]
    master = replicas["Master"]["template"]["spec"]["initContainers"][0]
    worker = replicas["Worker"]["template"]["spec"]["initContainers"][0]
    fill = ["python", "-m", "trainer.hf.hub_cache", "hf://org/tiny@v1", cache]
    assert master["command"] == fill and worker["command"][:5] == fill
    assert worker["command"][5] == "--wait"
    assert cache in job.manifests[0]["data"]["config.yaml"]


def test_the_initializer_fills_the_cache_once(hub, tmp_path, capsys):
    cache = tmp_path / "runs/models/org--tiny/v1"
    assert hub_cache(["hf://org/tiny@v1", str(cache), "--wait", "0"]) == 1
    assert hub_cache(["hf://org/tiny@v1", str(cache)]) == 0
    fetched = len(hub.downloads)
    assert (cache / MARKER).is_file() and (cache / "config.json").is_file()
    assert hub_cache(["hf://org/tiny@v1", str(cache)]) == 0
    assert hub_cache(["hf://org/tiny@v1", str(cache), "--wait", "0"]) == 0
    assert len(hub.downloads) == fetched
    assert "already cached" in capsys.readouterr().out
    assert hub_cache(["hf://org/gated", str(tmp_path / "gated")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "401" in err
    assert not (tmp_path / "gated" / MARKER).exists()


@pytest.mark.parametrize("bad", ["hf://org", "hf://org/../x", "hf://org/name@bad rev", "hf://"])
def test_a_malformed_hub_id_is_one_line(bad: str):
    with pytest.raises(ConfigError, match=r"^model\.init_from: .* is not a Hub id; allowed"):
        parse_hub(bad)
