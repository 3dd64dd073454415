"""Hugging Face `config.json`: read from a directory, s3:// or the Hub, and written back from
the trainer's `ModelArgs` for an export. What it means as a model (sizes, what is supported)
is `contract.model.hf_config`.

torch-free on purpose: `jobs` reads a local checkpoint's config.json to plan a run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contract.errors import ConfigError
from contract.model.arch import ModelArgs
from contract.model.families import FAMILIES
from contract.model.hf_config import ARCH_KEYS, CONFIG_FILE
from trainer.hf.hub import MAX_CONFIG_BYTES, is_hub, read_config_bytes
from trainer.storage import StorageError, open_model_storage


def join_uri(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}"


def read_hf_config(source: str) -> dict[str, Any]:
    """The parsed config.json of a Hugging Face directory (local path or s3:// prefix)."""
    if is_hub(source):
        return _parse_config(read_config_bytes(source), source)
    uri = join_uri(source, CONFIG_FILE)
    if "://" not in source and not Path(uri).is_file():
        where = "no such directory" if not Path(source).is_dir() else f"no {CONFIG_FILE} in it"
        raise ConfigError(
            f"model.init_from: {source!r}: {where}; allowed: a Hugging Face "
            "model directory (config.json + safetensors) or s3://bucket/prefix"
        )
    try:
        # One ranged read, at most MAX_CONFIG_BYTES (+1 to tell a larger file): the Training
        # API's host makes it on a request's behalf.
        read = open_model_storage(source).read_range(CONFIG_FILE, 0, end=MAX_CONFIG_BYTES + 1)
    except StorageError as exc:
        raise ConfigError(f"model.init_from: cannot read {CONFIG_FILE}: {exc}") from None
    raw = read.data or b""
    if len(raw) > MAX_CONFIG_BYTES or (read.size or 0) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"model.init_from: {CONFIG_FILE} is over {MAX_CONFIG_BYTES} bytes; allowed: a "
            "model's config (a few KB)"
        )
    return _parse_config(raw, uri)


def _parse_config(raw: bytes, uri: str) -> dict[str, Any]:
    try:
        config = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"model.init_from: {uri} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"model.init_from: {uri} is not a JSON object")
    return config


def hf_config_from_args(args: ModelArgs, base: dict[str, Any] | None, dtype: str) -> dict:
    """config.json for an export: `base` (the source's config.json, keeping its token ids and
    extra keys) with the architecture written from `args` in the keys every transformers
    version reads."""
    config = dict(base or {})
    for key in ("rope_parameters", "rope_scaling", "torch_dtype", "dtype"):
        config.pop(key, None)
    scaling = None
    if args.rope_scaling is not None:
        s = args.rope_scaling
        scaling = {
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_seq_len,
        }
    family = FAMILIES[args.family]
    config.update(
        {
            "architectures": [family.architecture],
            "model_type": family.model_type,
            **family.export_keys(args),
            "hidden_act": "silu",
            "head_dim": args.head_dim,
            "rope_scaling": scaling,
            "torch_dtype": {"bf16": "bfloat16", "fp32": "float32"}[dtype],
        }
    )
    # sliding_window is the family's to write (Qwen keeps its unused one, Llama has none).
    arch = {k: v for k, v in ARCH_KEYS.items() if k != "sliding_window"}
    config.update({key: getattr(args, field) for field, key in arch.items()})
    return config
