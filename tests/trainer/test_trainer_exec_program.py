"""The pod's wrappers (trainer.pod_starts, trainer.runner_exec) end the same way, through one
helper: flush, become the program, or refuse in one line with exit 2 when it cannot start."""

from __future__ import annotations

import pytest

import trainer.pod_starts
import trainer.runner_exec
from contract.config import EXIT_BAD_INPUT
from contract.run_dir import POD_NAME_ENV, SUBMISSION_ENV
from trainer.exec_program import exec_program

MISSING = "no-such-program-trainstack"


def test_a_program_that_cannot_start_is_one_line_and_exit_2(capsys):
    said = []
    assert exec_program([MISSING, "--flag"], said.append) == EXIT_BAD_INPUT
    assert said == [f"cannot start {MISSING!r}: No such file or directory"]


@pytest.fixture
def started(monkeypatch) -> list[list[str]]:
    """The programs each wrapper hands to the shared helper (none is started)."""
    seen: list[list[str]] = []

    def record(program: list[str], say) -> int:
        seen.append(program)
        return 0

    for module in (trainer.pod_starts, trainer.runner_exec):  # absent: the module execs itself
        monkeypatch.setattr(module, "exec_program", record, raising=False)
    return seen


def test_pod_starts_becomes_its_program_through_the_helper(started, tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINSTACK_RUN_DIR", str(tmp_path))
    monkeypatch.setenv(POD_NAME_ENV, "run-a-master-0")
    monkeypatch.setenv(SUBMISSION_ENV, "2026-11-27T17:00:00Z")
    assert trainer.pod_starts.main(["--max-restarts=1", "--", MISSING, "x"]) == 0
    assert started == [[MISSING, "x"]]


def test_runner_exec_becomes_its_program_through_the_helper(started, tmp_path, monkeypatch):
    for key in ("TRAINSTACK_RUN_DIR", "TRAINSTACK_CHECKPOINT_DIR", "TRAINSTACK_METRICS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("PET_NODE_RANK", raising=False)
    config = tmp_path / "config.yaml"
    config.write_text(f"run_dir: {tmp_path / 'run'}\nseed: 0\n")
    assert trainer.runner_exec.main(["--config", str(config), "--", MISSING, "y"]) == 0
    assert started == [[MISSING, "y"]]
