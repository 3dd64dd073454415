"""Sharded checkpoints with torch.distributed.checkpoint (DCP), committed by a marker file.

`<run_dir>/checkpoints/step-<8 digits>/` counts only once its `COMMITTED` marker exists, which
rank 0 writes after every rank's write succeeded and every file the step's `.metadata` names is
there (`checkpointer`). A run resumes from the newest committed checkpoint that loads on every
rank, falling back to older ones (`resume`). DCP reshards on load, so a checkpoint written by
N ranks loads on M. S3 run dirs stream to and read ranges from S3 directly (`s3_io`);
`layout.list_checkpoints` is what `trainstack checkpoints RUN` prints.

The layout (and `source`, what `trainer.resume_from` names) needs no torch: `jobs` checks a
checkpoint at launch in the API image, which has none, so the torch-using parts load lazily.
"""

import importlib
from typing import Any

from trainer.checkpoint.layout import CheckpointReport, list_checkpoints

_LAZY = {
    "Checkpointer": "trainer.checkpoint.checkpointer",
    "CheckpointError": "trainer.checkpoint.checkpointer",
    "resume_newest": "trainer.checkpoint.resume",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CheckpointError",
    "CheckpointReport",
    "Checkpointer",
    "list_checkpoints",
    "resume_newest",
]
