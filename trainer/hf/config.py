"""Hugging Face `config.json` <-> the trainer's `ModelArgs`, and what the trainer can load.

torch-free on purpose: `jobs` reads a local checkpoint's config.json to plan a run. Supported:
the `model_type`s of `contract.model.families` (llama, qwen2, qwen3, mistral); anything that
would need other tensors or other arithmetic (experts, another RoPE or activation, a family's
unsupported option) is refused with one line naming it and `runner=hf`, never loaded
partially.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contract.model.args import MODEL_PRESETS, ModelArgs, RopeScaling, stated_args
from contract.model.families import BY_MODEL_TYPE, FAMILIES
from trainer.errors import ConfigError
from trainer.hf.hub import MAX_CONFIG_BYTES, is_hub, read_config_bytes
from trainer.storage import StorageError, open_run_storage

CONFIG_FILE = "config.json"
SUPPORTED_MODEL_TYPES = tuple(BY_MODEL_TYPE)
RUNNER_HF = "train it with runner=hf (transformers.Trainer)"
_ROPE_TYPES = (None, "default", "llama3")
# ModelArgs field -> config.json key (the keys a user may also set as model.<field>).
ARCH_KEYS = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "vocab_size": "vocab_size",
    "ffn_hidden_dim": "intermediate_size",
    "max_seq_len": "max_position_embeddings",
    "norm_eps": "rms_norm_eps",
    "rope_theta": "rope_theta",
    "tie_embeddings": "tie_word_embeddings",
    "head_dim": "head_dim",
    "sliding_window": "sliding_window",
}
# The fields that decide the tensors' shapes: a preset named next to init_from must match them.
SHAPE_FIELDS = ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_hidden_dim")


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
        read = open_run_storage(source).read_range(CONFIG_FILE, 0, end=MAX_CONFIG_BYTES + 1)
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


def _rope(config: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, scaling dict or None) from either the transformers 4 keys (`rope_theta`,
    `rope_scaling`) or transformers 5's `rope_parameters`."""
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or (params if params else None)
    theta = config.get("rope_theta", params.get("rope_theta", 10_000.0))
    return float(theta), scaling


def unsupported(config: dict[str, Any]) -> str | None:
    """What in `config` the trainer cannot reproduce exactly, or None."""
    model_type = config.get("model_type")
    family = BY_MODEL_TYPE.get(model_type)  # type: ignore[arg-type]
    if family is None:
        return f"model_type {model_type!r} (supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
    architectures = config.get("architectures") or [family.architecture]
    if any(a != family.architecture for a in architectures):
        return f"architectures {architectures} (supported: {family.architecture})"
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if config.get(key):
            return f"{key}={config[key]} (mixture of experts)"
    problem = family.refuse(config)
    if problem:
        return problem
    if config.get("hidden_act", "silu") != "silu":
        return f"hidden_act {config['hidden_act']!r} (supported: silu)"
    _, scaling = _rope(config)
    rope_type = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    if rope_type not in _ROPE_TYPES:
        return f"rope_scaling type {rope_type!r} (supported: llama3)"
    return None


def model_args_from_hf(config: dict[str, Any], source: str) -> ModelArgs:
    """`ModelArgs` equal to `config`'s architecture; ConfigError for anything unsupported."""
    problem = unsupported(config)
    if problem:
        raise ConfigError(
            f"model.init_from: {source!r} is not supported by the built-in trainer: "
            f"{problem}; {RUNNER_HF}"
        )
    family = BY_MODEL_TYPE[config["model_type"]]
    optional = ("rope_theta", "rms_norm_eps", "tie_word_embeddings", "head_dim", "sliding_window")
    missing = [k for k in ARCH_KEYS.values() if k not in config and k not in optional]
    if missing:
        raise ConfigError(f"model.init_from: {source}/{CONFIG_FILE} lacks {', '.join(missing)}")
    theta, scaling = _rope(config)
    rope_scaling = None
    if scaling and scaling.get("rope_type", scaling.get("type")) == "llama3":
        rope_scaling = RopeScaling(
            factor=float(scaling["factor"]),
            low_freq_factor=float(scaling["low_freq_factor"]),
            high_freq_factor=float(scaling["high_freq_factor"]),
            original_max_seq_len=int(scaling["original_max_position_embeddings"]),
        )
    return ModelArgs(
        dim=int(config["hidden_size"]),
        n_layers=int(config["num_hidden_layers"]),
        n_heads=int(config["num_attention_heads"]),
        n_kv_heads=int(config.get("num_key_value_heads") or config["num_attention_heads"]),
        vocab_size=int(config["vocab_size"]),
        ffn_hidden_dim=int(config["intermediate_size"]),
        max_seq_len=int(config["max_position_embeddings"]),
        norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        rope_scaling=rope_scaling,
        family=family.name,
        head_dim=int(config["head_dim"]) if config.get("head_dim") else None,
        qkv_bias=family.qkv_bias,
        qk_norm=family.qk_norm,
        sliding_window=family.window(config),
    )


def resolve_init_from_args(model_cfg: Any, config: dict[str, Any]) -> ModelArgs:
    """The checkpoint's architecture, after refusing any `model.*` key that contradicts it."""
    source = model_cfg.init_from
    args = model_args_from_hf(config, source)
    name = model_cfg.name
    if name in MODEL_PRESETS:
        preset = MODEL_PRESETS[name]
        for field in SHAPE_FIELDS:
            if getattr(preset, field) != getattr(args, field):
                raise ConfigError(
                    f"model.name: preset {name!r} has {field}={getattr(preset, field)} but "
                    f"{source}/{CONFIG_FILE} has {ARCH_KEYS[field]}={getattr(args, field)}; "
                    "with model.init_from set model.name=null (Hydra: model=hf)"
                )
    for field, value in stated_args(model_cfg).items():
        if value != getattr(args, field):
            key = ARCH_KEYS.get(field, field)
            raise ConfigError(
                f"model.{field}: {value!r} contradicts {source}/{CONFIG_FILE} "
                f"({key}={getattr(args, field)!r}); drop model.{field} (the checkpoint "
                "decides: model=hf), or choose the model option matching the checkpoint"
            )
    return args


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
