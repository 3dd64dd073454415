"""Llama-style decoder: RMSNorm, rotary embeddings, SwiGLU MLP, grouped-query attention, with
the traits other families switch on in `ModelArgs` (q/k/v biases, per-head q/k RMSNorm, a
sliding attention window); each family's names and sizes are in `contract.model.families`.

Built on the meta device (no memory) and materialized after sharding: `parallelize` shards it,
`to_empty` allocates the local shards, then `init_weights(seed)` fills them. Each parameter's
initial value is drawn from a generator seeded by the run seed and the parameter's name, over
the FULL tensor, and each rank keeps its shard of it: the initial model is the same whatever
the number of ranks.
"""

from __future__ import annotations

import math
import zlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from contract.model.args import ModelArgs, RopeScaling
from trainer.model.lora import adapter_initial_value, is_adapter

INIT_STD = 0.02
# Wrappers that parallelize() may insert into parameter names; init keys on the plain name.
_WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_orig_mod.")


def plain_name(name: str) -> str:
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalize in fp32 even under bf16 parameters: the mean of squares loses precision.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(args: ModelArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every (position, frequency) pair up to `args.max_seq_len`."""
    head_dim = args.head_dim
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (args.rope_theta**exponents)
    if args.rope_scaling is not None:
        inv_freq = _llama3_scaled(inv_freq, args.rope_scaling)
    angles = torch.outer(torch.arange(args.max_seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def _llama3_scaled(inv_freq: torch.Tensor, scaling: RopeScaling) -> torch.Tensor:
    """Llama 3.1's frequency scaling, the same arithmetic as Hugging Face's (exact parity)."""
    old_len = scaling.original_max_seq_len
    low_freq_wavelen = old_len / scaling.low_freq_factor
    high_freq_wavelen = old_len / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, seq, heads, head_dim); rotates the two halves of head_dim as pairs.
    cos/sin: the tables (positions 0..seq-1) or already per token, (batch, seq, head_dim/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    if cos.dim() == 2:
        cos, sin = cos[: x.shape[1]], sin[: x.shape[1]]
    cos = cos[..., None, :].to(x.dtype)
    sin = sin[..., None, :].to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def attention_mask(
    seq: int, documents: torch.Tensor | None, window: int | None, device: torch.device
) -> torch.Tensor | None:
    """The SDPA mask for causal attention within documents and a sliding window, or None
    when plain causal attention (SDPA's `is_causal`) is exactly it."""
    windowed = window is not None and seq > window
    if documents is None and not windowed:
        return None
    if documents is not None:
        mask = document_causal_mask(documents)
    else:
        mask = torch.ones(seq, seq, dtype=torch.bool, device=device).tril()[None, None]
    if windowed:
        # Query i sees keys i-window+1..i, as transformers' sliding-window mask does.
        band = torch.ones(seq, seq, dtype=torch.bool, device=device).triu(-(window - 1))
        mask = mask & band
    return mask


def document_causal_mask(documents: torch.Tensor) -> torch.Tensor:
    """(batch, 1, seq, seq) bool for SDPA: query i sees key j <= i of the same document.

    A dense mask, built once per forward and shared by every layer: flex_attention's
    document BlockMask would skip the masked blocks, but it has no backward on CPU in torch
    2.13, and this is the path the tests and CPU runs take (benchmarks/bench_formats.py).
    """
    seq = documents.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=documents.device).tril()
    same = documents[:, :, None] == documents[:, None, :]
    return (same & causal)[:, None]


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        self.wq = nn.Linear(args.dim, args.q_dim, bias=args.qkv_bias)
        self.wk = nn.Linear(args.dim, args.kv_dim, bias=args.qkv_bias)
        self.wv = nn.Linear(args.dim, args.kv_dim, bias=args.qkv_bias)
        self.wo = nn.Linear(args.q_dim, args.dim, bias=False)
        if args.qk_norm:
            self.q_norm = RMSNorm(args.head_dim, args.norm_eps)
            self.k_norm = RMSNorm(args.head_dim, args.norm_eps)
        self.qk_norm = args.qk_norm

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        bsz, seq, _ = x.shape
        q = self.wq(x).view(bsz, seq, self.n_heads, self.head_dim)
        k = self.wk(x).view(bsz, seq, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(bsz, seq, self.n_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=mask,
            is_causal=mask is None,
            enable_gqa=self.n_kv_heads != self.n_heads,
        )
        return self.wo(out.transpose(1, 2).reshape(bsz, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.feed_forward = FeedForward(args.dim, args.ffn_hidden_dim)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        # Derived, not learned: recomputed by init_weights, never checkpointed.
        cos, sin = rope_tables(args)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        documents: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens (batch, seq). positions: each token's RoPE position (default 0..seq-1).
        documents: each token's document in a packed sequence; a token then attends only to
        earlier tokens of its own document (default: to every earlier token)."""
        cos, sin = self.rope_cos, self.rope_sin
        if positions is not None:
            cos, sin = cos[positions], sin[positions]
        mask = attention_mask(tokens.shape[1], documents, self.args.sliding_window, tokens.device)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.output(self.norm(h))

    @torch.no_grad()
    def init_weights(self, seed: int, *, adapters_only: bool = False) -> None:
        """Fill every parameter (and the RoPE tables) deterministically from `seed`;
        `adapters_only`: just the LoRA adapters (over a base loaded from a checkpoint)."""
        if self.args.tie_embeddings and self.output.weight is not self.tok_embeddings.weight:
            # A plain `to_empty()` (no FSDP) gives each module its own new tensor: re-tie.
            self.output.weight = self.tok_embeddings.weight
        for name, param in self.named_parameters():
            name = plain_name(name)
            if adapters_only and not is_adapter(name):
                continue
            full = self._initial_value(name, tuple(param.shape), param.device, seed)
            if isinstance(param, DTensor):
                # Every rank draws the same full tensor, so no communication is needed.
                shard = distribute_tensor(
                    full, param.device_mesh, param.placements, src_data_rank=None
                )
                param.to_local().copy_(shard.to_local())
            else:
                param.copy_(full)
        self.init_rope()

    @torch.no_grad()
    def init_rope(self) -> None:
        """Recompute the RoPE tables (buffers are empty after `to_empty`)."""
        cos, sin = rope_tables(self.args)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)

    def _initial_value(
        self, name: str, shape: tuple[int, ...], device: torch.device, seed: int
    ) -> torch.Tensor:
        if name.endswith("norm.weight"):
            return torch.ones(shape, device=device)
        if name.endswith(".bias"):
            return torch.zeros(shape, device=device)
        generator = torch.Generator(device=device)
        generator.manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
        if is_adapter(name):
            return adapter_initial_value(name, shape, generator, device)
        std = INIT_STD
        if name.endswith(("attention.wo.weight", "feed_forward.w2.weight")):
            # Residual-branch outputs: scaled so the residual stream's variance stays flat.
            std = INIT_STD / math.sqrt(2 * self.args.n_layers)
        return torch.randn(shape, generator=generator, device=device) * std
