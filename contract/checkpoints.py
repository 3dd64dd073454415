"""The names inside a run dir's `checkpoints/`: one folder per saved step, which counts once its
commit marker exists (the trainer's `trainer.checkpoint` writes and checks them; the launcher
names them in `trainer.resume_from` and `trainstack checkpoints`)."""

from __future__ import annotations

from contract.run_dir import CHECKPOINTS

MARKER = "COMMITTED"
"""Written last, by rank 0, once every file the step's metadata names is there."""
METADATA = ".metadata"
"""torch.distributed.checkpoint's index of the step's shard files."""


def step_dir(step: int) -> str:
    """`checkpoints/step-<8 digits>`, relative to the run dir."""
    return f"{CHECKPOINTS}/step-{step:08d}"


def parse_step(name: str) -> int | None:
    """The step of a `step-<digits>` folder name; None for any other name."""
    digits = name.removeprefix("step-")
    return int(digits) if name.startswith("step-") and digits.isdigit() else None
