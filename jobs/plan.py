"""The plan printed before launch: size, placement, $/hour and the estimated cost.

Step time is the configured `compute.step_time_s` (e.g. measured on a previous run) when set;
otherwise it is estimated from the model's training FLOPs per token and the GPU's dense BF16
peak at `ASSUMED_MFU`, and the plan says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from catalog import SPOT_DISCOUNT, get_instance_type
from contract.gpu_peaks import gpu_peak_flops
from contract.model.args import MODEL_PRESETS, stated_args
from contract.model.families import PROJECTIONS
from contract.model.hf_config import model_args_from_hf, unsupported
from contract.plan import model_label, tokenizer_source
from jobs.runners import runner_for
from jobs.validate_common import in_pods
from jobs.validate_eval import eval_settings
from jobs.validate_inputs import inside_image
from trainer.errors import ConfigError

if TYPE_CHECKING:
    from contract.plan import Plan as TrainerPlan
    from jobs.spec import JobSpec

ASSUMED_MFU = 0.35
"""Typical FSDP2 Llama MFU on H100/A100 at these sizes; used only without a step time."""


@dataclass(frozen=True)
class Plan:
    run_id: str
    sweep_id: str | None
    backend: str
    model: str
    params: int | None
    """None when another runner than the built-in trainer sizes the model."""
    nodes: int
    procs_per_node: int
    instance_type: str | None
    gpu_model: str | None
    tokens_per_step: int | None
    max_steps: int | None
    """None for runner=command: the program decides."""
    hourly_usd: float | None
    """For the whole job (all nodes)."""
    hourly_source: str
    step_time_s: float | None
    step_time_source: str
    run_dir: str
    warnings: tuple[str, ...] = ()
    data: tuple[tuple[str, float], ...] = ()
    """(path, share of samples) of each training source: one, or a mixture's."""
    runner: str = "trainstack (built-in trainer)"
    """Which runner and what it runs (its `describe`, jobs/runners/)."""
    trained: str = ""
    """What of the model trains when not all of it does (LoRA: how many parameters)."""
    builtin_runner: bool = True
    """The runner is the built-in trainer (its `builtin`): the plan names no runner line."""
    reads_model: bool = True
    """The runner reads model.* (its `reads_model`): the plan has a model line even when the
    launcher does not size the model."""
    evaluation: str = ""
    """What `eval.every_checkpoint` scores once the run has trained ("": nothing)."""

    @property
    def hours(self) -> float | None:
        if self.step_time_s is None or self.max_steps is None:
            return None
        return self.max_steps * self.step_time_s / 3600

    @property
    def cost_usd(self) -> float | None:
        hours = self.hours
        return None if hours is None or self.hourly_usd is None else hours * self.hourly_usd

    def summary(self) -> dict[str, Any]:
        """Plain figures (the sweep summary lists one per point)."""
        cost = self.cost_usd
        return {
            "run_id": self.run_id,
            "model": self.model,
            "runner": self.runner,
            "params": self.params,
            "nodes": self.nodes,
            "procs_per_node": self.procs_per_node,
            "instance_type": self.instance_type,
            "hourly_usd": self.hourly_usd,
            "step_time_s": self.step_time_s,
            "step_time_source": self.step_time_source,
            "max_steps": self.max_steps,
            "estimated_hours": None if self.hours is None else round(self.hours, 3),
            "estimated_cost_usd": None if cost is None else round(cost, 2),
        }

    def one_line(self) -> str:
        where = f"{self.nodes} x {self.instance_type}" if self.instance_type else "local"
        cost = "" if self.cost_usd is None else f", est. ${self.cost_usd:,.2f}"
        steps = "" if self.max_steps is None else f", {self.max_steps} steps"
        return f"{self.run_id}: {self.model}, {where}{steps}{cost}"

    def __str__(self) -> str:
        where = (
            f"{self.nodes} x {self.instance_type} ({self.procs_per_node} x {self.gpu_model})"
            if self.instance_type
            else f"this machine, {self.procs_per_node} CPU processes"
        )
        lines = [
            f"run      {self.run_id}" + (f"  (sweep {self.sweep_id})" if self.sweep_id else "")
        ]
        if not self.builtin_runner:
            lines.append(f"runner   {self.runner}")
        if self.params is not None:
            trained = f"; {self.trained}" if self.trained else ""
            lines.append(f"model    {self.model}, {self.params / 1e6:,.1f}M parameters{trained}")
        elif self.reads_model:
            trained = f"; {self.trained}" if self.trained else ""
            lines.append(f"model    {self.model}{trained}")
        lines.append(f"compute  {where}, backend={self.backend}")
        if self.tokens_per_step is not None:
            lines.append(f"steps    {self.max_steps} x {self.tokens_per_step:,} tokens")
        elif self.max_steps is not None:
            lines.append(f"steps    {self.max_steps}")
        if self.hourly_usd is not None:
            lines.append(f"price    ${self.hourly_usd:,.2f}/hour ({self.hourly_source})")
        if self.step_time_s is not None:
            lines.append(
                f"estimate {self.step_time_s:.3g} s/step ({self.step_time_source}) -> "
                f"{self.hours:.3g} h, ${self.cost_usd or 0:,.2f}"
            )
        elif self.max_steps is not None:
            lines.append(f"estimate {self.step_time_source}")
        if len(self.data) == 1:
            lines.append(f"data     {self.data[0][0]}")
        elif self.data:
            blend = ", ".join(f"{path} {share:.1%}" for path, share in self.data)
            lines.append(f"data     mixture of {len(self.data)}: {blend}")
        lines.append(f"run dir  {self.run_dir}")
        if self.evaluation:
            lines.append(f"eval     {self.evaluation}")
        lines.extend(f"warning  {w}" for w in self.warnings)
        return "\n".join(lines)


