"""Guards that realistic one-line bugs slipped past before (issue 37, "tests that bite"): a
grant's prefix boundary, an unpacked workdir's hash, and what a relaunch may change."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from jobs.compose import compose
from jobs.errors import JobConfigError
from jobs.grants import check_urls, covers
from jobs.relaunch import mutable, relaunch_config

GRANTS = [{"url": "s3://b/runs/", "access": "readwrite"}]


@pytest.mark.parametrize(
    ("url", "covered"),
    [
        ("s3://b/runs/x/config.json", True),
        ("s3://b/runs/", True),
        ("s3://b/runs", True),
        ("s3://b/runs-payroll/x", False),
        ("s3://b/runs-payroll/", False),
        ("s3://b/runsx", False),
        ("s3://b/runs*", False),  # a glob: lists runs-payroll/ too
        ("s3://b/run?/x", False),
        ("s3://b2/runs/x", False),
        ("s3://b/other/runs/x", False),
    ],
)
def test_a_grant_covers_its_prefix_and_nothing_beside_it(url, covered):
    assert covers("s3://b/runs/", url) is covered
    assert covers("s3://b/runs", url) is covered  # a grant written without the slash
    if covered:
        check_urls(GRANTS, "training", [("model.init_from", url, True)])
    else:
        with pytest.raises(JobConfigError, match="outside the training pods"):
            check_urls(GRANTS, "training", [("model.init_from", url, False)])


def _archive(files: dict[str, str]) -> tuple[bytes, str]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def test_an_unpacked_workdir_is_reused_only_for_the_same_hash(tmp_path: Path):
    from trainer.runner_exec import MARKER, unpack

    into = tmp_path / "code"
    first, first_sha = _archive({"train.py": "print('v1')\n"})
    second, second_sha = _archive({"train.py": "print('v2')\n", "extra.py": ""})
    unpack(first, first_sha, into)
    assert (into / "train.py").read_text() == "print('v1')\n"
    (into / "scratch.txt").write_text("left by the last attempt")
    unpack(first, first_sha, into)  # a restart: the same archive, kept as is
    assert (into / "scratch.txt").exists()
    unpack(second, second_sha, into)  # another archive: replaced, nothing of the old left
    assert (into / "train.py").read_text() == "print('v2')\n"
    assert not (into / "scratch.txt").exists()
    assert (into / MARKER).read_text().strip() == second_sha
    # A tree with no marker, or one naming another hash, is never taken for this archive.
    (into / MARKER).unlink()
    (into / "train.py").write_text("print('tampered')\n")
    unpack(second, second_sha, into)
    assert (into / "train.py").read_text() == "print('v2')\n"
    (into / MARKER).write_text(first_sha + "\n")
    (into / "train.py").write_text("print('tampered')\n")
    unpack(second, second_sha, into)
    assert (into / "train.py").read_text() == "print('v2')\n"


def test_a_relaunch_keeps_the_runs_init_from(tmp_path: Path, monkeypatch):
    """model.init_from is what the checkpoints were trained from: never changeable on a
    relaunch of the same run_id (a new run_id starts afresh)."""
    monkeypatch.chdir(tmp_path)
    assert not mutable("model.init_from") and not mutable("model")
    record = compose(["run_id=r1", "model=hf", "model.init_from=s3://b/models/a"])
    state = tmp_path / "runs" / "r1" / "job"
    state.mkdir(parents=True)
    (state / "launch.yaml").write_text(OmegaConf.to_yaml(record))
    typed = ["run_id=r1", "model=hf", "model.init_from=s3://b/models/b"]
    with pytest.raises(JobConfigError, match=r"^model\.init_from: run r1 was launched with"):
        relaunch_config(compose(typed), typed)
    same = ["run_id=r1", "trainer.max_steps=7"]
    cfg, where = relaunch_config(compose(same), same)
    assert cfg.model.init_from == "s3://b/models/a" and where == "runs/r1/job/launch.yaml"
