"""Whether a checkpoint is whole, checked against its own `.metadata` (what the commit check,
resume and `trainstack checkpoints` rely on), on a real DCP checkpoint written in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from contract.checkpoints import step_dir
from jobs.cli import main as trainstack
from trainer.checkpoint import list_checkpoints
from trainer.storage import open_run_storage

# dcp.save without a process group says it assumes one process: that is the intent here.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def write_step(run_dir: Path, step: int, *, committed: bool = True) -> Path:
    path = run_dir / step_dir(step)
    state = {"w": torch.arange(4096, dtype=torch.float32), "b": torch.ones(16)}
    dcp.save(state, checkpoint_id=str(path), no_dist=True)
    if committed:
        (path / "COMMITTED").write_text(f"{step}\n")
    return path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    write_step(tmp_path, 2)
    write_step(tmp_path, 4)
    (write_step(tmp_path, 6) / "__0_0.distcp").unlink()
    shard = write_step(tmp_path, 8) / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    (write_step(tmp_path, 10) / ".metadata").write_bytes(b"\x00 torn")
    write_step(tmp_path, 12, committed=False)
    (tmp_path / "checkpoints/not-a-step").mkdir()
    return tmp_path


def test_each_step_is_checked_against_its_metadata(run_dir: Path) -> None:
    reports = {r.step: r for r in list_checkpoints(open_run_storage(str(run_dir)))}
    assert sorted(reports) == [2, 4, 6, 8, 10, 12]
    assert [s for s, r in reports.items() if r.complete] == [2, 4, 12]
    assert [s for s, r in reports.items() if r.committed] == [2, 4, 6, 8, 10]
    assert reports[6].missing == ["__0_0.distcp"]
    assert reports[8].short and reports[8].short[0].startswith("__0_0.distcp (100 of ")
    assert reports[10].problem.startswith("unreadable .metadata")
    assert reports[2].size_bytes == sum(f.stat().st_size for f in (run_dir / step_dir(2)).iterdir())


def test_trainstack_checkpoints_lists_a_local_run_dir(run_dir: Path, capsys) -> None:
    assert trainstack(["checkpoints", str(run_dir)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    by_step = {int(row[0]): row for row in rows}
    assert sorted(by_step) == [2, 4, 6, 8, 10, 12]
    assert by_step[2][1] == "yes" and by_step[2][4] == "complete"
    assert by_step[12][1] == "no" and by_step[12][4] == "complete"
    assert by_step[6][4:] == ["missing", "__0_0.distcp"]
    assert by_step[8][4:6] == ["short", "__0_0.distcp"]


def test_no_checkpoints_is_said_plainly(tmp_path: Path, capsys) -> None:
    assert trainstack(["checkpoints", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == f"no checkpoints under {tmp_path}/checkpoints"
