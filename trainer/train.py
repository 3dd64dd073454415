"""The training program, top to bottom: check the input, set up ranks, build and shard the
model, resume from the newest committed checkpoint, train, checkpoint, stop on SIGTERM."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from omegaconf import OmegaConf
from torch.optim.lr_scheduler import LRScheduler

from contract.checkpoints import step_dir
from contract.config import EXIT_OK, EXIT_PREEMPTED, RunConfig
from contract.plan import Plan, make_plan, tokenizer_source
from contract.run_dir import CONFIG_FILE
from trainer.checkpoint import Checkpointer, resume_newest
from trainer.checkpoint.checkpointer import FAILED, CheckpointError, describe, format_failures
from trainer.checkpoint.fit import check_checkpoints_fit
from trainer.checkpoint.layout import committed_steps
from trainer.checkpoint.source import KEY as RESUME_FROM
from trainer.checkpoint.source import ResumeSource, check_fits, locate
from trainer.data import (
    IGNORE_INDEX,
    Batch,
    TrainBatches,
    TrainingData,
    eval_batches,
    open_training_data,
)
from trainer.distributed import Distributed, init_distributed, shutdown
from trainer.errors import ConfigError, warn
from trainer.faults import maybe_delay_step
from trainer.hf.config import read_hf_config
from trainer.hf.export import export_run
from trainer.hf.hub import download, is_hub
from trainer.hf.load import check_local_init_from, fetch_tokenizer, keep_model_files, load_init_from
from trainer.loss import loss_sum, step_targets
from trainer.memory import window_peak_memory
from trainer.metrics import MetricsLogger
from trainer.mfu import device_peak_flops, mfu_percent
from trainer.model.lora import add_lora
from trainer.model.model import Transformer
from trainer.optim import build_optimizer, build_scheduler, clip_grad_norm
from trainer.parallelize import parallelize
from trainer.preemption import StopSignal, agree
from trainer.profiling import StepProfiler
from trainer.step_timer import StepTimer, device_synchronize
from trainer.storage import StorageError, open_run_storage
from trainer.tokenizer import build_tokenizer
from trainer.train_state import (
    Progress,
    checkpoint_state,
    restore,
    restore_weights,
    trained_only,
)


def run(cfg: RunConfig) -> int:
    # 1. Everything that can be wrong with the input, before any rank, file or checkpoint.
    stop = StopSignal()
    hub_id = cfg.model.init_from if is_hub(cfg.model.init_from) else None
    if hub_id:  # fetched once into the Hugging Face cache, then read like any directory
        cfg.model.init_from = download(hub_id)
    init_from = cfg.model.init_from
    hf_config = read_hf_config(init_from) if init_from else None
    plan = make_plan(cfg, world_size=int(os.environ.get("WORLD_SIZE", "1")), hf_config=hf_config)
    if init_from:
        check_local_init_from(init_from, plan.model)
    try:
        storage = open_run_storage(cfg.run_dir)
    except StorageError as exc:
        raise ConfigError(f"run_dir: {exc}") from None
    own_steps = committed_steps(storage)  # one listing: for the fit check, resume_from, init_from
    check_checkpoints_fit(storage, plan.model, own_steps)  # before config.yaml is rewritten
    source = _resume_source(cfg, plan, own_steps)  # before the data: reading that takes longer
    tokenizer_dir = fetch_tokenizer(tokenizer_source(cfg))
    tokenizer = build_tokenizer(tokenizer_dir, plan.model.vocab_size, cfg.data.eos_token)
    data = open_training_data(cfg.data, tokenizer, plan.model.vocab_size)

    # 2. Ranks, model, optimizer.
    env = init_distributed(plan.dp_replicate, cfg.trainer.collective_timeout_s)
    try:
        torch.manual_seed(cfg.seed)
        model = _meta_model(cfg, plan)
        parallelize(
            model,
            env.mesh,
            mixed_precision=cfg.trainer.mixed_precision,
            activation_checkpoint=cfg.trainer.activation_checkpoint,
            compile_blocks=cfg.trainer.compile,
        )
        model.to_empty(device=env.device)
        resolved = OmegaConf.to_container(OmegaConf.structured(cfg))
        # The record states the architecture built, also where the config left it to a
        # preset or to init_from's config.json: the run dir describes its model alone.
        resolved["model"].update(asdict(plan.model))  # type: ignore[index, union-attr]
        if hub_id:
            resolved["model"]["init_from"] = hub_id  # type: ignore[index]
        metrics = MetricsLogger(
            storage,
            cfg.trainer.metrics,
            enabled=env.is_main,
            first_step=0,
            total_steps=cfg.trainer.max_steps,
            run_config=resolved,  # type: ignore[arg-type]
        )
        checkpointer = Checkpointer(storage, env, cfg.trainer.checkpoint, report=metrics.log)
        started_from = _initialize(
            model, cfg, plan, env, later=bool(own_steps) or source is not None
        )
        optimizer = build_optimizer(model, cfg.trainer)
        scheduler = build_scheduler(optimizer, cfg.trainer)
        if env.is_main:
            storage.write_text(CONFIG_FILE, OmegaConf.to_yaml(resolved))
            keep_model_files(storage, init_from, None if tokenizer_dir == "byte" else tokenizer_dir)
        if started_from:
            metrics.note(started_from)
        parts = Parts(cfg, plan, env, model, optimizer, scheduler, checkpointer, metrics, source)
        try:
            return _train(parts, data, stop)
        finally:
            data.close()
            checkpointer.close()
            metrics.close()
    finally:
        stop.restore()
        shutdown(after_error=sys.exc_info()[0] is not None)


def _initialize(
    model: Transformer,
    cfg: RunConfig,
    plan: Plan,
    env: Distributed,
    *,
    later: bool,
) -> str | None:
    """Weights before training: `model.init_from`'s when the run has no checkpoint of its own
    yet and no `trainer.resume_from` (`later`: either is loaded later), else seeded random
    ones. A LoRA run's checkpoints hold only its adapters: its frozen base is always
    init_from's."""
    source, lora = cfg.model.init_from, bool(cfg.model.lora.rank)
    if source is None or (later and not lora):
        model.init_weights(cfg.seed)
        return None
    started = time.perf_counter()
    read = load_init_from(model, source, plan.model, env)
    if lora:
        model.init_weights(cfg.seed, adapters_only=True)
    model.init_rope()
    took = time.perf_counter() - started
    return f"initialized from {source}: {read / 2**20:.1f} MiB read by rank 0 in {took:.2f}s"


