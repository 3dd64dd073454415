"""images/deploy.sh and images/scan_gate.py run for real (bash, python) against stand-ins for
the `pulumi`, `aws` and `trainstack` CLIs: the stand-in pulumi keeps a stack's outputs in a
file, so the tests see what each step would deploy, record and roll back."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
REPOSITORY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack/trainer"
GOOD = f"{REPOSITORY}@sha256:" + "a" * 64
NEW = f"{REPOSITORY}@sha256:" + "b" * 64
STACK = "acme/trainstack/dev"
DEPLOY_BUILDSPEC = "infra/deploy/buildspec.yml"

PULUMI = r"""#!/usr/bin/env python3
import json, os, sys
from pathlib import Path
state = Path(os.environ["STAND_IN_STATE"])
saved = state / "outputs.json"
outputs = json.loads(saved.read_text()) if saved.exists() else {}
args = sys.argv[1:]
with open(state / "calls.log", "a") as log:
    log.write(" ".join(["pulumi", *args]) + "\n")
if args[:2] == ["stack", "output"]:
    if "--json" in args:
        print(json.dumps(outputs))
    elif args[2] in outputs:
        print(outputs[args[2]] if outputs[args[2]] is not None else "null")
    else:
        sys.exit(f"error: current stack does not have output property {args[2]!r}")
elif args[0] == "up":
    config = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--config")
    outputs["image"] = config.get("trainstack:image")
    outputs["last_good_image"] = config.get("trainstack:lastGoodImage")
    saved.write_text(json.dumps(outputs))
"""
RECORDER = r"""#!/usr/bin/env python3
import json, os, sys
from pathlib import Path
state = Path(os.environ["STAND_IN_STATE"])
if "infra.stack_defaults" in sys.argv:
    json.loads(sys.stdin.read())  # the stack's outputs, piped from `pulumi stack output`
