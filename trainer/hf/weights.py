"""Hugging Face tensors <-> the trainer's parameters, and loading them into FSDP2 shards.
Each family's tensor names are in `contract.model.families`.

Names: `hf_name` is the one mapping both ways (load and export use it). No q/k permutation is
needed anywhere: `trainer.model.model.apply_rope` rotates the two halves of each head, which
is Hugging Face's `rotate_half` convention, so `q_proj`/`k_proj` load as they are (the logit
parity tests prove it). A checkpoint converted from Meta's interleaved layout has already
been permuted by Hugging Face's conversion script.

Loading: every file's header gives each tensor's byte offset; each rank reads only the rows of
dim 0 its FSDP2 shard owns, straight into the shard (one `pread` per tensor from a local
directory; ranged GETs from S3, see `s3_weights`). No rank ever holds a whole copy of the model.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from contract.model.args import ModelArgs
from contract.model.families import FAMILIES, LAYER_TENSORS, TOP_TENSORS
from trainer.errors import ConfigError
from trainer.model.model import plain_name

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

_LAYER = re.compile(r"^layers\.(\d+)\.(.+)$")


def hf_name(trainer_name: str) -> str:
    """The Hugging Face tensor name of a trainer parameter (wrapper prefixes ignored)."""
    name = plain_name(trainer_name)
    if name in TOP_TENSORS:
        return TOP_TENSORS[name]
    match = _LAYER.match(name)
    if match and match.group(2) in LAYER_TENSORS:
        return f"model.layers.{match.group(1)}.{LAYER_TENSORS[match.group(2)]}"
    raise KeyError(f"no Hugging Face name for parameter {trainer_name!r}")


def trainer_names(args: ModelArgs) -> list[str]:
    """Every parameter of `Transformer(args)` in export order (tied output excluded)."""
    names = ["tok_embeddings.weight"]
    for layer in range(args.n_layers):
        names += [f"layers.{layer}.{suffix}" for suffix in FAMILIES[args.family].layer_tensors]
    names.append("norm.weight")
    if not args.tie_embeddings:
        names.append("output.weight")
    return names


def expected_shape(name: str, args: ModelArgs) -> tuple[int, ...]:
    kv, q, head = args.kv_dim, args.q_dim, args.head_dim
    suffix = _LAYER.match(name).group(2) if _LAYER.match(name) else name  # type: ignore[union-attr]
    return {
        "tok_embeddings.weight": (args.vocab_size, args.dim),
        "output.weight": (args.vocab_size, args.dim),
        "norm.weight": (args.dim,),
        "attention.wq.weight": (q, args.dim),
        "attention.wk.weight": (kv, args.dim),
        "attention.wv.weight": (kv, args.dim),
        "attention.wo.weight": (args.dim, q),
        "attention.wq.bias": (q,),
        "attention.wk.bias": (kv,),
        "attention.wv.bias": (kv,),
        "attention.q_norm.weight": (head,),
        "attention.k_norm.weight": (head,),
        "feed_forward.w1.weight": (args.ffn_hidden_dim, args.dim),
        "feed_forward.w3.weight": (args.ffn_hidden_dim, args.dim),
        "feed_forward.w2.weight": (args.dim, args.ffn_hidden_dim),
        "attention_norm.weight": (args.dim,),
        "ffn_norm.weight": (args.dim,),
    }[suffix]


# ---- reading a local Hugging Face directory ----------------------------------------------


def weight_map(directory: Path) -> dict[str, str]:
    """tensor name -> file name, from the index (sharded) or the single file's header."""
    index = directory / INDEX_FILE
    if index.is_file():
        try:
            mapping = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            problem = f"{index} is not a safetensors index ({exc})"
            raise ConfigError(f"model.init_from: {problem}") from None
        return dict(mapping)
    single = directory / SINGLE_FILE
    if not single.is_file():
        raise ConfigError(
            f"model.init_from: {directory} holds neither {INDEX_FILE} nor {SINGLE_FILE}"
        )
    return dict.fromkeys(header_names(single), SINGLE_FILE)


def open_safetensors(path: Path):
    """A `safe_open` handle (memory-mapped; use as a context manager); one clear line for a
    missing, truncated or corrupt file."""
    try:
        return safe_open(str(path), framework="pt")
    except Exception as exc:  # safetensors raises its own SafetensorError (or OSError)
        problem = " ".join(str(exc).split())
        raise ConfigError(
            f"model.init_from: {path} is not a readable safetensors file: {problem}"
        ) from None


def header_names(file: Path) -> list[str]:
    with open_safetensors(file) as handle:
        return list(handle.keys())


def check_checkpoint(directory: Path, args: ModelArgs) -> Checked:
    """Every file's header read (and checked by `safetensors`), and exactly the tensors `args`
    needs at the shapes it needs: a missing or extra tensor, a shape mismatch or a corrupt file
    is an error naming it. Reads headers only."""
    available = weight_map(directory)
    headers = {}
    for file_name in sorted(set(available.values())):
        with open_safetensors(directory / file_name):
            pass  # the library's own checks of the header, before we read it
        headers[file_name] = tensor_layout(directory / file_name)
    return check_tensors(str(directory), available, headers, args)


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file, from its header."""

    dtype: str
    """safetensors' name for it (`F32`, `BF16`, ...)"""
    shape: list[int]
    offset: int
    """absolute byte offset of its data in the file"""


