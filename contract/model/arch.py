"""The architecture of a decoder the built-in trainer builds: one frozen dataclass every family
fills. Pure Python (no torch) so that the job launcher can plan a run without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    family: str = "llama"
    """Which `contract.model.families` module maps it to and from Hugging Face."""
    head_dim: int | None = None
    """Width of one attention head; None: dim / n_heads (filled in on construction)."""
    qkv_bias: bool = False
    """q, k and v projections carry a bias (Qwen2)."""
    qk_norm: bool = False
    """RMSNorm over each query and key head before RoPE (Qwen3)."""
    sliding_window: int | None = None
    """A query sees at most this many keys back, itself included (Mistral v0.1); None: all."""

    def __post_init__(self) -> None:
        if self.head_dim is None and self.n_heads:
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim  # type: ignore[operator]

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim  # type: ignore[operator]

    def lora_params(self, rank: int, targets: list[str]) -> int:
        """What LoRA of `rank` on the Hugging Face projections `targets` trains: rank x (in +
        out) per adapted projection per block (trainer.model.lora)."""
        shapes = {
            "q_proj": (self.dim, self.q_dim),
            "k_proj": (self.dim, self.kv_dim),
            "v_proj": (self.dim, self.kv_dim),
            "o_proj": (self.q_dim, self.dim),
            "gate_proj": (self.dim, self.ffn_hidden_dim),
            "up_proj": (self.dim, self.ffn_hidden_dim),
            "down_proj": (self.ffn_hidden_dim, self.dim),
        }
        per_block = sum(rank * sum(shapes[t]) for t in targets if t in shapes)
        return per_block * self.n_layers

    def num_params(self, *, include_embedding: bool = True) -> int:
        """Exact parameter count of `trainer.model.model.Transformer` built from these args."""
        attention = 2 * self.dim * self.q_dim + 2 * self.dim * self.kv_dim  # wq, wo, wk, wv
        if self.qkv_bias:
            attention += self.q_dim + 2 * self.kv_dim
        if self.qk_norm:
            attention += 2 * self.head_dim  # type: ignore[operator]
        mlp = 3 * self.dim * self.ffn_hidden_dim  # w1, w2, w3
        norms = 2 * self.dim
        per_layer = attention + mlp + norms
        embedding = self.vocab_size * self.dim
        output = 0 if self.tie_embeddings else self.vocab_size * self.dim
        total = self.n_layers * per_layer + self.dim + output  # + final norm
        return total + embedding if include_embedding else total

    def training_flops_per_token(self, seq_len: int) -> float:
        """Forward + backward FLOPs per token: 6N for the matmuls plus attention scores.

        N excludes the input embedding (a lookup, not a matmul) and counts a tied table once
        more as the output matmul; the attention term is 12 * layers * (heads * head_dim) *
        keys seen (QK^T and AV, forward and backward, as in PaLM's appendix), the keys capped
        by a sliding window.
        """
        n = self.num_params(include_embedding=False)
        if self.tie_embeddings:
            n += self.vocab_size * self.dim  # the tied table is still the output matmul
        keys = min(seq_len, self.sliding_window) if self.sliding_window else seq_len
        return 6.0 * n + 12.0 * self.n_layers * self.q_dim * keys
