"""Read `--config PATH [key=value ...]` into `TrainerJobConfig` and check it before any work.

Everything that can be wrong with the input is found here (or while reading the data), before
the process group, the run dir or any checkpoint is touched, and reported as one `ConfigError`
line naming the key and what is allowed.

torch-free on purpose: `jobs/validate_trainer.py` calls `make_plan` for every world size a job
can run at, so a bad value fails at launch rather than on the nodes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from contract.config import CHOICES, TrainerJobConfig
from contract.model.args import MODEL_PRESETS, ModelArgs, family_problem, model_args_from_config
from contract.model.families import PROJECTIONS
from contract.plan import model_label
from trainer.errors import ConfigError
from trainer.hf.config import resolve_init_from_args


def load_config(path: str, overrides: list[str]) -> TrainerJobConfig:
    if not Path(path).is_file():
        raise ConfigError(f"--config: no such file {path!r}")
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ConfigError(f"override {bad[0]!r}: expected key=value, e.g. trainer.max_steps=100")
    try:
        from_file = OmegaConf.load(path)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config: {path!r} is not valid YAML: {_yaml_problem(exc)}") from None
    if not isinstance(from_file, DictConfig):
        allowed = ", ".join(f.name for f in dataclasses.fields(TrainerJobConfig))
        raise ConfigError(f"--config: {path!r} must be a mapping with the keys {allowed}")
    from_cli = []
    for override in overrides:
        try:
            from_cli.append(OmegaConf.from_dotlist([override]))
        except yaml.YAMLError as exc:
            problem = f"value is not valid YAML: {_yaml_problem(exc)}"
            raise ConfigError(f"override {override!r}: {problem}") from None
    try:
        merged = OmegaConf.merge(OmegaConf.structured(TrainerJobConfig), from_file, *from_cli)
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise ConfigError(_describe(exc)) from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    return f"{getattr(exc, 'problem', None) or exc}{where}"


def _describe(exc: OmegaConfBaseException) -> str:
    """OmegaConf's multi-line message as one line: `<full key>: <problem>[; allowed: ...]`."""
    key = getattr(exc, "full_key", None) or "config"
    problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    section = _section_of(key)
    if "not in" in problem and section is not None:
        allowed = ", ".join(f.name for f in dataclasses.fields(section))
        return f"{key}: unknown key; allowed keys here: {allowed}"
    return f"{key}: {problem}"


def _section_of(full_key: str) -> type | None:
    """The dataclass holding `full_key` (for listing the keys allowed next to it)."""
    section: type = TrainerJobConfig
    for part in full_key.split(".")[:-1]:
        field = next((f for f in dataclasses.fields(section) if f.name == part), None)
        if field is None or not dataclasses.is_dataclass(field.default_factory):  # type: ignore[arg-type]
            return None
        section = field.default_factory  # type: ignore[assignment]
    return section


@dataclass(frozen=True)
class Plan:
    """Numbers derived from the config and the world size, printed once at start-up."""

    model: ModelArgs
    dp_size: int
    """Data-parallel ranks in all: dp_replicate x dp_shard (the world size)."""
    micro_batch_size: int
    grad_accum_steps: int
    global_batch_size: int
    seq_len: int
    dp_replicate: int = 1
    dp_shard: int = 1

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_len

    def describe(self) -> str:
        mesh = f" (replicate {self.dp_replicate} x shard {self.dp_shard})"
        return (
            f"model {self.model.num_params() / 1e6:.1f}M params, dp={self.dp_size}"
            f"{mesh if self.dp_replicate > 1 else ''}, "
            f"global batch {self.global_batch_size} = micro {self.micro_batch_size} x accum "
            f"{self.grad_accum_steps} x dp {self.dp_size}, seq_len {self.seq_len}, "
            f"{self.tokens_per_step} tokens/step"
        )


def make_plan(
    cfg: TrainerJobConfig, world_size: int, hf_config: dict[str, Any] | None = None
) -> Plan:
    """`hf_config`: the `model.init_from` checkpoint's config.json (it decides the
    architecture); without it a run with init_from is planned from the preset `model.name`
    (the launcher's view of an s3:// checkpoint; the trainer checks the two agree)."""
    _check_choices(cfg)
    _check_ranges(cfg)
    _check_profile(cfg)
    _check_resume(cfg)
    check_data_sources(cfg.data)
    args = _model_args(cfg, hf_config)
    _check_model(args)
    _check_lora(cfg)
    if cfg.data.seq_len > args.max_seq_len:
        raise ConfigError(
            f"data.seq_len: {cfg.data.seq_len} exceeds the model's maximum sequence length "
            f"{args.max_seq_len} (model {model_label(cfg)!r}); allowed: 1..{args.max_seq_len}"
        )
    t = cfg.trainer
    replicate, shard = data_parallel_mesh(cfg, world_size)
    per_pass = t.micro_batch_size * world_size
    accum = grad_accum_steps(cfg, world_size)
    return Plan(
        args,
        world_size,
        t.micro_batch_size,
        accum,
        per_pass * accum,
        cfg.data.seq_len,
        dp_replicate=replicate,
        dp_shard=shard,
    )


