"""A launch with the `run_id` of an existing run: the run's own recorded config, with the
command line's changes on top where a run may change between attempts.

`trainstack launch run_id=X trainer.max_steps=60` resumes X with its model, data and layout
as recorded, whatever the defaults compose to today; a typed key that would change what the
checkpoints were trained with is refused in one line naming it (a new run_id starts afresh).
The record, newest first:

    <state dir>/job/launch.yaml   the whole composed job of its latest launch (local backend)
    <state dir>/job/config.yaml   the trainer's `--config` of that launch (seed, model, data,
                                  trainer), for runs launched before launch.yaml existed
    <run dir>/config.yaml         the trainer's own record (a run started by hand)

The state dir is the run dir, or `runs/<run_id>` when storage.root is s3:// (local files only:
a relaunch reads nothing over the network). Backends write the record only after validation,
atomically, so a launch that fails never changes it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from contract.run_dir import CONFIG_FILE as RUN_CONFIG_FILE
from jobs.backend_registry import recorded_backend
from jobs.compose import compose
from jobs.errors import JobConfigError
from jobs.run_dirs import LOCAL_STATE_ROOT
from jobs.runners import recorded_runner

TRAINER_SECTIONS = ("seed", "model", "data", "trainer")
ABSENT = object()
READ = object()
"""`relaunch_config`'s default: read the record from the run's local files."""

MUTABLE_KEYS = (
    "trainer.max_steps",
    "trainer.log_interval",
    "trainer.eval_interval",
    "trainer.eval_batches",
    "trainer.checkpoint",
    "trainer.metrics",
    "trainer.profile",
    "trainer.peak_tflops",
    "trainer.collective_timeout_s",
    "trainer.activation_checkpoint",
    "trainer.compile",
    "trainer.export_hf",
    "trainer.export_dtype",
    "compute.hourly_usd",
    "compute.step_time_s",
    "backend.wait",
    "backend.preflight",
    "backend.poll_interval_s",
    "job.image",
    "job.image_repository",
    "job.max_restarts",
    "job.max_retries",
    "job.clean_pod_policy",
    "job.ttl_seconds_after_finished",
    "job.active_deadline_seconds",
    "job.queue",
    "job.priority",
    "job.termination_grace_period_seconds",
    "job.secrets",
    "cluster.kubeconfig",
    "cluster.context",
    "eval",
)
"""The keys (and sections: a key under one) a relaunch of an existing run may change: how
long it trains (steps), how often it logs, evaluates and checkpoints (intervals), where its
metrics go (loggers), profiling, speed and memory knobs that leave the numbers trained the
same (compile, activation checkpointing), the estimate's inputs, how the job is run and
retried (image, restarts, queue, deadlines, secrets, which cluster context), and how its
checkpoints are scored once it has trained (`eval.*`). Everything else states the model,
the data and its order, the batch and layout, or where the run lives: a different value
there is a different run, so it needs a new run_id."""

IGNORED_KEYS = ("run_id", "sweep_id")
LAUNCHER_KEYS = ("runner.code",)
"""Set by the launcher, never typed: the record's value stands (a relaunch re-packs
runner.workdir and `jobs.materialize` refuses it, naming the files, when the code changed)."""


def mutable(key: str) -> bool:
    return any(key == k or key.startswith(f"{k}.") for k in MUTABLE_KEYS)


def state_dir(cfg: Any) -> Path:
    """Where the local backend keeps a run's job/ files (jobs.backends.local.backend)."""
    root = cfg.storage.root
    return Path(LOCAL_STATE_ROOT if root.startswith("s3://") else root) / cfg.run_id


def read_record(cfg: Any) -> tuple[str, dict[str, Any]] | None:
    """(where, record) of the run `cfg.run_id` names: the whole job, or its trainer sections;
    None for a new run."""
    from jobs.backends.local.backend import CONFIG_FILE, LAUNCH_FILE  # lazy: start-up (~0.1 s)

    here = state_dir(cfg)
    run_dir = None if cfg.storage.root.startswith("s3://") else here / RUN_CONFIG_FILE
    for path in (here / LAUNCH_FILE, here / CONFIG_FILE, run_dir):
        if path is None or not path.is_file():
            continue
        try:
            record = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise JobConfigError(
                "run_id",
                f"cannot read the record {path} of run {cfg.run_id} ({err}); use a new run_id",
            ) from None
        if isinstance(record, dict):
            if path.name == RUN_CONFIG_FILE:  # a trainer's `--config`: its sections only
                record = trainer_sections(record)
            return str(path), record
    return None


def trainer_sections(record: dict[str, Any]) -> dict[str, Any]:
    """What a relaunch reads of a trainer's `--config` (the run's ConfigMap on a cluster)."""
    return {k: record[k] for k in TRAINER_SECTIONS if k in record}


