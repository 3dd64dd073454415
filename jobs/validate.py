"""Checks on a composed job before anything is written, run or sent.

Each rule raises `JobConfigError` whose text is one line: the key, what is wrong, and what is
allowed. Hydra's schema has already checked types and key names; these are the rules a type
can't express. The trainer's own checks are reused where it has them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from omegaconf import OmegaConf

from contract.model.args import ARCH_FIELDS
from jobs.backend_registry import BACKENDS, hook, traits_of
from jobs.backend_registry.traits import BackendOptions
from jobs.errors import JobConfigError
from jobs.naming import OPERATOR_PODS, run_id_problem, sweep_id_problem
from jobs.resume_from import check_resume_from
from jobs.runners import check_runner, runner_for
from jobs.schema import REQUIRED
from jobs.validate_common import in_pods, listed
from jobs.validate_compute import check_compute, check_elastic
from jobs.validate_eval import check_eval, check_eval_tasks
from jobs.validate_inputs import (
    check_fsx,
    check_grants,
    check_local_files,
    check_pod_paths,
    check_storage,
)
from jobs.validate_policy import check_job_policy
from jobs.validate_targets import (
    check_cost_inputs,
    check_image,
    check_image_approved,
    check_image_reference,
)
from jobs.validate_trainer import check_trainer

__all__ = ["JobConfigError", "validate_job"]

if TYPE_CHECKING:
    from contract.plan import Plan as TrainerPlan


def check_backend(cfg: Any) -> None:
    """The `backend` section's checks (first: the other checks ask the named backend's traits),
    then the backend's own."""
    options = cfg.backend
    if options.name not in BACKENDS:
        raise JobConfigError(
            "backend.name", f"unknown backend {options.name!r}; allowed: {listed(BACKENDS)}"
        )
    own = traits_of(options.name).options
    typed = OmegaConf.get_type(options)
    if isinstance(typed, type) and issubclass(typed, BackendOptions) and typed is not own:
        raise JobConfigError(
            "backend.name",
            f"is {options.name!r} on backend={typed.name}'s options; allowed: pick the backend "
            f"with backend={options.name} (the group), not backend.name",
        )
    for key in options:  # `+backend.<key>=` adds what no option has: refuse, not ignore
        if key not in own.fields():
            raise JobConfigError(f"backend.{key}", own.unknown_key())
    own.check(cfg)


def check_names(cfg: Any) -> None:
    """The run and sweep ids fit the pod names of the job they will name (on a cluster, a
    TrainJob's limit depends on its node count: jobs.naming), before anything is written."""
    cluster = traits_of(cfg.backend.name).cluster
    kind = hook(cluster.kinds).get(cfg.job.api) if cluster and in_pods(cfg) else None
    pods = kind.pod_names if kind else OPERATOR_PODS
    nodes = cfg.compute.nodes if isinstance(cfg.compute.nodes, int) else 1
    # sweep_id first: a sweep point's run id is made from it, and the user typed only it.
    for key, problem_of in (("sweep_id", sweep_id_problem), ("run_id", run_id_problem)):
        value = cfg[key]
        problem = problem_of(value, pods, nodes) if value is not None else None
        if problem:
            raise JobConfigError(key, f"{value!r} is not allowed; allowed: {problem}")


_MANDATORY_HINTS = {
    "data.path": "a JSONL corpus, e.g. data.path=s3://bucket/train.jsonl",
    "data.tokenizer": "data.tokenizer=byte (the built-in byte tokenizer), a Hugging Face "
    "tokenizer directory (data.tokenizer=/path/to/tok or s3://...), or data.tokenizer=null "
    "with model.init_from (the checkpoint's own)",
    "storage.root": "e.g. storage.root=s3://bucket/runs or stack=<name>",
    "model.init_from": "a Hugging Face checkpoint, e.g. model.init_from=s3://bucket/models/x",
    "data.mixture": "prepared datasets by weight, e.g. 'data.mixture=[{path: s3://b/web, "
    "weight: 3}, {path: s3://b/code, weight: 1}]'",
}


def check_mandatory(cfg: Any) -> None:
    """Keys left `???` (`storage=s3` without a root) or `${required:}` (an experiment that
    wants your weights and data: jobs.schema.REQUIRED) by the composition are named before
    anything reads them."""
    missing = sorted(_mandatory_keys(cfg))
    if not missing:
        return
    key = missing[0]
    hint = _MANDATORY_HINTS.get(key, f"set {key}=...")
    if all(k.removeprefix("model.") in ARCH_FIELDS for k in missing):
        hint = "a model option states every architecture key (see conf/model/tiny.yaml)"
    elif len(missing) > 1:
        hint = "; ".join(_MANDATORY_HINTS.get(k, f"set {k}=...") for k in missing)
    if len(missing) == 1:
        raise JobConfigError(key, f"Missing mandatory value: this job needs it set; {hint}")
    # All at once: a model file missing three keys is one fix, not three launches.
    error = JobConfigError(
        ", ".join(missing), f"Missing mandatory values: this job needs them set; {hint}"
    )
    error.key = key
    raise error


def _mandatory_keys(cfg: Any) -> Iterator[str]:
    """Keys holding `???` or `${required:}`, found without resolving anything (resolving the
    latter raises, as OmegaConf.missing_keys would)."""

    def walk(value: Any, key: str) -> Iterator[str]:
        if isinstance(value, dict):
            for name, item in value.items():
                yield from walk(item, f"{key}.{name}" if key else str(name))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                yield from walk(item, f"{key}[{index}]")
        elif value in ("???", REQUIRED):
            yield key

    return walk(OmegaConf.to_container(cfg, resolve=False), "")


class Validated(NamedTuple):
    """What validation read that the launch plan reuses."""

    trainer_plan: TrainerPlan | None
    """The built-in trainer's plan at the job's size (model and batch figures); None for
    another runner (its model is not ours to size)."""
    hf_config: dict[str, Any] | None
    """runner=hf: its checkpoint's config.json where launch read it (a local init_from)."""


def validate_job(cfg: Any, *, git_sha: str | None = None) -> Validated:
    """Raise JobConfigError for the first problem in composed config `cfg`; return what the
    launch plan reuses."""
    check_mandatory(cfg)
    check_backend(cfg)
    check_names(cfg)
    hf_config = check_runner(cfg)
    check_eval(cfg)
    check_compute(cfg)
    check_elastic(cfg)
    check_fsx(cfg)
    traits = traits_of(cfg.backend.name)
    for check in traits.job_checks:  # the backend's (its home's checks, through its traits)
        hook(check)(cfg)
    runner = runner_for(cfg)
    if runner.reads_model:  # model.* and data.* are inputs of trainstack and hf only
        check_pod_paths(cfg)  # before the trainer's checks, which read a local init_from
    # Before anything here reads an s3:// input (init_from's config.json, resume_from's
    # listing) with this machine's credentials: the API's may reach more than the pods'.
    check_storage(cfg)
    check_grants(cfg)
    trainer_plan = check_trainer(cfg) if runner.uses_trainer_plan else None
    check_image(cfg, git_sha)
    check_image_reference(cfg)
    check_image_approved(cfg, git_sha)
    for check in traits.cluster_checks:
        hook(check)(cfg)
    check_cost_inputs(cfg)
    if runner.reads_model:
        check_local_files(cfg)
    check_resume_from(cfg)
    check_job_policy(cfg)
    check_eval_tasks(cfg)  # last: lm-eval's import (~3 s) once everything else is known good
    traits.options.check(cfg)
    return Validated(trainer_plan, hf_config)
