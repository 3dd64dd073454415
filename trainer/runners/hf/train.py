"""`python -m trainer.runners.hf --config PATH`: one rank of a runner=hf job (under torchrun).

Reads the job's `--config` (model, data, trainer: the built-in trainer's sections; runner:
peft), fine-tunes `model.init_from` with transformers.Trainer, writes metrics lines where the
job contract says (TRAINSTACK_METRICS), checkpoints to TRAINSTACK_CHECKPOINT_DIR and resumes
from the newest complete one, checkpoints and exits 143 on SIGTERM, and writes the HF export
(LoRA merged) to `<run_dir>/export/` at the end. Bad input is one line and exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from contract.config import EXIT_BAD_INPUT, EXIT_OK, EXIT_PREEMPTED, PeftSettings, RunConfig
from contract.plan import tokenizer_source
from contract.run_dir import CHECKPOINTS, METRICS_FILE
from trainer.data import open_training_data
from trainer.errors import ConfigError
from trainer.faults import maybe_delay_step
from trainer.hf.load import TOKENIZER_FILES, fetch_tokenizer, staging_dir
from trainer.runners.hf import remote
from trainer.runners.hf.checkpoints import COMPLETE, newest_complete
from trainer.runners.hf.data import WindowDataset
from trainer.runners.hf.remote import fetch_newest, local_rank_zero
from trainer.runners.hf.settings import check_supported, training_arguments
from trainer.storage import open_run_storage
from trainer.tokenizer import build_tokenizer

EXPORT = "export"


def staging(run_dir: str) -> Path:
    """Local copies of an s3:// run's checkpoints and export (the pod's disk)."""
    digest = hashlib.sha256(run_dir.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "trainstack-hf" / digest


def eval_windows(cfg: Any, world: int) -> int:
    """An evaluation pass's size, as the built-in trainer's: trainer.eval_batches micro
    batches per rank (not the whole held-out split, which on a big corpus outlasts training)."""
    return cfg.trainer.eval_batches * cfg.trainer.micro_batch_size * world


def _say(message: str) -> None:
    print(f"[runner=hf] {message}", file=sys.stderr, flush=True)


def load(path: str) -> tuple[RunConfig, PeftSettings]:
    raw = yaml.safe_load(Path(path).read_text())
    runner = raw.pop("runner", {}) or {}
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RunConfig), raw)
        cfg = OmegaConf.to_object(merged)
        peft = OmegaConf.to_object(
            OmegaConf.merge(OmegaConf.structured(PeftSettings), runner.get("peft") or {})
        )
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "config"
        raise ConfigError(f"{key}: {str(exc).splitlines()[0]}") from None
    return cfg, peft  # type: ignore[return-value]