def _resume_source(cfg: RunConfig, plan: Plan, own_steps: list[int]) -> ResumeSource | None:
    """`trainer.resume_from`, checked before any rank starts: a committed checkpoint whose
    files are whole and whose tensors fit the model (else exit 2). None when unset or once the
    run has a committed checkpoint of its own (a restart resumes from its own)."""
    if cfg.trainer.resume_from is None or own_steps:
        return None
    source = locate(cfg.trainer.resume_from)
    model = _meta_model(cfg, plan)
    saved = model.state_dict()
    if cfg.model.lora.rank:  # its checkpoints hold the adapters only, as checkpoint_state saves
        saved = trained_only(model, saved)
    check_fits(source, {name: tuple(tensor.shape) for name, tensor in saved.items()})
    return source


def _meta_model(cfg: RunConfig, plan: Plan) -> Transformer:
    """The model `plan` describes on the meta device (no memory), with `model.lora`'s adapters
    when its rank is set: what `run` shards and what a resume_from checkpoint must fit."""
    with torch.device("meta"):
        model = Transformer(plan.model)
    lora = cfg.model.lora
    if lora.rank:
        add_lora(model, lora.rank, lora.alpha, lora.dropout, list(lora.targets))
    return model


def _start_from(parts: Parts, source: ResumeSource) -> Progress:
    """Load `trainer.resume_from` into a run that has no checkpoint of its own: everything
    (model, optimizer, schedule, progress, RNG) or, weights only, the model alone."""
    env, t = parts.env, parts.cfg.trainer
    reader = Checkpointer(source.storage, env, t.checkpoint)
    try:
        if t.resume_weights_only:
            restore_weights(reader, source.step, parts.model)
            progress, how = Progress(), "weights only: fresh optimizer and schedule, step 0"
        else:
            progress, rng_restored = restore(
                reader,
                source.step,
                parts.model,
                parts.optimizer,
                parts.scheduler,
                rank=env.rank,
                device=env.device,
            )
            how = f"at step {progress.step}" + ("" if rng_restored else ", RNG states not restored")
    except FAILED as exc:
        failures = format_failures(describe(exc))
        raise CheckpointError(f"{RESUME_FROM}: {source.uri} does not load ({failures})") from None
    finally:
        reader.close()
    parts.metrics.note(f"started from {source.uri} ({RESUME_FROM}; {how})")
    return progress