def make_plan(
    cfg: Any, spec: JobSpec, trainer_plan: TrainerPlan | None, hf_config: dict | None = None
) -> Plan:
    """`trainer_plan`: the trainer's own figures (model, tokens per step) at the job's size,
    from validation; None for other runners (no size or step estimate: the price per hour).
    `hf_config`: runner=hf's checkpoint config.json where validation read it (LoRA's count)."""
    args = trainer_plan.model if trainer_plan else None
    world = spec.nodes * spec.nproc_per_node
    tokens = trainer_plan.tokens_per_step if trainer_plan else None
    runner = runner_for(cfg)
    command = not runner.reads_model
    compute = cfg.compute
    instance = get_instance_type(spec.instance_type) if spec.instance_type else None
    hourly, hourly_source = None, "local: no charge"
    if compute.hourly_usd is not None:
        hourly, hourly_source = compute.hourly_usd * spec.nodes, "compute.hourly_usd"
    elif instance is not None and compute.capacity == "spot":
        hourly = instance.spot_hourly_usd * spec.nodes
        hourly_source = (
            f"catalog spot estimate (on-demand less {SPOT_DISCOUNT:.0%}), "
            f"{spec.nodes} x ${instance.spot_hourly_usd:,.3f}"
        )
    elif instance is not None:
        hourly = instance.hourly_usd * spec.nodes
        hourly_source = f"catalog on-demand, {spec.nodes} x ${instance.hourly_usd:,.3f}"
        if compute.capacity == "any":
            hourly_source += " (capacity=any: at most this; spot nodes cost less)"
    step_time, step_source = compute.step_time_s, "compute.step_time_s"
    known_gpu = gpu_peak_flops(instance.gpu_model) if instance is not None else None
    if step_time is None and known_gpu is not None and args is not None:
        flops = args.training_flops_per_token(cfg.data.seq_len) * tokens
        step_time = flops / (known_gpu[1] * world * ASSUMED_MFU)
        step_source = f"estimated: FLOPs/token at {ASSUMED_MFU:.0%} MFU of {instance.gpu_model}"
    elif step_time is None and args is None:
        step_source = f"runner={cfg.runner.name}: set compute.step_time_s for an estimate"
    elif step_time is None:
        device = f"{instance.gpu_model} (no known peak)" if instance else "CPU"
        step_source = f"no step time on {device}: set compute.step_time_s for an estimate"
    warnings = []
    if instance is not None and not spec.run_dir.startswith("s3://"):
        warnings.append(
            f"storage.root={cfg.storage.root!r} is inside the pod: checkpoints and metrics "
            "vanish with it (use s3://bucket/prefix, e.g. from stack=<name>)"
        )
    if instance is not None and not command:  # runner=command reads no data.* of ours
        warnings.extend(toy_data_warnings(cfg, f"{spec.nodes} x {spec.instance_type}"))
    warnings.extend(tokenizer_fit_warnings(cfg, args))
    evaluation, eval_warnings = eval_plan(cfg)
    warnings.extend(eval_warnings)
    return Plan(
        run_id=spec.name,
        sweep_id=cfg.sweep_id,
        backend=cfg.backend.name,
        model=model_description(cfg) if args else runner.job_label(cfg),
        params=args.num_params() if args else None,
        nodes=spec.nodes,
        procs_per_node=spec.nproc_per_node,
        instance_type=spec.instance_type,
        gpu_model=instance.gpu_model if instance else None,
        tokens_per_step=tokens,
        max_steps=None if command else cfg.trainer.max_steps,
        hourly_usd=hourly,
        hourly_source=hourly_source,
        step_time_s=step_time,
        step_time_source=step_source,
        run_dir=spec.run_dir,
        warnings=tuple(warnings),
        data=() if command else data_sources(cfg.data),
        runner=runner.describe(cfg),
        builtin_runner=runner.builtin,
        reads_model=runner.reads_model,
        trained=hf_lora_trained(cfg, hf_config) if args is None else lora_trained(cfg, args),
        evaluation=evaluation,
    )


