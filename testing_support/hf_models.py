"""Small random Hugging Face Llama checkpoints built here with `transformers` (nothing is
downloaded), and the logits `transformers` computes for them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

VOCAB = 300
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}


def build_llama(
    out: Path,
    *,
    tied: bool,
    seed: int = 0,
    scaling: dict | None = None,
    max_shard_size: str = "60KB",
    **sizes: int,
) -> Path:
    """A random LlamaForCausalLM (GQA: 4 heads, 2 KV heads unless `sizes` say otherwise; odd
    sizes so 2 ranks get uneven shards), saved sharded (several files + index) with a
    tokenizer. `scaling={}`: plain RoPE (Llama 2, SmolLM2)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=sizes.get("vocab_size", VOCAB),
        hidden_size=sizes.get("hidden_size", 64),
        intermediate_size=sizes.get("intermediate_size", 97),
        num_hidden_layers=sizes.get("num_hidden_layers", 2),
        num_attention_heads=sizes.get("num_attention_heads", 4),
        num_key_value_heads=sizes.get("num_key_value_heads", 2),
        max_position_embeddings=256,
        rope_theta=50_000.0,
        rope_scaling=(scaling if scaling is not None else LLAMA3_SCALING) or None,
        tie_word_embeddings=tied,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # norms at 1.0 would hide a swapped norm: make them distinct
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1 + 0.1 * torch.randn_like(param))
    model.save_pretrained(out, max_shard_size=max_shard_size)
    write_tokenizer(out, VOCAB - 40)
    return out


def build_family(
    out: Path,
    family: str,
    *,
    tied: bool,
    seed: int = 0,
    max_shard_size: str = "60KB",
    **extra,
) -> Path:
    """A random checkpoint of `family` (qwen2, qwen3, mistral; llama: `build_llama`) with GQA
    (4 heads over 2 KV heads), saved sharded with a tokenizer. qwen3's head_dim (24) is not
    hidden / heads (16); `extra` goes to the config (e.g. mistral's sliding_window)."""
    import transformers

    config_class, model_class = {
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
        "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
        "mistral": ("MistralConfig", "MistralForCausalLM"),
    }[family]
    sizes = {"head_dim": 24} if family == "qwen3" else {}
    if family == "mistral":
        extra.setdefault("sliding_window", None)
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=97,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=50_000.0,
        tie_word_embeddings=tied,
        rms_norm_eps=1e-6,
        bos_token_id=1,
        eos_token_id=2,
        **sizes,
        **extra,
    )
    model = getattr(transformers, model_class)(config)
    with torch.no_grad():  # distinct norms and nonzero biases, so a swapped one shows
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1 + 0.1 * torch.randn_like(param))
            elif name.endswith(".bias"):
                param.copy_(0.1 * torch.randn_like(param))
    model.save_pretrained(out, max_shard_size=max_shard_size)
    write_tokenizer(out, VOCAB - 40)
    return out


def write_tokenizer(out: Path, size: int) -> None:
    """A word-level tokenizer.json of `size` entries, with its tokenizer_config.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, size)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(out / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "PreTrainedTokenizerFast"}
    (out / "tokenizer_config.json").write_text(json.dumps(config))


def hf_logits(directory: Path, tokens: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(tokens).logits


def fixed_batch(vocab: int = VOCAB, seq: int = 48) -> torch.Tensor:
    """Longer than the scaled RoPE's original length (32), so the llama3 scaling matters."""
    return torch.randint(0, vocab, (2, seq), generator=torch.Generator().manual_seed(7))


def assert_close(ours: torch.Tensor, theirs: torch.Tensor, rel: float = 1e-4) -> None:
    error = ((ours - theirs).abs().max() / theirs.abs().max()).item()
    assert error < rel, f"max relative difference {error:.2e} >= {rel}"


def word_corpus(path: Path, docs: int = 200) -> Path:
    """Documents of the test tokenizer's words (w3..w259), so every token is a real one."""
    rng = random.Random(0)
    with path.open("w") as fh:
        for _ in range(docs):
            words = " ".join(f"w{rng.randrange(3, 40)}" for _ in range(rng.randrange(20, 60)))
            fh.write(json.dumps({"text": words}) + "\n")
    return path
