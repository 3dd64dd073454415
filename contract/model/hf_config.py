"""A Hugging Face `config.json` -> the trainer's `ModelArgs`, and what the trainer can load.

Pure arithmetic on the parsed JSON (reading it is `trainer.hf.config`'s job): the launcher's
plan and the trainer's both size a model from it. Supported: the `model_type`s of
`contract.model.families` (llama, qwen2, qwen3, mistral); anything that would need other
tensors or other arithmetic (experts, another RoPE or activation, a family's unsupported
option) is refused with one line naming it and `runner=hf`, never loaded partially.
"""

from __future__ import annotations

from typing import Any

from contract.errors import ConfigError
from contract.model.args import MODEL_PRESETS, ModelArgs, RopeScaling, stated_args
from contract.model.families import BY_MODEL_TYPE

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
