"""The sample corpus, shipped in the wheel as package data (like `conf/`), so that the default
job (`data=sample`) trains wherever the user stands, not only in a checkout.

In the checkout `train.jsonl` here is a link to data/sample/train.jsonl (the corpus' home,
with its README and rebuild script; the trainer image copies it from there); the wheel holds
the file itself (setuptools copies what the link names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SAMPLE_PATH = "data/sample/train.jsonl"
"""The path conf/data/sample.yaml names: relative, as the trainer image carries it
(jobs.validate_inputs.IMAGE_FILES) and as a checkout holds it."""
SHIPPED = Path(__file__).resolve().parent / "train.jsonl"
"""The copy in this installation."""


def shipped_sample(cfg: Any) -> None:
    """A local run of the sample corpus from a directory that has no data/sample/: the
    shipped copy, by its absolute path (a run in pods reads the image's, left as named)."""
    if cfg.data.get("path") != SAMPLE_PATH or Path(SAMPLE_PATH).exists():
        return
    if SHIPPED.is_file():
        cfg.data.path = str(SHIPPED)