def typed_scopes(
    overrides: list[str],
    composed: dict[str, Any],
    composing: Callable[[], AbstractContextManager] = nullcontext,
) -> list[str]:
    """The config keys the command line set (`composed`: the composed config's leaves): a
    key, or a section for a group (`model=tiny`); for a group of the global package
    (`experiment=...`, `stack=...`) the keys its option sets, found by composing without it.
    Hydra's own (`hydra/...`) set nothing of the job."""
    scopes: list[str] = []
    for index, override in enumerate(OverridesParser.create().parse_overrides(overrides)):
        key = override.key_or_group
        if key in IGNORED_KEYS or key.split("/")[0].split(".")[0] == "hydra":
            continue
        if any(leaf == key or leaf.startswith(f"{key}.") for leaf in composed):
            scopes.append(key)
            continue
        others = overrides[:index] + overrides[index + 1 :]
        with composing():
            recomposed = compose(others)
        without = leaves(OmegaConf.to_container(recomposed, resolve=False))
        scopes += [k for k, v in composed.items() if without.get(k, ABSENT) != v]
    return scopes


def leaves(value: Any, key: str = "") -> dict[str, Any]:
    """Flat `a.b.c` -> value of a plain container (lists and empty sections are values)."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for name, item in value.items():
            out.update(leaves(item, f"{key}.{name}" if key else str(name)))
        return out
    return {key: value}


def relaunch_config(
    cfg: Any,
    overrides: list[str],
    found: tuple[str, dict[str, Any]] | object | None = READ,
    composing: Callable[[], AbstractContextManager] = nullcontext,
) -> tuple[Any, str | None]:
    """(config to launch, where its record was read or None for a new run). For an existing
    run: the record, with each typed key that changes it applied when `mutable`, else
    JobConfigError naming it. `found`: the run's (where, record), when the caller read it
    elsewhere (the Training API: from the run's ConfigMap on the cluster); READ: from the
    local files (`read_record`). `composing()` is held around each composition (the API's
    shared Hydra lock)."""
    if cfg.run_id is None or cfg.sweep_id is not None:
        return cfg, None
    if found is READ:
        found = read_record(cfg)
    if found is None:
        return cfg, None
    where, record = found  # type: ignore[misc]
    composed = leaves(OmegaConf.to_container(cfg, resolve=False))
    scopes = typed_scopes(overrides, composed, composing)
    merged = recorded_runner(cfg, {k: v for k, v in record.items() if k not in IGNORED_KEYS})
    merged = recorded_backend(cfg, merged)
    maps = free_maps(cfg)
    for key, value in composed.items():
        if key in IGNORED_KEYS + LAUNCHER_KEYS or key.split(".")[0] not in record:
            continue
        if not any(key == s or key.startswith(f"{s}.") for s in scopes):
            continue
        before = lookup(record, key)
        added = before is ABSENT and key.rpartition(".")[0] in maps  # +runner.args.x: a change
        if (before is ABSENT and not added) or before == value:
            continue
        if not mutable(key):
            was = "without it" if added else f"with {before!r}"
            raise JobConfigError(
                key,
                f"run {cfg.run_id} was launched {was} ({where}), got {value!r}; a "
                "relaunch keeps the run's model, data and layout and may change only steps, "
                "intervals, loggers, checkpointing and how the job runs "
                "(jobs/relaunch.py MUTABLE_KEYS); or use a new run_id",
            )
        merged = with_leaf(merged, key, value)
    for path in maps:  # their keys are the user's (runner.args.lr), not the schema's
        OmegaConf.set_struct(OmegaConf.select(cfg, path), False)
    try:
        out = OmegaConf.merge(cfg, merged)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "run_id"
        raise JobConfigError(
            key,
            f"the record {where} of run {cfg.run_id} does not fit today's schema "
            f"({str(err).splitlines()[0]}); use a new run_id",
        ) from None
    return out, where


def free_maps(cfg: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the sections typed `dict[str, ...]` in the schema (runner.args,
    runner.env): their keys are data, so the record's own keys merge into them."""
    found = []
    for name in cfg:
        node = cfg._get_node(name)
        if isinstance(node, DictConfig) and not node._is_none():
            path = f"{prefix}{name}"
            if OmegaConf.get_type(node) is dict:
                found.append(path)
            else:
                found += free_maps(node, f"{path}.")
    return found


def lookup(tree: Any, key: str) -> Any:
    """The value at dotted `key`; a value met on the way (a null section) stands for it;
    ABSENT when the record has no such key (one added to the schema since)."""
    for name in key.split("."):
        if not isinstance(tree, dict):
            return tree
        if name not in tree:
            return ABSENT
        tree = tree[name]
    return tree


def with_leaf(tree: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of `tree` with the dotted `key` set to `value`."""
    head, _, rest = key.partition(".")
    out = dict(tree)
    if rest:
        out[head] = with_leaf(out.get(head) if isinstance(out.get(head), dict) else {}, rest, value)
    else:
        out[head] = value
    return out
