"""`python -m infra.stack_defaults` turns real program outputs (from the mocked dev stack) into
the `stack/<stack>.yaml` the jobs schema accepts, and keeps the kubeconfig private."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from infra.stack_defaults import main
from tests.infra.pulumi_harness import REPO


@pytest.fixture
def dev_outputs(stack_runs, tmp_path):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(stack_runs["dev"].outputs))
    return path


def run(tmp_path, outputs_file, stack="dev", conf_dir=None):
    return main(
        [
            "--stack",
            stack,
            "--outputs",
            str(outputs_file),
            "--conf-dir",
            str(conf_dir or tmp_path / "conf"),
            "--kube-dir",
            str(tmp_path / "kube"),
        ]
    )


def test_writes_defaults_and_private_kubeconfig(tmp_path, dev_outputs, stack_runs):
    assert run(tmp_path, dev_outputs) == 0
    text = (tmp_path / "conf" / "dev.yaml").read_text()
    assert text.startswith("# @package _global_\n")
    defaults = yaml.safe_load(text)
    assert set(defaults) == {"cluster", "job", "storage"}
    assert set(defaults["job"]) == {"image_repository", "queue", "api"}
    outputs = stack_runs["dev"].outputs
    assert defaults["job"]["api"] == outputs["job_api"] == "trainjob"  # the operator's
    assert set(defaults["storage"]) == {"root", "grants", "fsx_claim"}
    assert defaults["storage"]["grants"] == outputs["s3_grants"]
    assert defaults["cluster"]["data_prepare_service_account"] == "data-prepare"
    assert defaults["cluster"]["log_group"] == outputs["container_log_group"]
    assert outputs["container_log_group"] == "/aws/eks/trainstack-dev/containers"
    assert defaults["storage"]["root"] == f"s3://{outputs['bucket']}/runs"
    assert defaults["job"]["image_repository"] == outputs["repository_url"]
    assert defaults["job"]["queue"] == outputs["local_queue"] == "training"  # the LocalQueue
    cluster = defaults["cluster"]
    assert cluster["name"] == "trainstack-dev"
    assert cluster["node_groups"] == [
        {
            "name": "g5",
            "instance_type": "g5.12xlarge",
            "min_size": 0,
            "desired_size": 0,
            "max_size": 2,
        }
    ]
    kubeconfig = tmp_path / "kube" / "trainstack-dev.yaml"
    assert cluster["kubeconfig"] == str(kubeconfig.resolve())
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    assert json.loads(kubeconfig.read_text())["current-context"] == "trainstack-dev"
    assert "certificate-authority-data" not in text


def test_jobs_schema_accepts_the_defaults(tmp_path, dev_outputs):
    schema = pytest.importorskip("jobs.schema")
    assert run(tmp_path, dev_outputs) == 0
    defaults = OmegaConf.load(tmp_path / "conf" / "dev.yaml")
    merged = OmegaConf.merge(OmegaConf.structured(schema.LaunchConfig), defaults)
    assert merged.cluster.node_groups[0].instance_type == "g5.12xlarge"
    assert merged.cluster.kubeconfig.endswith("trainstack-dev.yaml")
    assert merged.cluster.log_group == "/aws/eks/trainstack-dev/containers"
    # serve-model binds it to each served run's ServiceAccount (infra/serving.py)
    assert merged.cluster.serving_role_arn.startswith("arn:aws:iam::")
    assert merged.cluster.serving_role_arn.endswith("-serving")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"repository_url": None}, "stack output 'repository_url' is missing"),
        ({"kubeconfig": "[secret]"}, "use `pulumi stack output --show-secrets`"),
        ({"storage_root": "runs"}, "'storage_root' must be s3://"),
        ({"gpu_node_groups": [{"name": "g5"}]}, "'gpu_node_groups[0]' lacks 'instance_type'"),
    ],
)
def test_bad_outputs_exit_2_and_write_nothing(tmp_path, stack_runs, capsys, change, message):
    outputs = {**stack_runs["dev"].outputs, **change}
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    assert run(tmp_path, path) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "conf").exists() and not (tmp_path / "kube").exists()


def test_stack_name_cannot_escape_the_conf_dir(tmp_path, dev_outputs, capsys):
    assert run(tmp_path, dev_outputs, stack="../../etc") == 2
    assert "--stack" in capsys.readouterr().err


def test_module_command_reads_piped_outputs(tmp_path, dev_outputs):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "infra.stack_defaults",
            "--stack",
            "dev",
            "--conf-dir",
            str(tmp_path / "conf"),
            "--kube-dir",
            str(tmp_path / "kube"),
        ],
        input=dev_outputs.read_text(),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "conf" / "dev.yaml").exists()


def launch(tmp_path, monkeypatch, capsys, *overrides):
    """`trainstack launch stack=dev backend=render ...` with the stack file written above."""
    from jobs.cli import main as cli_main

    monkeypatch.setenv("TRAINSTACK_CONFIG_PATH", str(tmp_path / "conf-root"))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)
    try:
        code = cli_main(
            ["launch", "stack=dev", "backend=render", "compute=g5.12xlarge", *overrides]
        )
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err, work


@pytest.mark.parametrize(
    ("override", "key", "url"),
    [
        ("data.path=s3://{bucket}/train.jsonl", "data.path", "s3://{bucket}/train.jsonl"),
        ("model.init_from=s3://other-bucket/models/x", "model.init_from", "s3://other-bucket"),
        ("storage.root=s3://{bucket}/datasets/runs", "storage.root", "s3://{bucket}/datasets"),
    ],
)
def test_launch_refuses_a_url_the_pods_cannot_reach(
    tmp_path, dev_outputs, stack_runs, monkeypatch, capsys, exec_in_process, override, key, url
):
    bucket = stack_runs["dev"].outputs["bucket"]
    assert run(tmp_path, dev_outputs, conf_dir=tmp_path / "conf-root" / "stack") == 0
    base = [
        "job.image=123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:v1",
        f"data.path=s3://{bucket}/raw/train.jsonl",
        f"data.tokenizer=s3://{bucket}/tokenizers/llama3",
    ]
    code, err, work = launch(tmp_path, monkeypatch, capsys, *base)
    assert code == 0, err  # inside the layout: rendered
    rendered = sorted(work.rglob("manifests.yaml"))
    assert len(rendered) == 1
    code, err, _ = launch(tmp_path, monkeypatch, capsys, *base, override.format(bucket=bucket))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.split(": ", 2)[1] == key or f"{key}: " in line, line
    assert url.format(bucket=bucket) in line and "trainstack:dataAccess" in line, line
    assert sorted(work.rglob("manifests.yaml")) == rendered  # nothing new written


def test_fsx_claim_comes_from_the_stack_and_a_stack_without_fsx_refuses_it(
    tmp_path, dev_outputs, stack_runs, monkeypatch, capsys, exec_in_process
):
    prod = tmp_path / "prod.json"
    prod.write_text(json.dumps(stack_runs["prod"].outputs))
    assert run(tmp_path, prod, stack="prod") == 0
    claim = yaml.safe_load((tmp_path / "conf" / "prod.yaml").read_text())["storage"]["fsx_claim"]
    assert claim == stack_runs["prod"].outputs["fsx_claim"] and claim
    assert run(tmp_path, dev_outputs, conf_dir=tmp_path / "conf-root" / "stack") == 0
    bucket = stack_runs["dev"].outputs["bucket"]
    code, err, work = launch(
        tmp_path,
        monkeypatch,
        capsys,
        "job.image=123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:v1",
        f"data.path=s3://{bucket}/raw/train.jsonl",
        f"data.tokenizer=s3://{bucket}/tokenizers/llama3",
        "storage.fsx=true",
    )
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("trainstack launch: storage.fsx: the stack has no FSx"), err
    assert not list(work.rglob("manifests.yaml"))