with open(state / "calls.log", "a") as log:
    log.write(" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) + "\n")
# STAND_IN_EXIT: this exit status, for every stand-in or only the one named by STAND_IN_FAIL.
if os.environ.get("STAND_IN_FAIL", Path(sys.argv[0]).name) == Path(sys.argv[0]).name:
    sys.exit(int(os.environ.get("STAND_IN_EXIT", "0")))
"""


@pytest.fixture
def deploy(tmp_path):
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for tool, body in (("pulumi", PULUMI), ("python", RECORDER), ("trainstack", RECORDER)):
        (bin_dir / tool).write_text(body)
        (bin_dir / tool).chmod(0o755)

    def step(name: str, *, script: str | None = None, **env: str) -> subprocess.CompletedProcess:
        """`images/deploy.sh NAME`, or `script` (bash) run from the repository root."""
        base = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "STAND_IN_STATE": str(state),
            "PULUMI_STACK": STACK,
            "PYTHON": str(bin_dir / "python"),
            "TRAINSTACK": str(bin_dir / "trainstack"),
        }
        argv = ["bash", "-c", script] if script else ["bash", str(REPO / "images/deploy.sh"), name]
        return subprocess.run(
            argv,
            cwd=REPO,
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=30,
        )

    log = state / "calls.log"
    step.calls = lambda: log.read_text().splitlines() if log.exists() else []  # type: ignore[attr-defined]
    step.outputs = lambda: json.loads((state / "outputs.json").read_text())  # type: ignore[attr-defined]
    step.set_outputs = lambda o: (state / "outputs.json").write_text(json.dumps(o))  # type: ignore[attr-defined]
    return step


def test_up_deploys_the_digest_and_carries_the_last_good_image_forward(deploy):
    deploy.set_outputs({"image": GOOD, "last_good_image": GOOD})
    result = deploy("up", IMAGE_URI=NEW)
    assert result.returncode == 0, result.stderr
    assert deploy.outputs() == {"image": NEW, "last_good_image": GOOD}
    calls = deploy.calls()
    up = next(c for c in calls if c.startswith("pulumi up"))
    assert f"--stack {STACK}" in up and "--yes" in up
    assert calls[-1].startswith("python -m infra.stack_defaults --stack dev --outputs -")


def test_a_passing_smoke_is_what_promotes_the_digest_to_last_good(deploy):
    deploy.set_outputs({"image": GOOD, "last_good_image": GOOD})
    assert deploy("up", IMAGE_URI=NEW).returncode == 0
    smoke = deploy("smoke", IMAGE_URI=NEW, SMOKE_COMPUTE="g5.12xlarge")
    assert smoke.returncode == 0
    launch = deploy.calls()[-1]
    for part in ("experiment=smoke", "backend=kubernetes", "stack=dev", f"job.image={NEW}"):
        assert part in launch
    assert deploy("promote", IMAGE_URI=NEW).returncode == 0
    assert deploy.outputs() == {"image": NEW, "last_good_image": NEW}


def test_a_failed_smoke_leaves_last_good_and_rollback_returns_to_it(deploy):
    deploy.set_outputs({"image": GOOD, "last_good_image": GOOD})
    assert deploy("up", IMAGE_URI=NEW).returncode == 0
    assert deploy("smoke", IMAGE_URI=NEW, STAND_IN_EXIT="1").returncode == 1
    assert deploy.outputs()["last_good_image"] == GOOD  # the workflow stops here
    result = deploy("rollback")
    assert result.returncode == 0, result.stderr
    assert deploy.outputs() == {"image": GOOD, "last_good_image": GOOD}
    assert f"rolled {STACK} back to {GOOD}" in result.stdout
    assert deploy.calls()[-1].startswith("python -m infra.stack_defaults")  # job defaults too


def test_first_deploy_has_no_last_good_and_rollback_says_so(deploy):
    assert deploy("up", IMAGE_URI=NEW).returncode == 0
    assert deploy.outputs() == {"image": NEW, "last_good_image": None}
    result = deploy("rollback")
    assert result.returncode == 2
    assert "has no last_good_image output yet" in result.stderr


@pytest.mark.parametrize(
    ("step", "env", "message"),
    [
        ("up", {"IMAGE_URI": f"{REPOSITORY}:latest"}, "is not digest-pinned"),
        ("promote", {"IMAGE_URI": f"{REPOSITORY}:nightly-20261123-" + "c" * 40}, "digest-pinned"),
        ("up", {"IMAGE_URI": NEW, "PULUMI_STACK": ""}, "PULUMI_STACK is not set"),
        ("ship", {}, "unknown step 'ship'; allowed: scan, up, smoke, promote, deploy, rollback"),
        ("deploy", {"IMAGE_URI": NEW, "IMAGE_DIGEST": "sha256:abc"}, "IMAGE_DIGEST=sha256:abc"),
        ("deploy", {"IMAGE_URI": GOOD, "IMAGE_DIGEST": NEW[-71:]}, "name different images"),
        ("deploy", {"IMAGE_URI": REPOSITORY}, "is not digest-pinned"),
        ("action", {"DEPLOY_ACTION": "promote"}, "DEPLOY_ACTION=promote; allowed: deploy, rollb"),
    ],
)
def test_bad_input_stops_before_pulumi_with_one_message(deploy, step, env, message):
    result = deploy(step, **env)
    assert result.returncode == 2
    assert message in result.stderr
    assert not any(c.startswith("pulumi up") for c in deploy.calls())


def test_deploy_runs_up_smoke_promote_and_takes_the_digest_apart(deploy):
    """The deploy project's form: IMAGE_URI the repository (or the pinned image), IMAGE_DIGEST
    the digest; SMOKE_COMPUTE picks the smoke run's compute."""
    deploy.set_outputs({"image": GOOD, "last_good_image": GOOD})
    result = deploy("deploy", IMAGE_URI=REPOSITORY, IMAGE_DIGEST=NEW.split("@")[1],
                    SMOKE_COMPUTE="p5.48xlarge")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert deploy.outputs() == {"image": NEW, "last_good_image": NEW}
    calls = deploy.calls()
    ups = [i for i, c in enumerate(calls) if c.startswith("pulumi up")]
    (launch,) = [i for i, c in enumerate(calls) if c.startswith("trainstack launch")]
    assert len(ups) == 2 and ups[0] < launch < ups[1]  # up, smoke, then promote
    assert f"job.image={NEW}" in calls[launch] and "compute=p5.48xlarge" in calls[launch]


def test_deploy_with_a_failed_smoke_never_promotes(deploy):
    deploy.set_outputs({"image": GOOD, "last_good_image": GOOD})
    result = deploy("deploy", IMAGE_URI=NEW, STAND_IN_EXIT="1", STAND_IN_FAIL="trainstack")
    assert result.returncode == 1
    assert deploy.outputs() == {"image": NEW, "last_good_image": GOOD}
    assert sum(c.startswith("pulumi up") for c in deploy.calls()) == 1
    launch = next(c for c in deploy.calls() if c.startswith("trainstack launch"))
    assert "compute=" not in launch  # no SMOKE_COMPUTE: the smoke experiment's own


# ---- the in-VPC deploy project runs the same steps --------------------------------------------


def buildspec_script(path: str) -> str:
    """A buildspec's build phase as CodeBuild runs it: one bash shell, each command in turn."""
    spec = yaml.safe_load((REPO / path).read_text())
    assert spec["env"]["shell"] == "bash"
    return "\n".join(["set -e", *spec["phases"]["build"]["commands"]])


def test_deploy_project_runs_deploy_sh_and_promotes_only_after_its_smoke(deploy):
    deploy.set_outputs({"image": GOOD, "last_good_image": GOOD})
    script = buildspec_script(DEPLOY_BUILDSPEC)
    env = {"IMAGE_URI": NEW, "IMAGE_DIGEST": NEW.split("@")[1]}
    failed = deploy("", script=script, STAND_IN_EXIT="1", STAND_IN_FAIL="trainstack", **env)
    assert failed.returncode == 1  # the build, and the workflow following it, fails
    assert deploy.outputs() == {"image": NEW, "last_good_image": GOOD}
    passed = deploy("", script=script, **env)
    assert passed.returncode == 0, passed.stderr
    assert deploy.outputs() == {"image": NEW, "last_good_image": NEW}


def test_deploy_project_rolls_prod_back_with_deploy_action_rollback(deploy):
    deploy.set_outputs({"image": NEW, "last_good_image": GOOD})
    result = deploy("", script=buildspec_script(DEPLOY_BUILDSPEC), DEPLOY_ACTION="rollback")
    assert result.returncode == 0, result.stderr
    assert deploy.outputs() == {"image": GOOD, "last_good_image": GOOD}
    assert not any(c.startswith("trainstack launch") for c in deploy.calls())
    assert deploy.calls()[-1].startswith("python -m infra.stack_defaults --stack dev")


def test_deploy_project_refuses_any_other_action_before_pulumi(deploy):
    deploy.set_outputs({"image": GOOD, "last_good_image": GOOD})
    script = buildspec_script(DEPLOY_BUILDSPEC)
    result = deploy("", script=script, DEPLOY_ACTION="promote", IMAGE_URI=NEW)
    assert result.returncode == 2 and "allowed: deploy, rollback" in result.stderr
    assert deploy.calls() == [] and deploy.outputs()["last_good_image"] == GOOD


# ---- the scan gate ---------------------------------------------------------------------------


def load_gate():
    spec = importlib.util.spec_from_file_location("scan_gate", REPO / "images/scan_gate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gate = load_gate()
INDEX = {
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [
        {"digest": "sha256:" + "1" * 64, "platform": {"os": "linux", "architecture": "amd64"}},
        {
            "digest": "sha256:" + "2" * 64,
            "platform": {"os": "unknown", "architecture": "unknown"},
            "annotations": {"vnd.docker.reference.type": "attestation-manifest"},
        },
    ],
}


class FakeAws:
    def __init__(self, counts: dict[str, int]):
        self.counts, self.calls = counts, []

    def __call__(self, *args: str) -> str:
        self.calls.append(args)
        if args[1] == "batch-get-image":
            return json.dumps(INDEX)
        if args[1] == "describe-image-scan-findings":
            return json.dumps(self.counts)
        return ""


@pytest.mark.parametrize(
    ("counts", "fail_at", "blocking"),
    [
        ({"HIGH": 2, "LOW": 9}, "HIGH", {"HIGH": 2}),
        ({"MEDIUM": 3, "LOW": 9}, "HIGH", {}),
        ({"MEDIUM": 3, "UNDEFINED": 4}, "MEDIUM", {"MEDIUM": 3}),
        ({"CRITICAL": 1}, "CRITICAL", {"CRITICAL": 1}),
        ({"INFORMATIONAL": 1}, "LOW", {}),
    ],
)
def test_findings_at_or_above_the_threshold_block(counts, fail_at, blocking):
    assert gate.blocking_findings(counts, fail_at) == blocking


def test_gate_scans_the_platform_image_of_the_index_and_fails_on_findings(capsys):
    aws = FakeAws({"CRITICAL": 1, "HIGH": 2, "LOW": 5})
    code = gate.main(["--image", NEW, "--fail-at", "HIGH", "--region", "us-east-1"], aws)
    assert code == gate.EXIT_FINDINGS
    err = capsys.readouterr().err
    assert "at or above HIGH: CRITICAL 1, HIGH 2, LOW 5; not deploying" in err
    waited = next(c for c in aws.calls if c[1] == "wait")
    assert f"imageDigest=sha256:{'1' * 64}" in waited  # linux/amd64, not the attestation
    assert "trainstack/trainer" in waited


def test_gate_passes_below_the_threshold(capsys):
    code = gate.main(["--image", NEW, "--fail-at", "CRITICAL"], FakeAws({"HIGH": 2}))
    assert code == 0
    assert "passes (fail at CRITICAL; found: HIGH 2)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--image", NEW, "--fail-at", "SEVERE"], "--fail-at 'SEVERE': allowed INFORMATIONAL"),
        (["--image", f"{REPOSITORY}:latest"], "expected <registry>/<repository>@sha256"),
    ],
)
def test_gate_bad_input_exits_2_before_asking_aws(capsys, argv, message):
    aws = FakeAws({})
    assert gate.main(argv, aws) == gate.EXIT_BAD_INPUT
    assert message in capsys.readouterr().err
    assert not aws.calls


def test_gate_threshold_comes_from_the_environment(monkeypatch, capsys):
    monkeypatch.setenv("SCAN_FAIL_SEVERITY", "LOW")
    assert gate.main(["--image", NEW], FakeAws({"LOW": 1})) == gate.EXIT_FINDINGS


def test_gate_runs_as_a_script_with_the_system_python():
    result = subprocess.run(
        [sys.executable, str(REPO / "images/scan_gate.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0 and "SCAN_FAIL_SEVERITY" in result.stdout
