"""Which checkpoint a run resumes from: the newest one that is committed AND whose metadata
reads back; the others are skipped with a warning naming them."""

from __future__ import annotations

import pickle
from pathlib import Path

from torch.distributed.checkpoint.metadata import Metadata

from trainer.checkpoint import Checkpointer, step_dir
from trainer.config import CheckpointConfig
from trainer.storage import open_run_storage


def make_step(run_dir: Path, step: int, *, metadata: bytes, committed: bool) -> None:
    path = run_dir / step_dir(step)
    path.mkdir(parents=True)
    (path / ".metadata").write_bytes(metadata)
    (path / "__0_0.distcp").write_bytes(b"shard")
    if committed:
        (path / "COMMITTED").write_text(f"{step}\n")


def test_newest_loadable_committed_checkpoint_wins(tmp_path: Path, capsys):
    good = pickle.dumps(Metadata(state_dict_metadata={}))
    make_step(tmp_path, 2, metadata=good, committed=True)
    make_step(tmp_path, 4, metadata=good, committed=True)
    make_step(tmp_path, 6, metadata=b"\x00 truncated", committed=True)
    make_step(tmp_path, 8, metadata=good, committed=False)
    (tmp_path / "checkpoints/not-a-step").mkdir()
    # Scanning needs no process group: only rank 0 scans (find_latest broadcasts the answer).
    checkpointer = Checkpointer(open_run_storage(str(tmp_path)), None, CheckpointConfig())  # type: ignore[arg-type]
    assert checkpointer._scan_latest() == 4
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 2
    assert "step-00000008: not committed" in warnings[0]
    assert "step-00000006: unreadable metadata" in warnings[1]
    checkpointer.close()


def test_no_checkpoints_means_a_fresh_start(tmp_path: Path):
    checkpointer = Checkpointer(open_run_storage(str(tmp_path)), None, CheckpointConfig())  # type: ignore[arg-type]
    assert checkpointer._scan_latest() is None
    checkpointer.close()
