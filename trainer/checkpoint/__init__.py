"""Sharded checkpoints with torch.distributed.checkpoint (DCP), committed by a marker file.

`<run_dir>/checkpoints/step-<8 digits>/` counts only once its `COMMITTED` marker exists, which
rank 0 writes after every rank's write succeeded and every file the step's `.metadata` names is
there (`checkpointer`). A run resumes from the newest committed checkpoint that loads on every
rank, falling back to older ones (`resume`). DCP reshards on load, so a checkpoint written by
N ranks loads on M. S3 run dirs stream to and read ranges from S3 directly (`s3_io`);
`layout.list_checkpoints` is what `trainstack checkpoints RUN` prints.
"""

from trainer.checkpoint.checkpointer import Checkpointer, CheckpointError
from trainer.checkpoint.layout import (
    CHECKPOINTS,
    MARKER,
    METADATA,
    CheckpointReport,
    list_checkpoints,
    parse_step,
    step_dir,
)
from trainer.checkpoint.resume import resume_newest

__all__ = [
    "CHECKPOINTS",
    "MARKER",
    "METADATA",
    "CheckpointError",
    "CheckpointReport",
    "Checkpointer",
    "list_checkpoints",
    "parse_step",
    "resume_newest",
    "step_dir",
]