@dataclass
class Parts:
    """What the loop works with, built by `run`."""

    cfg: RunConfig
    plan: Plan
    env: Distributed
    model: Transformer
    optimizer: torch.optim.Optimizer
    scheduler: LRScheduler
    checkpointer: Checkpointer
    metrics: MetricsLogger
    source: ResumeSource | None = None
    """`trainer.resume_from`, checked; None once the run has its own checkpoints."""


def _train(parts: Parts, data: TrainingData, stop: StopSignal) -> int:
    cfg, plan, env, model = parts.cfg, parts.plan, parts.env, parts.model
    optimizer, scheduler = parts.optimizer, parts.scheduler
    checkpointer, metrics = parts.checkpointer, parts.metrics
    t = cfg.trainer
    metrics.note(plan.describe())
    if data.malformed_lines:
        metrics.note(
            f"data: {data.malformed_lines} malformed lines skipped "
            f"(under data.max_bad_fraction={cfg.data.max_bad_fraction})"
        )

    # 3. Resume from the newest committed checkpoint that loads, if any.
    progress = Progress()
    resumed = resume_newest(
        checkpointer,
        lambda step: restore(
            checkpointer, step, model, optimizer, scheduler, rank=env.rank, device=env.device
        ),
    )
    if resumed is not None:
        latest, (progress, rng_restored) = resumed
        note = "" if rng_restored else " (RNG states not restored: new rank count)"
        metrics.note(
            f"resumed from {checkpointer.storage.uri(step_dir(latest))}"
            f" at step {progress.step}{note}"
        )
    elif parts.source is not None:
        progress = _start_from(parts, parts.source)
    weights_only_start = resumed is None and parts.source is not None and t.resume_weights_only

    batches = TrainBatches(
        data.train,
        seed=cfg.seed,
        dp_rank=env.dp_rank,
        dp_size=env.dp_size,
        weights=data.weights,
    )
    held_out = eval_batches(
        data.eval,
        dp_rank=env.dp_rank,
        dp_size=env.dp_size,
        micro_batch_size=plan.micro_batch_size,
        count=t.eval_batches,
    )
    if t.eval_interval and not held_out:
        warn("no held-out sequences (data.eval_fraction too small for data.seq_len): no eval")
    if weights_only_start and t.eval_interval and held_out:  # the loaded weights' baseline
        metrics.log({"step": 0, "eval_loss": _evaluate(model, held_out, env.device)})
    peak, peak_source = device_peak_flops(env.device, t.peak_tflops)
    if peak is None:
        metrics.note(
            f"MFU logged as null: {peak_source} has no known peak; set trainer.peak_tflops"
        )
    flops_per_token = plan.model.training_flops_per_token(plan.seq_len)
    params = [p for p in model.parameters() if p.requires_grad]

    def save(step: int, asynchronous: bool, final: bool = False) -> None:
        state = checkpoint_state(
            model, optimizer, scheduler, progress, rank=env.rank, device=env.device
        )
        started = time.perf_counter()
        committed = checkpointer.save(step, state, asynchronous=asynchronous, final=final)
        if asynchronous or committed:  # a failed save has said so already
            kind = "started async" if asynchronous else "saved"
            metrics.note(f"checkpoint step {step} {kind} in {time.perf_counter() - started:.2f}s")

    # 4. The loop.
    stop.arm()
    timer, losses = StepTimer(device_synchronize(env.device)), []
    profiler = StepProfiler(t.profile.steps, checkpointer.storage, rank=env.rank, device=env.device)
    while progress.step < t.max_steps:
        profiler.step_starts(progress.step + 1)
        with timer.phase("data_wait"):
            micro = batches.micro_batches(
                progress.samples_seen, plan.micro_batch_size, plan.grad_accum_steps
            )
        with timer.phase("forward_backward"):
            loss = _train_step(model, micro, env.device, plan)
        with timer.phase("optimizer"):
            grad_norm = clip_grad_norm(params, t.grad_clip)
            lr = scheduler.get_last_lr()[0]
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        progress.step += 1
        progress.samples_seen += plan.global_batch_size
        with timer.phase("checkpoint_stall"):
            stopping, writing = agree(stop.received, not checkpointer.pending_done())
            if checkpointer.pending_step is not None and not writing:
                checkpointer.commit_pending()
        timer.step_done()
        if written := profiler.step_done(progress.step):
            metrics.note(f"profile written to {written} (one trace per rank)")
        maybe_delay_step()
        losses.append(loss)

        step = progress.step
        if step % t.log_interval == 0 or step == t.max_steps or stopping:
            tokens_per_s = plan.tokens_per_step * timer.steps / timer.seconds
            per_device = tokens_per_s / env.world_size
            record = {
                "step": step,
                "loss": _mean_across_ranks(torch.stack(losses).mean()),
                "lr": lr,
                "grad_norm": grad_norm.item(),
                "tokens_seen": progress.samples_seen * plan.seq_len,
                **_tokens_by_source(batches, data, progress.samples_seen, plan.seq_len),
                "throughput/tokens_per_s": tokens_per_s,
                "mfu/percent": mfu_percent(per_device, flops_per_token, peak),
                "mfu/peak_source": peak_source,
                **timer.close_window(),
                **window_peak_memory(env.device),
            }
            metrics.log(record)
            losses = []
        eval_due = t.eval_interval and (step % t.eval_interval == 0 or step == t.max_steps)
        if eval_due and held_out and not stopping:  # SIGTERM's grace period is for the save
            metrics.log({"step": step, "eval_loss": _evaluate(model, held_out, env.device)})

        if stopping:
            checkpointer.wait()
            if checkpointer.last_committed != step:
                save(step, asynchronous=False, final=True)
            metrics.note(f"stopped by SIGTERM after step {step}; exit {EXIT_PREEMPTED}")
            return EXIT_PREEMPTED
        interval = t.checkpoint.interval
        if interval and step % interval == 0 and step < t.max_steps:
            with timer.phase("checkpoint_stall"):
                save(step, asynchronous=t.checkpoint.async_save)

    # 5. The end: a final checkpoint (synchronous), every write committed.
    checkpointer.wait()
    if checkpointer.last_committed != progress.step:
        save(progress.step, asynchronous=False, final=True)
    if t.export_hf and env.is_main:
        result = export_run(
            cfg.run_dir,
            checkpointer.storage.uri("export"),
            step=progress.step,
            dtype=t.export_dtype,
            replace=True,
        )
        metrics.note(f"exported step {result.step} to {result.destination}")
    metrics.note(f"done: {progress.step} steps")
    return EXIT_OK