@dataclass(frozen=True)
class Checked:
    """A checkpoint whose headers matched the model: tensor name -> file, file -> header."""

    available: dict[str, str]
    headers: dict[str, dict[str, TensorEntry]]


def check_tensors(
    where: str,
    available: dict[str, str],
    headers: dict[str, dict[str, TensorEntry]],
    args: ModelArgs,
) -> Checked:
    """`available` (tensor -> file, from the index) against the files' `headers` and the
    model `args` describes; the first problem is an error naming the tensor."""
    wanted = {hf_name(n): n for n in trainer_names(args)}
    missing = sorted(set(wanted) - set(available))
    if missing:
        raise ConfigError(f"model.init_from: {where} lacks tensor {missing[0]!r}")
    extra = sorted(t for t in set(available) - set(wanted) if not t.endswith(_DERIVED))
    if extra:
        raise ConfigError(
            f"model.init_from: {where} has tensor {extra[0]!r}, which a {args.family} model "
            "of its config.json does not have (no partial loads)"
        )
    for tensor in sorted(wanted):
        file_name = available[tensor]
        entry = headers[file_name].get(tensor)
        if entry is None:
            raise ConfigError(
                f"model.init_from: tensor {tensor!r} is not in {file_name} (the index says it is)"
            )
        if entry.dtype not in _DTYPES:
            raise ConfigError(
                f"model.init_from: tensor {tensor!r} in {file_name} is {entry.dtype}; "
                f"supported: {', '.join(_DTYPES)}"
            )
        want = list(expected_shape(wanted[tensor], args))
        if entry.shape != want:
            raise ConfigError(
                f"model.init_from: tensor {tensor!r} in {file_name} has shape {entry.shape}; "
                f"its config.json implies {want}"
            )
    return Checked(available, headers)


# Buffers some exports carry; derived, never loaded.
_DERIVED = ".rotary_emb.inv_freq"


def _by_file(
    model: nn.Module, available: dict[str, str]
) -> dict[str, list[tuple[str, nn.Parameter]]]:
    groups: dict[str, list[tuple[str, nn.Parameter]]] = {}
    for name, param in model.named_parameters():
        if ".lora_" in name:
            continue  # LoRA adapters: not in the base checkpoint
        groups.setdefault(available[hf_name(name)], []).append((name, param))
    return groups


def _local_rows(param: torch.Tensor) -> tuple[int, int]:
    """(first row, row count) of dim 0 this rank holds (the whole tensor when not sharded)."""
    if not isinstance(param, DTensor):
        return 0, param.shape[0]
    local_shape, offset = compute_local_shape_and_global_offset(
        param.shape, param.device_mesh, param.placements
    )
    if any(o for o in offset[1:]) or tuple(local_shape[1:]) != tuple(param.shape[1:]):
        raise ValueError(f"only dim-0 sharding is supported, got {param.placements}")
    return offset[0], local_shape[0]


RowRead = tuple[int, memoryview]
"""(absolute byte offset in a file, buffer to fill with the bytes from there)"""


@torch.no_grad()
def load_hf_weights(
    model: nn.Module, checked: Checked, read_into: Callable[[str, list[RowRead]], None]
) -> int:
    """Copy the checkpoint (checked by `check_checkpoint`/`check_tensors`) into `model`'s
    FSDP2-sharded, materialized parameters: each rank reads only its rows of dim 0, file by
    file; `read_into(file name, reads)` fills each buffer from its offset. Returns the bytes
    this rank read."""
    read = 0
    for file_name, params in _by_file(model, checked.available).items():
        reads, conversions = [], []
        for name, param in params:
            first, count = _local_rows(param)
            if not count:
                continue
            local = param.to_local() if isinstance(param, DTensor) else param
            entry = checked.headers[file_name][hf_name(name)]
            dtype = _DTYPES[entry.dtype]
            direct = local.device.type == "cpu" and local.dtype == dtype and local.is_contiguous()
            target = local if direct else torch.empty(local.shape, dtype=dtype)
            row_bytes = math.prod(entry.shape[1:]) * dtype.itemsize
            buffer = memoryview(target.view(torch.uint8).numpy()).cast("B")
            reads.append((entry.offset + first * row_bytes, buffer))
            read += count * row_bytes
            if not direct:
                conversions.append((local, target))
        read_into(file_name, reads)
        for local, target in conversions:
            local.copy_(target)
    return read


def local_reader(directory: Path) -> Callable[[str, list[RowRead]], None]:
    """`read_into` for a local directory: one `pread` per buffer."""

    def read_into(file_name: str, reads: list[RowRead]) -> None:
        path = directory / file_name
        with open(path, "rb", buffering=0) as fh:
            for offset, buffer in reads:
                if os.preadv(fh.fileno(), [buffer], offset) != len(buffer):
                    raise ConfigError(f"model.init_from: {path} is truncated (short read)")

    return read_into


def tensor_layout(path: Path) -> dict[str, TensorEntry]:
    """name -> its entry, from the header of a local safetensors file."""
    with open(path, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        return parse_header(fh.read(size), 8 + size)


def parse_header(header: bytes, data_start: int) -> dict[str, TensorEntry]:
    """The JSON header of a safetensors file (the bytes after its 8-byte length; the data
    starts at `data_start`) as name -> entry."""
    parsed = json.loads(header)
    parsed.pop("__metadata__", None)
    return {
        name: TensorEntry(info["dtype"], list(info["shape"]), data_start + info["data_offsets"][0])
        for name, info in parsed.items()
    }


_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
