"""Each bad input: one line naming the key and what is allowed, exit 2, nothing written.

The checks run before the process group exists, so most cases call the CLI entry point in
this process; one case runs a real process to check the exit code and the lone stderr line.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from contract.config import EXIT_BAD_INPUT, DataConfig
from tests.trainer.harness import REPO, TrainerResult
from trainer import __main__ as trainer_main
from trainer.__main__ import main, say_once
from trainer.data import read_documents
from trainer.errors import ConfigError
from trainer.launch import exit_code_for
from trainer.tokenizer import ByteTokenizer


def snapshot(run_dir: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(run_dir)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A config whose run dir already holds a committed checkpoint that must stay untouched."""
    run_dir = tmp_path / "run"
    step = run_dir / "checkpoints/step-00000002"
    step.mkdir(parents=True)
    (step / ".metadata").write_bytes(b"metadata")
    (step / "__0_0.distcp").write_bytes(b"shard")
    (step / "COMMITTED").write_text("2\n")
    corpus = tmp_path / "ok.jsonl"
    docs = (json.dumps({"text": f"document {i} " * 50}) for i in range(40))
    corpus.write_text("".join(doc + "\n" for doc in docs))
    config = tmp_path / "job.yaml"
    config.write_text(f"run_dir: {run_dir}\ndata:\n  path: {corpus}\n")
    return config