def _train_step(
    model: torch.nn.Module, micro: list[Batch], device: torch.device, plan: Plan
) -> torch.Tensor:
    """Forward/backward over the micro batches; returns this rank's share of the step's mean
    loss (detached; the mean across ranks of the shares is the step's loss)."""
    # FSDP averages gradients over the data-parallel ranks: x dp_size makes that a sum, so
    # the gradient is that of (sum of target losses) / (targets in the step).
    scale = plan.dp_size / step_targets(micro, device, plan.tokens_per_step)
    total = torch.zeros((), device=device)
    for batch in micro:
        batch = batch.to(device)
        logits = model(batch.inputs, positions=batch.positions, documents=batch.documents)
        loss = loss_sum(logits, batch.labels) * scale
        loss.backward()
        total += loss.detach()
    return total


@torch.no_grad()
def _evaluate(model: torch.nn.Module, held_out: list[Batch], device: torch.device) -> float:
    """Mean loss over the held-out targets of every rank (masked like training)."""
    model.eval()
    total = torch.zeros(2, device=device)  # loss sum, targets
    for batch in held_out:
        batch = batch.to(device)
        logits = model(batch.inputs, positions=batch.positions, documents=batch.documents)
        total[0] += loss_sum(logits, batch.labels)
        total[1] += (batch.labels != IGNORE_INDEX).sum()
    model.train()
    dist.all_reduce(total)
    return (total[0] / total[1].clamp(min=1)).item()


def _tokens_by_source(
    batches: TrainBatches, data: TrainingData, samples_seen: int, seq_len: int
) -> dict[str, int]:
    """`data/tokens_seen/<path>` per mixture source: a function of samples_seen, so exact
    across resume and rank counts."""
    if len(data.train) == 1:
        return {}
    seen = batches.tokens_by_source(samples_seen, seq_len)
    return {f"data/tokens_seen/{name}": n for name, n in zip(data.names, seen, strict=True)}


def _mean_across_ranks(value: torch.Tensor) -> float:
    # gloo has no AVG reduction: sum, then divide.
    value = value.detach().clone().reshape(1)
    dist.all_reduce(value)
    return (value / dist.get_world_size()).item()
