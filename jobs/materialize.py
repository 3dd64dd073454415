"""Composed config -> validated, named job: the one path every backend and sweep takes."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from omegaconf import ListConfig, OmegaConf, open_dict

from jobs.backend_registry import NAMES, hook, traits_of
from jobs.errors import JobConfigError
from jobs.naming import new_run_id
from jobs.plan import Plan, make_plan
from jobs.run_dirs import LOCAL_STATE_ROOT
from jobs.runners import runner_for
from jobs.runners.program import code_archive, format_word
from jobs.sample import shipped_sample
from jobs.schema import REQUIRED
from jobs.spec import JobSpec, to_job_spec
from jobs.validate import validate_job
from jobs.workdir import PackedWorkdir, check_unchanged, pack, store


@dataclass
class MaterializedJob:
    cfg: Any
    """The composed DictConfig, run_id and sweep_id filled in."""
    spec: JobSpec
    plan: Plan
    kubernetes: Any = None
    """The job's cluster side (namespace, job kind, runtime...: the backend's `cluster.job`,
    jobs.backends.kubernetes.kubernetes_job.KubernetesJob); only for backends with pods."""
    manifests: list[dict] | None = None
    """PyTorchJob + ConfigMap, validated; built only for backends that need them."""
    code: PackedWorkdir | None = None
    """The packed runner.workdir; the backend stores it at `spec.code.uri` when scheduling."""

    @property
    def run_id(self) -> str:
        return self.spec.name

    def store_code(self) -> None:
        """Every backend's first step of `schedule` (before anything else is written or sent):
        the packed runner.workdir, at its place under the run dir."""
        if self.code is not None and self.spec.code is not None:
            store(self.spec.run_dir, self.spec.code.uri, self.code.data)


def default_tokenizer_to_checkpoint(cfg: Any) -> None:
    """With model.init_from set, a data option leaving data.tokenizer mandatory (`data=jsonl`)
    takes the checkpoint's own tokenizer (null: the trainer reads init_from's files), as every
    other data option does."""
    model, data = cfg.model, cfg.data
    init_from = None if OmegaConf.is_missing(model, "init_from") else model._get_node("init_from")
    given = init_from is not None and init_from._value() not in (None, REQUIRED)
    if given and OmegaConf.is_missing(data, "tokenizer"):
        data.tokenizer = None


def command_as_list(cfg: Any) -> None:
    """runner.command given as one string (`'python -u train.py'`): its words, split as a
    shell would (quotes kept together), so the record, the sweep and the pods see a list."""
    command = cfg.runner.get("command")
    if isinstance(command, ListConfig):  # numbers Hydra parsed (`--steps,5`) are words too
        words = [w if not isinstance(w, int | float) else format_word(w) for w in command]
        with open_dict(cfg):
            cfg.runner.command = [_literal(w) for w in words]
        return
    if not isinstance(command, str):
        return
    try:
        words = shlex.split(command)
    except ValueError as err:
        raise JobConfigError(
            "runner.command",
            f"{command!r} does not split into words ({err}); allowed: a list, "
            "e.g. 'runner.command=[python,-u,train.py]', or a string a shell could run",
        ) from None
    with open_dict(cfg):
        cfg.runner.command = [_literal(w) for w in words]


def _literal(word: Any) -> Any:
    """A resolved word put back into the config: a `${` in it came from an escaped `\\${`
    (the program's own interpolation, e.g. VERL's `${oc.env:...}`), escaped again so
    OmegaConf keeps it as text."""
    return word.replace("${", "\\${") if isinstance(word, str) else word


def materialize(
    cfg: Any,
    *,
    now: datetime,
    git_sha: str | None,
    run_id: str | None = None,
    sweep_id: str | None = None,
) -> MaterializedJob:
    """Validate `cfg`, name the run and build its spec (and manifests unless local).

    Raises `jobs.validate.JobConfigError` naming the offending key; nothing is written (a
    runner.workdir is packed in memory here, and stored by the backend).
    """
    sweep_id = sweep_id or cfg.sweep_id
    run_id = run_id or cfg.run_id
    with open_dict(cfg):
        cfg.run_id = run_id
        cfg.sweep_id = sweep_id
    default_tokenizer_to_checkpoint(cfg)
    command_as_list(cfg)
    if cfg.backend.name in NAMES and not traits_of(cfg.backend.name).pods:
        shipped_sample(cfg)  # an unknown backend: validate_job names it
    validated = validate_job(cfg, git_sha=git_sha)
    code = None
    recorded = cfg.runner.code  # a relaunch's: the code its run was launched with
    if cfg.runner.get("workdir") is not None:  # packed once per process: every point shares it
        keep_out = (cfg.storage.root, LOCAL_STATE_ROOT, cfg.backend.output_root)
        code = pack(cfg.runner.workdir, cfg.runner.workdir_max_mb, keep_out)
    with open_dict(cfg):
        cfg.runner.code = code.sha256 if code else None
    if run_id is None:  # named after validation: the name reads the model's keys
        run_id = new_run_id(runner_for(cfg).job_label(cfg), now)
        with open_dict(cfg):
            cfg.run_id = run_id
    spec = to_job_spec(cfg, run_id=run_id, sweep_id=sweep_id, git_sha=git_sha)
    if code is not None and recorded is not None:
        old = code_archive(spec.run_dir, recorded)
        check_unchanged(run_id, cfg.runner.workdir, recorded, old.uri, code)
    job = MaterializedJob(cfg=cfg, spec=spec, plan=make_plan(cfg, spec, *validated), code=code)
    traits = traits_of(cfg.backend.name)
    cluster = traits.cluster
    if traits.pods and cluster is not None:
        # A render works with what `make run` installs (the render backend says what it left
        # unchecked); a submission needs the jobs extra anyway (the Kubernetes client).
        schemas = traits.schema_checks_required or hook(cluster.schemas_installed)()
        job.kubernetes = hook(cluster.job)(cfg)
        job.manifests = hook(cluster.manifests)(spec, job.kubernetes, schemas)
    return job
