"""runner=hf: Hugging Face transformers.Trainer for any AutoModelForCausalLM checkpoint
(`trainer.runners.hf`) under torchrun, started by `trainer.runner_exec`. model.init_from,
data.*, trainer.lr, max_steps, batch sizes, checkpoint interval and precision mean what they
mean for the built-in trainer; runner.peft.r>0 adds LoRA. It reads and writes s3://
checkpoints itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.config import PeftSettings
from jobs.errors import JobConfigError
from jobs.runners.base import Runner, RunnerOptions, check_env
from trainer.errors import ConfigError
from trainer.hf.config import read_hf_config


@dataclass
class HfOptions(RunnerOptions):
    name: str = "hf"
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of every process (not TRAINSTACK_*/PET_*)."""
    code: str | None = None
    peft: PeftSettings = field(default_factory=PeftSettings)
    """Optional LoRA."""


def check_hf_tokenizer(cfg: Any) -> dict[str, Any] | None:
    """runner=hf's tokenizer (data.tokenizer, else init_from's own files), where it is on this
    machine: loaded here against the checkpoint's vocabulary, as the built-in trainer's is, so
    a missing or too-big one is found at launch, not after the ranks start. Remote ones (s3://,
    hf://) are the pods' to read. Returns the local checkpoint's config.json (read once), or
    None where init_from is not a directory here."""
    init_from = cfg.model.init_from
    source = cfg.data.tokenizer if cfg.data.tokenizer is not None else init_from
    if init_from is None or "://" in init_from or not Path(init_from).is_dir():
        return None  # remote, or missing: check_pod_paths / check_local_files name that
    try:
        config = read_hf_config(init_from)
        if "://" not in source and Path(source).is_dir():
            from trainer.tokenizer import build_tokenizer  # lazy: imports torch

            build_tokenizer(source, int(config["vocab_size"]), cfg.data.eos_token)
    except ConfigError as err:
        key, _, problem = str(err).partition(": ")
        if cfg.data.tokenizer is None:
            problem += " (data.tokenizer=null: runner=hf reads model.init_from's own files)"
        raise JobConfigError(key, problem) from None
    except (KeyError, ValueError, TypeError):
        pass  # a config.json without a vocabulary: the model's own checks say so
    return config


class Hf(Runner):
    options = HfOptions
    image_variant = "hf-"
    """transformers, accelerate and peft: the image's `hf` variant (images/build.sh
    IMAGE_KIND=trainer-hf), built from the same commit."""

    def check(self, cfg: Any) -> dict[str, Any] | None:
        """Returns its checkpoint's config.json where launch read it (a local
        model.init_from; the plan counts LoRA's parameters from it), else None."""
        check_env(cfg.runner)
        if cfg.model.init_from is None:
            raise JobConfigError(
                "model.init_from",
                "runner=hf fine-tunes a Hugging Face checkpoint; allowed: its directory or "
                "s3://bucket/prefix, e.g. model=hf model.init_from=s3://bucket/models/x",
            )
        return check_hf_tokenizer(cfg)

    def describe(self, cfg: Any) -> str:
        """And how it evaluates, which the built-in trainer's plan says in its own lines."""
        peft = cfg.runner.peft
        lora = f", LoRA r={peft.r}" if peft.r else ""
        trainer = cfg.trainer
        evals = (
            f"eval every {trainer.eval_interval} steps on {trainer.eval_batches} x "
            f"{trainer.micro_batch_size} windows per rank (trainer.eval_interval, eval_batches)"
            if trainer.eval_interval > 0
            else "no eval (trainer.eval_interval=0)"
        )
        return f"hf (transformers.Trainer{lora}); {evals}"

    def wrapped(
        self, options: Any, torchrun: tuple[str, ...], config_path: str
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return torchrun, ("-m", "trainer.runners.hf", "--config", config_path)


RUNNER = Hf()