def grad_accum_steps(cfg: TrainerJobConfig, world_size: int) -> int:
    """Micro batches per step: `trainer.grad_accum_steps`, or what `trainer.global_batch_size`
    makes of micro_batch_size x `world_size` data-parallel ranks (ConfigError if it can't)."""
    t = cfg.trainer
    if t.global_batch_size is None:
        return t.grad_accum_steps
    per_pass = t.micro_batch_size * world_size
    if t.global_batch_size % per_pass:
        raise ConfigError(
            f"trainer.global_batch_size: {t.global_batch_size} is not divisible by "
            f"trainer.micro_batch_size ({t.micro_batch_size}) x data-parallel ranks "
            f"({world_size}) = {per_pass}; allowed: a positive multiple of {per_pass}"
        )
    return t.global_batch_size // per_pass


def _check_resume(cfg: TrainerJobConfig) -> None:
    t = cfg.trainer
    if t.resume_from is not None and not t.resume_from.strip():
        raise ConfigError(
            "trainer.resume_from: is empty; allowed: null, or a run dir or checkpoint path"
        )
    if t.resume_weights_only and t.resume_from is None:
        raise ConfigError(
            "trainer.resume_weights_only: needs trainer.resume_from (the checkpoint whose "
            "weights to start from); allowed without it: false"
        )


def data_parallel_mesh(cfg: TrainerJobConfig, world_size: int) -> tuple[int, int]:
    """(dp_replicate, dp_shard) at `world_size`; their product must be the world size."""
    p = cfg.trainer.parallel
    replicate = p.dp_replicate
    if replicate < 1 or replicate > world_size or world_size % replicate:
        raise ConfigError(
            f"trainer.parallel.dp_replicate: {replicate} does not divide the world size "
            f"{world_size}; allowed: a divisor of {world_size} (with trainer.parallel.dp_shard)"
        )
    shard = world_size // replicate if p.dp_shard == -1 else p.dp_shard
    if replicate * shard != world_size:
        raise ConfigError(
            f"trainer.parallel.dp_replicate x trainer.parallel.dp_shard: {replicate} x "
            f"{p.dp_shard} = {replicate * p.dp_shard} must equal the world size {world_size}; "
            "allowed: a product equal to it (dp_shard=-1: world size / dp_replicate)"
        )
    return replicate, shard


def _model_args(cfg: TrainerJobConfig, hf_config: dict[str, Any] | None) -> ModelArgs:
    model = cfg.model
    if model.init_from is not None and hf_config is not None:
        return resolve_init_from_args(model, hf_config)
    if model.name is None:
        needs = "model.init_from" if model.init_from is None else "a local model.init_from"
        raise ConfigError(
            f"model.name: null needs {needs} (whose config.json gives the architecture); "
            f"allowed: {', '.join(MODEL_PRESETS)}"
        )
    try:
        return model_args_from_config(model)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _value(cfg: TrainerJobConfig, key: str) -> Any:
    # A plain attribute walk: `cfg` is already typed, and wrapping it in OmegaConf again would
    # cost ~10 ms per call — on every world size of every sweep point `jobs` validates.
    return functools.reduce(getattr, key.split("."), cfg)