def eval_plan(cfg: Any) -> tuple[str, list[str]]:
    """The plan's eval line and its warning: checkpoints are scored once the run has trained,
    so those `trainer.checkpoint.keep` deleted before then are not."""
    settings = eval_settings(cfg)
    if settings is None:
        return "", []
    limit = "" if settings.limit is None else f", eval.limit={settings.limit:g}"
    tasks = f"{', '.join(settings.tasks)}{limit}"
    line = f"each committed checkpoint, once trained: {tasks}"
    if in_pods(cfg):
        line = (
            f"each committed checkpoint as it lands, one eval Job on 1 GPU of "
            f"{cfg.compute.instance_type} (at most {cfg.eval.max_concurrent} at once, "
            f"submitted while launch --wait follows): {tasks}"
        )
    checkpoint, steps = cfg.trainer.checkpoint, cfg.trainer.max_steps
    interval = checkpoint.interval if checkpoint.interval > 0 else steps
    made = steps // interval + (1 if steps % interval else 0)  # and always one at the end
    if made <= checkpoint.keep:
        return line, []
    return line, [
        f"eval.every_checkpoint: this run commits {made} checkpoints and keeps the newest "
        f"{checkpoint.keep} (trainer.checkpoint.keep): those deleted before it ends are not "
        f"scored; trainer.checkpoint.keep={made} scores them all"
    ]


def lora_trained(cfg: Any, args: Any) -> str:
    """The plan's note of what a LoRA run of the built-in trainer trains."""
    lora = cfg.model.lora
    if args is None or not lora.rank:
        return ""
    return _lora_count(lora.rank, list(lora.targets), args, "them")


def _lora_count(rank: int, targets: list[str], args: Any, whole: str) -> str:
    """rank x (in + out) per adapted projection per block, out of the model's `whole`."""
    count = args.lora_params(rank, targets)
    share = count / args.num_params()
    return f"LoRA r={rank} trains {count:,} of {whole} ({share:.2%}: {', '.join(targets)})"


