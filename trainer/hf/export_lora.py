"""A LoRA run's checkpoint (adapters only) -> a PEFT adapter directory, or (`--merge`) the
base model with the adapters folded in, in the family's Hugging Face layout.

Adapter: `adapter_config.json` and `adapter_model.safetensors` under peft's key names
(`base_model.model.<module>.lora_A.weight`), loadable by `PeftModel.from_pretrained(base,
dir)`. Merged: each base safetensors file of `model.init_from` read in turn (one file in
memory), W + alpha / rank * B @ A written for every adapted projection, same file names and
index; config.json from the run's copy of the source's.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file, save_file

from contract.checkpoints import METADATA
from contract.run_dir import CONFIG_FILE
from trainer.errors import ConfigError
from trainer.hf.dcp_read import CheckpointTensors
from trainer.hf.hub import download, is_hub
from trainer.hf.weights import INDEX_FILE, hf_name, weight_map
from trainer.storage import RunStorage, StorageNotFoundError, open_model_storage

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_ADAPTER_KEY = re.compile(r"^model\.(layers\.\d+\..+)\.lora_([ab])\.weight$")


@dataclass(frozen=True)
class RunLora:
    rank: int
    alpha: float
    dropout: float
    targets: list[str]
    init_from: str

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def run_lora(storage: RunStorage) -> RunLora | None:
    """The run's LoRA settings from its config.yaml, or None for a full fine-tune."""
    try:
        saved = OmegaConf.to_container(OmegaConf.create(storage.read_text(CONFIG_FILE)))
    except StorageNotFoundError:
        return None
    model: dict[str, Any] = saved.get("model") or {}  # type: ignore[union-attr, assignment]
    lora = model.get("lora") or {}
    if not lora.get("rank"):
        return None
    return RunLora(
        int(lora["rank"]),
        float(lora["alpha"]),
        float(lora["dropout"]),
        list(lora["targets"]),
        str(model["init_from"]),
    )


def adapter_tensors(checkpoint: Path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """HF module name (model.layers.0.self_attn.q_proj) + .lora_A/.lora_B -> tensor."""
    metadata = pickle.loads((checkpoint / METADATA).read_bytes())
    found: dict[str, torch.Tensor] = {}
    with CheckpointTensors(checkpoint, metadata) as tensors:
        for key in metadata.state_dict_metadata:
            match = _ADAPTER_KEY.match(key)
            if not match:
                continue
            module = hf_name(f"{match.group(1)}.weight").removesuffix(".weight")
            out = torch.empty(tensors.shape(key), dtype=torch.float32)
            tensors.read_into(key, out)
            found[f"{module}.lora_{match.group(2).upper()}.weight"] = out.to(dtype)
    if not found:
        raise ConfigError(f"RUN: checkpoint {checkpoint.name} holds no LoRA adapters")
    return found


def save_weights(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """A safetensors file of an export, with the mode any new file gets here (safetensors
    creates its files 0600; the export's other files, and a downloaded model's, are not)."""
    save_file(tensors, str(path), metadata={"format": "pt"})
    mask = os.umask(0)
    os.umask(mask)
    path.chmod(0o666 & ~mask)


def write_adapter(checkpoint: Path, lora: RunLora, dtype: torch.dtype, out: Path) -> int:
    """adapter_model.safetensors + adapter_config.json (peft's names) into `out`."""
    tensors = {f"base_model.model.{k}": v for k, v in adapter_tensors(checkpoint, dtype).items()}
    save_weights(tensors, out / ADAPTER_WEIGHTS)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": lora.init_from,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "target_modules": sorted(lora.targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
    }
    (out / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return sum(t.numel() * t.element_size() for t in tensors.values())


def write_merged(checkpoint: Path, lora: RunLora, dtype: torch.dtype, out: Path, work: Path) -> int:
    """The base's safetensors files with every adapted weight replaced by W + scale * B @ A;
    the index (same file names) into `out`. Returns the bytes of weights written."""
    adapters = adapter_tensors(checkpoint, torch.float32)
    base = _local_base(lora.init_from, work)
    files = weight_map(base)
    merged_names, total, index = set(), 0, {}
    for file_name in sorted(set(files.values())):
        tensors = load_file(str(base / file_name))
        for name in list(tensors):
            module = name.removesuffix(".weight")
            if f"{module}.lora_A.weight" in adapters:
                a, b = adapters[f"{module}.lora_A.weight"], adapters[f"{module}.lora_B.weight"]
                tensors[name] = tensors[name].float() + lora.scale * (b @ a)
                merged_names.add(module)
            tensors[name] = tensors[name].to(dtype).contiguous()
            total += tensors[name].numel() * tensors[name].element_size()
            index[name] = file_name
        save_weights(tensors, out / file_name)
    missing = {k.rsplit(".lora_", 1)[0] for k in adapters} - merged_names
    if missing:
        raise ConfigError(f"--merge: {lora.init_from} lacks {sorted(missing)[0]}.weight")
    doc = {"metadata": {"total_size": total}, "weight_map": dict(sorted(index.items()))}
    (out / INDEX_FILE).write_text(json.dumps(doc, indent=2) + "\n")
    return total


def _local_base(init_from: str, work: Path) -> Path:
    if is_hub(init_from):
        return Path(download(init_from))
    if "://" not in init_from:
        if not Path(init_from).is_dir():
            raise ConfigError(f"--merge: the run's base model.init_from {init_from!r} is gone")
        return Path(init_from)
    local = work / "base"
    open_model_storage(init_from).download_dir("", local)
    return local
