"""Model sizes: named presets, parameter counts and training FLOPs per token.

Pure Python (no torch) so that the job launcher can plan a run without loading torch.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3.1's `rope_scaling` (type `llama3`): long wavelengths are slowed by `factor`,
    short ones kept, the band between interpolated (as in Hugging Face's
    `_compute_llama3_parameters`)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_seq_len: int


@dataclass(frozen=True)
class ModelArgs:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    ffn_hidden_dim: int
    max_seq_len: int
    norm_eps: float = 1e-5
    rope_theta: float = 500_000.0
    tie_embeddings: bool = False
    rope_scaling: RopeScaling | None = None

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def num_params(self, *, include_embedding: bool = True) -> int:
        """Exact parameter count of `trainer.model.model.Transformer` built from these args."""
        kv_dim = self.n_kv_heads * self.head_dim
        attention = self.dim * self.dim * 2 + self.dim * kv_dim * 2  # wq, wo, wk, wv
        mlp = 3 * self.dim * self.ffn_hidden_dim  # w1, w2, w3
        norms = 2 * self.dim
        per_layer = attention + mlp + norms
        embedding = self.vocab_size * self.dim
        output = 0 if self.tie_embeddings else self.vocab_size * self.dim
        total = self.n_layers * per_layer + self.dim + output  # + final norm
        return total + embedding if include_embedding else total

    def training_flops_per_token(self, seq_len: int) -> float:
        """Forward + backward FLOPs per token: 6N for the matmuls plus attention scores.

        N excludes the input embedding (a lookup, not a matmul); the attention term is
        12 * layers * dim * seq_len (QK^T and AV, forward and backward), as in PaLM's appendix.
        """
        n = self.num_params(include_embedding=False)
        if self.tie_embeddings:
            n += self.vocab_size * self.dim  # the tied table is still the output matmul
        return 6.0 * n + 12.0 * self.n_layers * self.dim * seq_len


MODEL_PRESETS: dict[str, ModelArgs] = {
    # A few million parameters over the byte-level vocabulary: trains on CPU in minutes.
    "tiny": ModelArgs(
        dim=256,
        n_layers=6,
        n_heads=8,
        n_kv_heads=4,
        vocab_size=512,
        ffn_hidden_dim=704,
        max_seq_len=2048,
        rope_theta=10_000.0,
        tie_embeddings=True,
    ),
    # Llama 3.2 1B (its 128k context is 8k pre-training stretched by RoPE scaling).
    "llama3_1b": ModelArgs(
        dim=2048,
        n_layers=16,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=128_256,
        ffn_hidden_dim=8192,
        max_seq_len=131_072,
        tie_embeddings=True,
        rope_scaling=RopeScaling(
            factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_seq_len=8192
        ),
    ),
    # Llama 3 8B.
    "llama3_8b": ModelArgs(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=128_256,
        ffn_hidden_dim=14_336,
        max_seq_len=8192,
    ),
    # Llama 3 70B.
    "llama3_70b": ModelArgs(
        dim=8192,
        n_layers=80,
        n_heads=64,
        n_kv_heads=8,
        vocab_size=128_256,
        ffn_hidden_dim=28_672,
        max_seq_len=8192,
    ),
}

ARCH_FIELDS = tuple(f.name for f in fields(ModelArgs))
"""The `model.<field>` keys that state the architecture."""
_REQUIRED = tuple(f.name for f in fields(ModelArgs) if f.default is MISSING)


def _field(section: Any, key: str) -> Any:
    return section.get(key) if isinstance(section, dict) else getattr(section, key, None)


def rope_scaling_from_config(section: Any) -> RopeScaling | None:
    """`model.rope_scaling` (a dict or a config dataclass) as `RopeScaling`; None stays None."""
    if section is None:
        return None
    return RopeScaling(**{f.name: _field(section, f.name) for f in fields(RopeScaling)})


def stated_args(model_cfg: Any) -> dict[str, Any]:
    """The architecture fields the `model` section sets (not null), as ModelArgs values."""
    stated = {k: _field(model_cfg, k) for k in ARCH_FIELDS if _field(model_cfg, k) is not None}
    if "rope_scaling" in stated:
        stated["rope_scaling"] = rope_scaling_from_config(stated["rope_scaling"])
    return stated


def model_args_from_config(model_cfg: Any) -> ModelArgs:
    """The `model` section's architecture: every field it states; the fields it leaves null
    from the preset `name`. A section stating every field needs no preset (its `name` is
    only a label): the shipped `jobs/conf/model/*.yaml` all do."""
    name = _field(model_cfg, "name")
    stated = stated_args(model_cfg)
    if name in MODEL_PRESETS:
        return replace(MODEL_PRESETS[name], **stated)
    missing = [f"model.{k}" for k in _REQUIRED if k not in stated]
    if missing:
        allowed = ", ".join(MODEL_PRESETS)
        raise ValueError(
            f"model.name: unknown model {name!r}; allowed: {allowed}, or any name with every "
            f"architecture key set (missing: {', '.join(missing)})"
        )
    return ModelArgs(**stated)