def _check_choices(cfg: TrainerJobConfig) -> None:
    for key, allowed in CHOICES.items():
        value = _value(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{key}: {value!r} is not allowed; allowed: {', '.join(allowed)}")


# key -> (lowest allowed, highest allowed or None, how to say it)
_RANGES: dict[str, tuple[float, float | None, str]] = {
    "trainer.max_steps": (1, None, "an integer >= 1"),
    "trainer.micro_batch_size": (1, None, "an integer >= 1"),
    "trainer.grad_accum_steps": (1, None, "an integer >= 1"),
    "trainer.global_batch_size": (1, None, "null or an integer >= 1"),
    "trainer.log_interval": (1, None, "an integer >= 1"),
    "trainer.eval_interval": (0, None, "0 (off) or an integer >= 1"),
    "trainer.eval_batches": (1, None, "an integer >= 1"),
    "trainer.warmup_steps": (0, None, "an integer >= 0"),
    "trainer.lr": (1e-12, None, "a number > 0"),
    "trainer.min_lr_ratio": (0, 1, "a number in [0, 1]"),
    "trainer.grad_clip": (0, None, "0 (off) or a number > 0"),
    "trainer.peak_tflops": (1e-6, None, "null or a positive TFLOP/s figure, e.g. 989.4"),
    "trainer.collective_timeout_s": (10, None, "an integer >= 10 (seconds)"),
    "trainer.checkpoint.interval": (0, None, "0 (only at the end) or an integer >= 1"),
    "trainer.checkpoint.keep": (1, None, "an integer >= 1"),
    "trainer.checkpoint.max_consecutive_failures": (1, None, "an integer >= 1"),
    "data.seq_len": (1, None, "an integer >= 1"),
    "data.eval_fraction": (0, 0.5, "a fraction in [0, 0.5]"),
    "data.max_bad_fraction": (0, 1, "a fraction in [0, 1]"),
}


def _check_ranges(cfg: TrainerJobConfig) -> None:
    for key, (low, high, allowed) in _RANGES.items():
        value = _value(cfg, key)
        if value is not None and (value < low or (high is not None and value > high)):
            raise ConfigError(f"{key}: {value!r} is out of range; allowed: {allowed}")


def _check_profile(cfg: TrainerJobConfig) -> None:
    steps, max_steps = list(cfg.trainer.profile.steps), cfg.trainer.max_steps
    if steps and not (len(steps) == 2 and 1 <= steps[0] <= steps[1] <= max_steps):
        raise ConfigError(
            f"trainer.profile.steps: {steps} is not allowed; allowed: [] (off) or "
            f"[first, last] with 1 <= first <= last <= trainer.max_steps ({max_steps})"
        )


def check_data_sources(data: Any) -> None:
    """Exactly one of data.path and data.mixture; every mixture entry a path and a weight > 0."""
    mixture = list(data.mixture)
    if data.path is not None and mixture:
        raise ConfigError(
            "data.mixture: given together with data.path; allowed: one of them "
            "(set data.path=null to train on the mixture)"
        )
    if data.path is None and not mixture:
        raise ConfigError(
            "data.mixture: empty and data.path is null; allowed: a data.path, or a list of "
            "{path: <prepared dataset>, weight: <number > 0>}"
        )
    for index, source in enumerate(mixture):
        if not source.path:
            raise ConfigError(f"data.mixture[{index}].path: empty; allowed: a prepared dataset")
        if not (math.isfinite(source.weight) and source.weight > 0):
            raise ConfigError(
                f"data.mixture[{index}].weight: {source.weight!r} is not allowed; "
                "allowed: a finite number > 0"
            )


def _check_lora(cfg: TrainerJobConfig) -> None:
    lora = cfg.model.lora
    if lora.rank < 0:
        raise ConfigError(f"model.lora.rank: {lora.rank} is out of range; allowed: 0 (off) or >= 1")
    if not lora.rank:
        return
    if cfg.model.init_from is None:
        raise ConfigError(
            "model.lora.rank: LoRA adapts a pretrained model; allowed: 0 without "
            "model.init_from, >= 1 with it"
        )
    if not lora.alpha > 0:
        raise ConfigError(f"model.lora.alpha: {lora.alpha!r} is out of range; allowed: > 0")
    if not 0 <= lora.dropout < 1:
        raise ConfigError(f"model.lora.dropout: {lora.dropout!r} is out of range; allowed: [0, 1)")
    known = PROJECTIONS
    bad = [t for t in lora.targets if t not in known]
    if bad or not lora.targets:
        raise ConfigError(
            f"model.lora.targets: {bad or list(lora.targets)} is not allowed; allowed: a "
            f"non-empty list of {', '.join(known)}"
        )


def _check_model(args: ModelArgs) -> None:
    problem = family_problem(args)
    if problem:
        raise ConfigError(problem)
    floored = args.dim % args.n_heads and args.head_dim == args.dim // args.n_heads
    if args.head_dim % 2 or floored:  # type: ignore[operator]
        raise ConfigError(
            f"model.dim: {args.dim} must be a multiple of model.n_heads ({args.n_heads}) "
            "with an even head dimension (RoPE rotates pairs), or model.head_dim set even"
        )
    if args.n_heads % args.n_kv_heads:
        raise ConfigError(
            f"model.n_kv_heads: {args.n_kv_heads} must divide model.n_heads ({args.n_heads})"
        )