def hf_lora_trained(cfg: Any, hf_config: dict | None) -> str:
    """The plan's note of what runner=hf's LoRA (runner.peft) trains: counted from the
    checkpoint's config.json as the built-in trainer's would be, where launch read it and the
    architecture is one the trainer knows; otherwise the note says why there is no count."""
    peft = cfg.runner.get("peft")  # runner=hf's LoRA; no other runner has one
    if peft is None or not peft.r:
        return ""
    targets = list(peft.target_modules)
    head = f"LoRA r={peft.r} on {', '.join(targets)}: count not known at launch"
    if hf_config is None:
        return f"{head} (model.init_from is read in the pods)"
    unknown = [t for t in targets if t not in PROJECTIONS]
    if unknown:
        return f"{head} ({', '.join(unknown)}: counted are only {', '.join(PROJECTIONS)})"
    problem = unsupported(hf_config)
    if problem:
        return f"{head} (the launcher does not size {problem})"
    try:
        args = model_args_from_hf(hf_config, cfg.model.init_from)
    except ConfigError as err:
        return f"{head} ({str(err).partition(': ')[2]})"
    return _lora_count(peft.r, targets, args, f"{args.num_params():,} parameters")


SMALL_VOCAB = 32_000
"""Below every common released tokenizer's vocabulary (Llama 2, Mistral: 32,000; Llama 3:
128,256; Qwen: 151,646)."""


def tokenizer_fit_warnings(cfg: Any, args: Any) -> list[str]:
    """A tokenizer read only in the pods (s3://, hf://) for a model whose vocabulary is smaller
    than any released tokenizer's: the job would fail there, after the nodes started. (A local
    tokenizer is loaded at launch and checked against the model's vocabulary.)"""
    source = tokenizer_source(cfg)
    if args is None or "://" not in source or args.vocab_size >= SMALL_VOCAB:
        return []
    return [
        f"data.tokenizer={source} is read in the pods, and model.vocab_size={args.vocab_size} "
        "is smaller than any released tokenizer's: a bigger vocabulary fails the job there; "
        "give the model the tokenizer was made for (e.g. model=llama3_1b for Llama 3's)"
    ]


def toy_data_warnings(cfg: Any, where: str) -> list[str]:
    """GPU nodes given the bundled sample corpus or the byte tokenizer: the defaults of a CPU
    demo, almost never what a cluster job means to train on."""
    toy = []
    if cfg.data.path is not None and inside_image(cfg.data.path):
        toy.append(f"data.path={cfg.data.path} is the bundled sample corpus (a few MB)")
    if tokenizer_source(cfg) == "byte":
        toy.append("the tokenizer is the byte tokenizer (data.tokenizer=byte or null)")
    if not toy:
        return []
    return [
        f"{' and '.join(toy)}: on {where} that trains a demo; give your own "
        "(data=jsonl data.path=s3://... data.tokenizer=<tokenizer dir>)"
    ]


def model_description(cfg: Any) -> str:
    """The model's label, and for a preset some of whose architecture keys were changed,
    which: `tiny (modified: dim, n_layers)` — the name alone would claim the preset's size."""
    label = model_label(cfg)
    preset = MODEL_PRESETS.get(cfg.model.name)
    if preset is None:
        return label
    changed = [k for k, v in stated_args(cfg.model).items() if getattr(preset, k) != v]
    return f"{label} (modified: {', '.join(changed)})" if changed else label


def data_sources(data: Any) -> tuple[tuple[str, float], ...]:
    """(path, share of training samples) per source, as the trainer's mixture schedule
    splits them."""
    if not data.mixture:
        return ((str(data.path), 1.0),)
    total = sum(float(m.weight) for m in data.mixture)
    return tuple((str(m.path), float(m.weight) / total) for m in data.mixture)
