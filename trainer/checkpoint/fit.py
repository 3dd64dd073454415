"""Whether a run's checkpoints fit the model this config builds, checked before any rank
starts or any file is written.

A run dir's `config.yaml` records the architecture its checkpoints were trained with (the
trainer writes it before the first checkpoint). A later start of the same run dir that
builds a different model would fail to load every checkpoint (`size mismatch ...`), and a
launcher that restarts failed workers would try again to no avail; so the difference is bad
input (`ConfigError`, exit 2, never restarted), named by its key.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import yaml

from contract.model.args import ARCH_FIELDS, ModelArgs
from contract.run_dir import CONFIG_FILE
from trainer.errors import ConfigError
from trainer.storage import RunStorage, StorageError


def recorded_model(storage: RunStorage) -> dict[str, Any] | None:
    """The `model` section of the run dir's record; None when there is none to read."""
    try:
        record = yaml.safe_load(storage.read_text(CONFIG_FILE))
    except (StorageError, FileNotFoundError, yaml.YAMLError):
        return None
    model = record.get("model") if isinstance(record, dict) else None
    return model if isinstance(model, dict) else None


def check_checkpoints_fit(storage: RunStorage, model: ModelArgs, committed: list[int]) -> None:
    """ConfigError naming the first architecture key that differs from the one the run's
    `committed` checkpoints were trained with; nothing when the run has none yet."""
    recorded = recorded_model(storage) if committed else None
    if recorded is None:
        return
    built = asdict(model)
    for key in ARCH_FIELDS:
        if key in recorded and recorded[key] != built[key]:
            raise ConfigError(
                f"model.{key}: the checkpoints of run {storage.uri()} were trained with "
                f"{key}={recorded[key]!r}, this config builds {key}={built[key]!r}; relaunch "
                "it with its own config, or start a new run dir"
            )
