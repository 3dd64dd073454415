"""runner=command with an s3:// run dir (moto's server): a program that knows nothing about
S3 saves into TRAINSTACK_CHECKPOINT_DIR, a local directory; trainstack uploads what it saves
while it runs and at SIGTERM, and restores it before a relaunch starts (a new pod's empty
disk). The s3:// URL is TRAINSTACK_CHECKPOINT_URI."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobs.backends.base import CANCELLED
from jobs.backends.local.backend import LocalBackend
from tests.jobs.test_local_recovery import finished, wait_until

FILES_ONLY = """
import json, os, signal, sys, time
from pathlib import Path

ckpt = Path(os.environ["TRAINSTACK_CHECKPOINT_DIR"])  # no mkdir: it exists
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
step = int((ckpt / "step.txt").read_text()) if (ckpt / "step.txt").exists() else 0
print(f"start at step {step}", flush=True)
Path("seen.json").write_text(json.dumps(dict(os.environ)))
while step < int(os.environ["STEPS"]) and not stop:
    step += 1
    (ckpt / "step.tmp").write_text(str(step))
    os.replace(ckpt / "step.tmp", ckpt / "step.txt")
    with open(os.environ["TRAINSTACK_METRICS"], "a") as f:
        f.write(json.dumps({"step": step, "loss": 1.0 / step}) + "\\n")
    time.sleep(float(os.environ.get("STEP_S", "0")))
if stop:
    (ckpt / "final.txt").write_text(str(step))  # saved on SIGTERM, then straight out
    sys.exit(143)
"""


def line(project: Path, bucket: str, run_id: str, steps: int, step_s: float = 0) -> list[str]:
    return [
        "runner=command",
        "runner.command=[python,-u,files_only.py]",
        "runner.torchrun=false",
        f"runner.workdir={project}",
        f"+runner.env.STEPS={steps}",
        f"+runner.env.STEP_S={step_s}",
        f"storage.root=s3://{bucket}/runs",
        f"run_id={run_id}",
    ]


def s3_text(moto, bucket: str, key: str) -> str | None:
    try:
        return moto.client().get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    except Exception:
        return None


@pytest.mark.slow
def test_a_files_only_program_keeps_its_checkpoints_in_an_s3_run_dir(
    cli, workdir, s3_direct, s3_bucket, monkeypatch
):
    monkeypatch.setenv("TRAINSTACK_SYNC_INTERVAL_S", "0.3")
    project = workdir / "project"
    project.mkdir()
    (project / "files_only.py").write_text(FILES_ONLY)
    first = cli("launch", *line(project, s3_bucket, "ck", steps=3))
    assert first.code == 0, first.err + first.out[-3000:]
    assert s3_text(s3_direct, s3_bucket, "runs/ck/checkpoints/step.txt") == "3"
    assert s3_text(s3_direct, s3_bucket, "runs/ck/checkpoints/step.tmp") is None
    state = workdir / "runs" / "ck" / "job"
    seen = json.loads((state / "code" / "seen.json").read_text())
    assert seen["TRAINSTACK_CHECKPOINT_URI"] == f"s3://{s3_bucket}/runs/ck/checkpoints"
    assert seen["TRAINSTACK_CHECKPOINT_DIR"] == str(state / "checkpoints")
    assert not list(workdir.rglob("s3:*"))  # no local folder literally named s3:

    # A new pod: nothing on its disk; the run dir's checkpoints are there before it starts.
    shutil.rmtree(state / "checkpoints")
    again = cli("launch", *line(project, s3_bucket, "ck", steps=3))
    assert again.code == 0, again.err + again.out[-3000:]
    assert "start at step 3" in (state / "output.log").read_text().split("restored")[-1]

    # Saved while it runs, and what it saves on SIGTERM is uploaded before the pod goes.
    from jobs.compose import compose
    from jobs.materialize import materialize

    backend = LocalBackend(f"s3://{s3_bucket}/runs")
    cfg = compose(line(project, s3_bucket, "term", steps=1000, step_s=0.1))
    job = materialize(cfg, now=datetime.now(UTC), git_sha=None)
    backend.schedule(backend.dryrun(job))
    key = "runs/term/checkpoints/step.txt"
    wait_until(lambda: int(s3_text(s3_direct, s3_bucket, key) or 0) >= 3, "an upload mid-run")
    backend.cancel("term")
    assert finished(backend, "term").state == CANCELLED
    saved = (workdir / "runs/term/job/checkpoints/final.txt").read_text()
    assert s3_text(s3_direct, s3_bucket, "runs/term/checkpoints/final.txt") == saved
