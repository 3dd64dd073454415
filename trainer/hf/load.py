"""`model.init_from` in the trainer: check the checkpoint, load the weights (from S3 by ranges),
and keep its small files (config.json, tokenizer) in the run dir for a later export.

A local directory is read in place; an s3:// one by ranged GETs straight from S3
(`s3_weights`). Either way each rank reads only its own rows, never a whole copy.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from contract.model.args import ModelArgs
from trainer.distributed import Distributed, env_rank
from trainer.errors import ConfigError
from trainer.hf.hub import MODEL_FILES, TOKENIZER_FILES
from trainer.hf.s3_weights import S3Checkpoint
from trainer.hf.weights import check_checkpoint, check_tensors, load_hf_weights, local_reader
from trainer.storage import (
    RunStorage,
    StorageError,
    StorageNotFoundError,
    open_model_storage,
)

STAGING_ENV = "TRAINSTACK_STAGING_DIR"
RUN_HF_DIR = "hf"
"""Run-dir folder holding the source's config.json, generation_config.json and tokenizer."""


def is_remote(source: str) -> bool:
    return "://" in source


def staging_dir(kind: str, source: str) -> Path:
    base = Path(os.environ.get(STAGING_ENV) or tempfile.gettempdir())
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return base / "trainstack-staging" / f"{kind}-{digest}"


def check_local_init_from(source: str, args: ModelArgs) -> None:
    """Before any rank starts: a local checkpoint's headers, tensor names and shapes."""
    if not is_remote(source):
        check_checkpoint(Path(source), args)


def load_init_from(model: nn.Module, source: str, args: ModelArgs, env: Distributed) -> int:
    """Fill `model`'s materialized, sharded parameters from `source`; returns bytes read."""
    if not is_remote(source):
        checked = check_checkpoint(Path(source), args)
        return load_hf_weights(model, checked, local_reader(Path(source)))

    # Every rank reads the (small) index and headers itself and checks them; all agree on
    # the outcome before any rank reads weights, so none waits on a peer that gave up.
    remote = S3Checkpoint(source)
    problem, checked = "", None
    try:
        available = remote.weight_map()
        headers = {name: remote.header(name) for name in sorted(set(available.values()))}
        checked = check_tensors(source, available, headers, args)
    except (ConfigError, StorageError) as exc:
        problem = str(exc).removeprefix("model.init_from: ")
    _agree_or_raise(problem, env)
    assert checked is not None
    return load_hf_weights(model, checked, remote.read_into)


def _agree_or_raise(problem: str, env: Distributed) -> None:
    """Every rank raises if any rank found a problem (no rank waits on a lost peer)."""
    flag = torch.tensor([1 if problem else 0])
    dist.all_reduce(flag, group=env.checkpoint_group)
    if problem:
        raise ConfigError(f"model.init_from: {problem}")
    if flag.item():
        raise ConfigError("model.init_from: reading the checkpoint failed on another rank")


def fetch_tokenizer(source: str) -> str:
    """A local directory holding `source`'s tokenizer files (s3:// is downloaded; small)."""
    if not is_remote(source):
        return source
    local = staging_dir(f"tokenizer-rank{env_rank()}", source)  # ranks of a node don't share
    storage = open_model_storage(source)
    for name in TOKENIZER_FILES:
        try:
            data = storage.read_bytes(name)
        except StorageNotFoundError:
            continue
        except StorageError as exc:
            raise ConfigError(f"data.tokenizer: {exc}") from None
        local.mkdir(parents=True, exist_ok=True)
        (local / name).write_bytes(data)
    if not local.is_dir():
        raise ConfigError(f"data.tokenizer: {source} holds none of {', '.join(TOKENIZER_FILES)}")
    return str(local)


def keep_model_files(storage: RunStorage, init_from: str | None, tokenizer_dir: str | None) -> None:
    """Copy the source's config.json and generation_config.json and the tokenizer files the run
    uses into <run_dir>/hf/, so an export needs nothing but the run dir."""
    sources = [(init_from, MODEL_FILES)] if init_from else []
    if tokenizer_dir:
        is_file = not is_remote(tokenizer_dir) and Path(tokenizer_dir).is_file()
        sources.append(
            (str(Path(tokenizer_dir).parent) if is_file else tokenizer_dir, TOKENIZER_FILES)
        )
    for base, names in sources:
        reader = open_model_storage(base)
        for name in names:
            try:
                data = reader.read_bytes(name)
            except StorageNotFoundError:
                continue
            storage.write_bytes(f"{RUN_HF_DIR}/{name}", data)
