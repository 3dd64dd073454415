"""What the GPU check's cases train on, made on the machine itself (it has no network): a
corpus of synthetic tokens and random Hugging Face checkpoints. Each is made once per
work directory (written aside, then renamed), so a later case finds it ready.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.gpu.plan import Sizes
from contract.model.args import ModelArgs, model_args_from_config
from trainer.hf.config import hf_config_from_args

SEED = 0
_TORCH_DTYPES = {"bf16": "bfloat16", "fp32": "float32"}


def device():
    import torch  # only the cases that compute with it pay its start-up (see `hf_checkpoint`)

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def synthetic_dataset(work: Path, sizes: Sizes) -> Path:
    """A JSONL corpus of random printable-ASCII documents for the byte tokenizer (one token
    per character): synthetic tokens, with nothing to download. Speed does not depend on
    which ids a sequence holds."""
    path = work / "data" / "synthetic.jsonl"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    low, high = sizes.document_tokens
    lines, total = [], 0
    while total < sizes.dataset_tokens:
        length = int(rng.integers(low, high))
        text = rng.integers(32, 127, size=length, dtype=np.uint8).tobytes().decode("ascii")
        lines.append(json.dumps({"text": text}) + "\n")
        total += length
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(lines))
    tmp.rename(path)
    return path


def model_args(preset: str, overrides: dict[str, Any]) -> ModelArgs:
    """`preset` with `overrides` (ModelArgs fields), as the trainer reads a `model` section (a
    head width derived from dim / n_heads follows a changed dim)."""
    return model_args_from_config({"name": preset, **overrides})


def args_from_overrides(overrides: tuple[str, ...]) -> ModelArgs:
    """The ModelArgs that `model.*=value` overrides (a `Sizes.big`) describe."""
    fields = dict(o.removeprefix("model.").split("=", 1) for o in overrides)
    name = fields.pop("name")
    return model_args(name, {k: int(v) for k, v in fields.items()})


def hf_config(args: ModelArgs) -> dict[str, Any]:
    """config.json of a checkpoint of `args`, as the trainer's export writes it."""
    return hf_config_from_args(args, {"bos_token_id": 1, "eos_token_id": 2}, "fp32")


def hf_checkpoint(
    work: Path, label: str, args: ModelArgs, *, dtype: str, distinct_norms: bool = False
) -> Path:
    """A random Hugging Face checkpoint of `args` (config.json from the trainer's exporter,
    weights from transformers' own init), built on this machine's device. `distinct_norms`:
    norm weights away from 1.0 and nonzero biases, so a swapped or missing one shows in the
    logits. `dtype`: bf16 or fp32, of the weights saved."""
    # torch and transformers here, not at the top: a case that only launches the trainer
    # starts in a fraction of a second instead of several.
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = work / "hf" / label
    if (out / "config.json").is_file():
        return out
    tmp = out.with_name(f"{label}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "config.json").write_text(json.dumps(hf_config(args), indent=2))
    torch.manual_seed(SEED)
    with torch.device(device()):
        model = AutoModelForCausalLM.from_config(
            AutoConfig.from_pretrained(tmp), dtype=getattr(torch, _TORCH_DTYPES[dtype])
        )
    if distinct_norms:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("norm.weight"):
                    param.copy_(1 + 0.1 * torch.randn_like(param))
                elif name.endswith(".bias"):
                    param.copy_(0.1 * torch.randn_like(param))
    model.save_pretrained(tmp)
    del model
    torch.cuda.empty_cache()  # a no-op without CUDA
    tmp.rename(out)
    return out