def write_lines(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


GOOD = json.dumps({"text": "In the beginning was the word"})

CASES = {
    "missing dataset": (["data.path=/nonexistent/train.jsonl"], "data.path: no such file"),
    "unknown key": (["trainer.max_stepz=5"], "trainer.max_stepz: unknown key; allowed keys here:"),
    "unknown top-level key": (["epochs=5"], "epochs: unknown key; allowed keys here: run_dir,"),
    "wrong type": (["trainer.max_steps=many"], "trainer.max_steps: Value 'many' of type 'str'"),
    "seq_len above the model's maximum": (
        ["data.seq_len=4096"],
        "data.seq_len: 4096 exceeds the model's maximum sequence length 2048 (model 'tiny'); "
        "allowed: 1..2048",
    ),
    "closed choice": (
        ["trainer.mixed_precision=fp16"],
        "trainer.mixed_precision: 'fp16' is not allowed; allowed: auto, fp32, bf16",
    ),
    "profile steps beyond the run": (
        ["trainer.max_steps=5", "trainer.profile.steps=[4,6]"],
        "trainer.profile.steps: [4, 6] is not allowed; allowed: [] (off) or [first, last]",
    ),
    "unknown model": (["model.name=gpt5"], "model.name: unknown model 'gpt5'; allowed: tiny,"),
    "out of range": (["trainer.checkpoint.keep=0"], "trainer.checkpoint.keep: 0 is out of range"),
    "no failed save allowed at all": (
        ["trainer.checkpoint.max_consecutive_failures=0"],
        "trainer.checkpoint.max_consecutive_failures: 0 is out of range",
    ),
    "not key=value": (["max_steps"], "override 'max_steps': expected key=value"),
    "override not YAML": (["trainer.max_steps=[1"], "override 'trainer.max_steps=[1': value is"),
}


@pytest.mark.parametrize("overrides, message", CASES.values(), ids=CASES.keys())
def test_bad_config_gets_one_line_and_exit_2(job, capsys, overrides, message):
    before = snapshot(job.parent / "run")
    assert main(["--config", str(job), *overrides]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}"), err
    assert err.count("\n") == 1
    assert snapshot(job.parent / "run") == before  # no config.yaml, no checkpoint touched


def test_hsdp_mesh_must_be_the_world_size(job, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    overrides = ["trainer.parallel.dp_replicate=2", "trainer.parallel.dp_shard=4"]
    assert main(["--config", str(job), *overrides]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == (
        "error: trainer.parallel.dp_replicate x trainer.parallel.dp_shard: 2 x 4 = 8 must equal "
        "the world size 4; allowed: a product equal to it (dp_shard=-1: world size / "
        "dp_replicate)\n"
    )


def test_global_batch_not_divisible_by_ranks(job, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun would set it; checked before any rank
    overrides = ["trainer.micro_batch_size=4", "trainer.global_batch_size=12"]
    assert main(["--config", str(job), *overrides]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == (
        "error: trainer.global_batch_size: 12 is not divisible by trainer.micro_batch_size (4) "
        "x data-parallel ranks (2) = 8; allowed: a positive multiple of 8\n"
    )


@pytest.mark.parametrize(
    "lines, message",
    [
        ([], "holds no documents"),
        ([json.dumps({"body": "no text field"})] * 3, "3 of 3 lines (100.0%)"),
        ([GOOD] * 8 + ["not json", '["a list"]'], "2 of 10 lines (20.0%)"),
    ],
    ids=["empty", "no text field", "malformed lines"],
)
def test_bad_dataset(job, tmp_path, capsys, lines, message):
    before = snapshot(job.parent / "run")
    data = write_lines(tmp_path, lines)
    assert main(["--config", str(job), f"data.path={data}"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: data.path: ") and message in err, err
    assert err.count("\n") == 1
    assert snapshot(job.parent / "run") == before


def test_malformed_lines_below_the_limit_are_counted_and_skipped(tmp_path):
    data = write_lines(tmp_path, [GOOD] * 9 + ["{broken"])
    documents, bad = read_documents(DataConfig(path=data, max_bad_fraction=0.2), ByteTokenizer())
    assert (len(documents), bad) == (9, 1)
    with pytest.raises(ConfigError, match=r"1 of 10 lines .*\(first: line 10: not JSON\)"):
        read_documents(DataConfig(path=data, max_bad_fraction=0.05), ByteTokenizer())


@pytest.mark.parametrize(
    "text, message",
    [
        ("run_dir: [unclosed\n", "is not valid YAML: expected ',' or ']'"),
        ("- a list\n", "must be a mapping with the keys run_dir, seed, model, data, trainer"),
    ],
    ids=["not YAML", "not a mapping"],
)
def test_bad_config_file(tmp_path, capsys, text, message):
    config = tmp_path / "job.yaml"
    config.write_text(text)
    assert main(["--config", str(config)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: --config: ") and message in err, err
    assert err.count("\n") == 1


def test_real_process_exit_code_and_single_line(job):
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "--config", str(job), "trainer.lr=-1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == EXIT_BAD_INPUT
    assert proc.stderr == "error: trainer.lr: -1.0 is out of range; allowed: a finite number > 0\n"
    assert not (job.parent / "run/config.yaml").exists()


def test_config_checks_stay_torch_free():
    """`jobs` runs these checks at launch; they must not pull in torch."""
    code = "import sys, contract.plan, trainer.run_config; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.stdout.strip() == "False", proc.stderr


def test_launch_wrapper_keeps_exit_2_of_two_ranks_and_never_restarts_it(run_trainer):
    """torchrun alone exits 1 for any worker failure and restarts bad input like any other
    failure; trainer.launch passes the 2 through, at once."""
    result = run_trainer(
        2, ["trainer.max_steps=0"], launcher="trainer.launch", torchrun_args=("--max-restarts=3",)
    )
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert result.stderr.count("error: trainer.max_steps: 0 is out of range") == 1
    assert "will restart worker group" not in result.stderr


@pytest.mark.parametrize("rank, waits", [(0, False), (1, True), (3, True)])
def test_only_rank_0_reports_at_once(monkeypatch, capsys, rank, waits):
    """Another rank that exited at once could be torchrun's first failure, and torchrun would
    stop rank 0 before its line is out (the 2-rank test above failed so in 5 of 20 runs).
    It waits for SIGTERM, with the default action, and speaks only if none comes."""
    slept, handlers = [], {}
    monkeypatch.setattr(trainer_main.time, "sleep", slept.append)
    monkeypatch.setattr(trainer_main.signal, "signal", lambda sig, h: handlers.update({sig: h}))
    say_once(rank, "trainer.lr: -1.0 is out of range")
    assert slept == ([trainer_main.PEER_REPORT_WAIT_S] if waits else [])
    assert handlers == ({signal.SIGTERM: signal.SIG_DFL} if waits else {})
    assert capsys.readouterr().err == "error: trainer.lr: -1.0 is out of range\n"


@pytest.mark.parametrize(
    "first_code, job_code", [(143, 143), (-15, 143), (2, 2), (1, 1), (-9, 137)]
)
def test_launch_wrapper_maps_the_first_failure(first_code, job_code):
    assert exit_code_for(first_code) == job_code


def test_a_checkpoint_that_does_not_fit_the_model_is_exit_2_and_keeps_the_record(
    run_trainer, tmp_path: Path, every_2_reference: TrainerResult
):
    """A run dir with checkpoints of one model (a copy of the session's reference run,
    tests/trainer/conftest.py), started again building another: the one line names the run
    and the key, exit 2 at once (no restart), and config.yaml still records the model the
    checkpoints hold."""
    run_dir = tmp_path / "run"  # where run_trainer runs
    shutil.copytree(every_2_reference.run_dir, run_dir)
    record = (run_dir / "config.yaml").read_bytes()
    again = run_trainer(
        2,
        ["trainer.max_steps=4", "model.dim=128"],
        launcher="trainer.launch",
        torchrun_args=("--max-restarts=3",),
    )
    assert again.returncode == EXIT_BAD_INPUT, again.stderr
    line = f"error: model.dim: the checkpoints of run {run_dir} were trained with dim=64"
    assert again.stderr.count(line) == 1, again.stderr
    assert "will restart worker group" not in again.stderr
    assert (run_dir / "config.yaml").read_bytes() == record