class StopFlag:
    """SIGTERM (preemption, cancel) asks for a checkpoint and a clean exit at the next step."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True


def _local_dir(source: str, kind: str) -> str:
    """A local directory holding `source` (an s3:// prefix is downloaded, once per rank)."""
    if "://" not in source:
        return source

    rank = os.environ.get("RANK", "0")
    local = staging_dir(f"{kind}-rank{rank}", source)
    if not (local / "config.json").is_file():
        open_run_storage(source).download_dir("", local)
    return str(local)


def _callbacks(metrics: Path, tokens_per_step: int, stop: StopFlag, cfg: RunConfig) -> list[Any]:
    from transformers import TrainerCallback  # lazy: transformers: seconds, after the config checks

    class Contract(TrainerCallback):
        """Metrics lines, the stop flag agreed by every rank, and complete-checkpoint marks."""

        def __init__(self) -> None:
            self.last = (0, time.perf_counter())

        def on_train_begin(self, args, state, control, **kwargs):
            self.last = (state.global_step, time.perf_counter())  # a resume starts later

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            record: dict[str, Any] = {"step": state.global_step}
            for ours, theirs in (
                ("loss", "loss"),
                ("eval_loss", "eval_loss"),
                ("lr", "learning_rate"),
                ("grad_norm", "grad_norm"),
            ):
                if isinstance(logs.get(theirs), int | float):
                    record[ours] = float(logs[theirs])
            if "loss" in record:
                step, at = self.last
                now = time.perf_counter()
                if state.global_step > step:
                    rate = (state.global_step - step) * tokens_per_step / (now - at)
                    record["throughput/tokens_per_s"] = round(rate, 1)
                self.last = (state.global_step, now)
                record["tokens_seen"] = state.global_step * tokens_per_step
            if len(record) > 1:
                metrics.parent.mkdir(parents=True, exist_ok=True)
                with metrics.open("a") as fh:
                    fh.write(json.dumps(record) + "\n")

        def on_step_end(self, args, state, control, **kwargs):
            maybe_delay_step()  # fault-injection tests only (unset: nothing)
            flag = stop.requested
            if dist.is_available() and dist.is_initialized():
                device = "cuda" if torch.cuda.is_available() else "cpu"
                value = torch.tensor([int(flag)], device=device)
                dist.all_reduce(value, op=dist.ReduceOp.MAX)
                flag = bool(value.item())
            if flag:
                stop.requested = True
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_save(self, args, state, control, **kwargs):
            distributed = dist.is_available() and dist.is_initialized()
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if distributed:
                dist.barrier()  # every rank's files (optimizer shards, RNG states) are written
            if "://" in cfg.run_dir:
                if remote.local_rank_zero() and checkpoint.is_dir():
                    remote.upload(cfg.run_dir, checkpoint)
                if distributed:
                    dist.barrier()
                if state.is_world_process_zero:
                    remote.commit(cfg.run_dir, checkpoint, cfg.trainer.checkpoint.keep)
            if state.is_world_process_zero and checkpoint.is_dir():
                (checkpoint / COMPLETE).write_text(f"{state.global_step}\n")

    return [Contract()]


def _export(trainer: Any, peft: PeftSettings, cfg: RunConfig, tokenizer_dir: str) -> None:
    """The final weights as a Hugging Face directory in <run_dir>/export/ (LoRA merged),
    written aside and renamed (a local run dir) or uploaded (s3://)."""
    run_dir = cfg.run_dir
    remote = "://" in run_dir
    final = staging(run_dir) / EXPORT if remote else Path(run_dir) / EXPORT
    work = final.with_name(f"{final.name}.tmp")
    dtype = torch.bfloat16 if cfg.trainer.export_dtype == "bf16" else torch.float32
    if trainer.is_fsdp_enabled:
        trainer.save_model(str(work))  # gathers the full state dict; rank 0 writes
    elif trainer.is_world_process_zero():
        model = trainer.accelerator.unwrap_model(trainer.model)
        if peft.r:
            model = model.merge_and_unload()
        shutil.rmtree(work, ignore_errors=True)
        model.to(dtype).save_pretrained(work)
    trainer.accelerator.wait_for_everyone()
    if not trainer.is_world_process_zero():
        return
    if tokenizer_dir != "byte":
        for name in TOKENIZER_FILES:
            if (Path(tokenizer_dir) / name).is_file():
                shutil.copy2(Path(tokenizer_dir) / name, work / name)
    if remote:
        open_run_storage(run_dir).upload_dir(work, EXPORT)
        shutil.rmtree(work, ignore_errors=True)
        return
    shutil.rmtree(final, ignore_errors=True)
    os.replace(work, final)


def run(cfg: RunConfig, peft: PeftSettings) -> int:
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        Trainer,
        TrainingArguments,
        default_data_collator,
    )  # lazy: transformers: seconds, after the config checks
    from transformers.utils import (
        logging as hf_logging,
    )  # lazy: transformers: seconds, after the config checks

    hf_logging.disable_progress_bar()  # per-file progress bars flood job logs
    stop = StopFlag()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    model_dir = _local_dir(cfg.model.init_from, "hf-model")
    config = AutoConfig.from_pretrained(model_dir)
    tokenizer_dir = fetch_tokenizer(tokenizer_source(cfg))
    tokenizer = build_tokenizer(tokenizer_dir, config.vocab_size, cfg.data.eos_token)
    data = open_training_data(cfg.data, tokenizer, config.vocab_size)
    train = WindowDataset(data.train[0])
    evaluate = cfg.trainer.eval_interval > 0 and data.eval.count > 0
    remote = "://" in cfg.run_dir
    checkpoints = os.environ.get("TRAINSTACK_CHECKPOINT_DIR") or f"{cfg.run_dir}/checkpoints"
    output_dir = staging(cfg.run_dir) / CHECKPOINTS if remote else Path(checkpoints)
    metrics = Path(os.environ.get("TRAINSTACK_METRICS") or f"{cfg.run_dir}/{METRICS_FILE}")
    settings = training_arguments(cfg, output_dir=str(output_dir), world=world, cuda=cuda)
    args = TrainingArguments(**settings)
    torch.manual_seed(cfg.seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if peft.r:
        from peft import LoraConfig, get_peft_model  # lazy: peft, with transformers

        lora = LoraConfig(
            r=peft.r,
            lora_alpha=peft.alpha,
            lora_dropout=peft.dropout,
            target_modules=list(peft.target_modules),
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
    tokens_per_step = (
        cfg.data.seq_len * cfg.trainer.micro_batch_size * settings["gradient_accumulation_steps"]
    ) * world
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=WindowDataset(data.eval, eval_windows(cfg, world)) if evaluate else None,
        data_collator=default_data_collator,
        callbacks=_callbacks(metrics, tokens_per_step, stop, cfg),
    )
    if remote:  # a new pod: the newest complete checkpoint back from the run dir
        if local_rank_zero():
            fetch_newest(cfg.run_dir, output_dir)
        trainer.accelerator.wait_for_everyone()
    resume = newest_complete(output_dir)
    if resume is not None and trainer.is_world_process_zero():
        print(f"[runner=hf] resumed from {resume.name}", flush=True)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    if stop.requested:
        return EXIT_PREEMPTED
    _export(trainer, peft, cfg, tokenizer_dir)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.runners.hf")
    parser.add_argument("--config", required=True)
    options = parser.parse_args(argv)
    try:
        cfg, peft = load(options.config)
        check_supported(cfg)
    except ConfigError as exc:
        _say(str(exc))
        return EXIT_BAD_INPUT
    try:
        import peft as _peft  # noqa: F401  # lazy: the hf-runner extra: absent is exit 2
        import transformers  # noqa: F401  # lazy: the hf-runner extra: absent is exit 2
    except ImportError as exc:
        _say(f"runner=hf needs the hf-runner extra (the trainer image's -hf variant): {exc}")
        return EXIT_BAD_INPUT
    try:
        return run(cfg, peft)
    except ConfigError as exc:
        _say(str(exc))
        return EXIT_BAD_INPUT
