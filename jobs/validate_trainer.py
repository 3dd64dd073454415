"""The trainer's own start-up checks, run at launch at every world size the job can run at,
and the Hub check of an hf:// model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from contract import plan as trainer_plans  # looked up per call: tests count the plans
from contract.config import RunConfig
from jobs.errors import JobConfigError
from jobs.run_dirs import on_fsx
from jobs.spec import procs_per_node
from trainer.errors import ConfigError
from trainer.hf.config import read_hf_config
from trainer.hf.hub import check_access

if TYPE_CHECKING:
    from contract.plan import Plan as TrainerPlan
from jobs.validate_common import in_pods
from jobs.validate_compute import data_parallel_sizes


def check_trainer(cfg: Any) -> TrainerPlan:
    """The trainer's own start-up checks (model, choices, ranges, seq_len, batch divisibility)
    at every world size the job can run at, so a bad value fails here and not on the nodes.
    Returns the trainer's plan (model, batch) at the job's own size."""

    # The composed sections are already typed by the schema: turn them into the trainer's
    # dataclasses directly (a fresh OmegaConf merge would double the cost of a sweep point).
    try:
        trainer_cfg = RunConfig(
            seed=cfg.seed,
            model=OmegaConf.to_object(cfg.model),
            data=OmegaConf.to_object(cfg.data),
            trainer=OmegaConf.to_object(cfg.trainer),
        )
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "config"
        raise JobConfigError(key, str(err).splitlines()[0]) from None
    try:
        # The checkpoint's config.json decides the architecture (and the plan's parameter
        # count). An s3:// one is read here only when no model.name sizes the job (one small
        # GET with the caller's credentials); otherwise the trainer reads it and checks it
        # against model.name, so rendering a named model needs no AWS access.
        init_from = trainer_cfg.model.init_from
        # On the stack's FSx mount: read in the pod, like s3://.
        remote = init_from is not None and ("://" in init_from or on_fsx(cfg, init_from))
        wanted = init_from is not None and (not remote or trainer_cfg.model.name is None)
        if init_from is not None and init_from.startswith("hf://"):
            # One metadata call with a timeout first: huggingface_hub's download retries a
            # hung Hub for minutes, this fails in seconds.
            check_hub_access(cfg, init_from)
        hf_config = read_hf_config(init_from) if wanted else None
        # Every check at the smallest world size; at the others of an elastic range only what
        # depends on the size (mesh and batch divisibility: arithmetic), so the work does not
        # grow with the range (max_nodes=10^6 once made 10^6 plans: issue 37, finding 4).
        sizes = data_parallel_sizes(cfg)
        plan = trainer_plans.make_plan(trainer_cfg, sizes[0], hf_config)
        for size in sizes[1:]:
            trainer_plans.data_parallel_mesh(trainer_cfg, size)
            trainer_plans.grad_accum_steps(trainer_cfg, size)
        own_size = cfg.compute.nodes * procs_per_node(cfg.compute)
        if own_size != sizes[0]:
            plan = trainer_plans.make_plan(trainer_cfg, own_size, hf_config)
    except ConfigError as err:
        key, _, problem = str(err).partition(": ")
        raise JobConfigError(key, problem) from None
    return plan


def check_hub_access(cfg: Any, source: str) -> None:
    """A Hub model exists at its revision, and a gated one has a token: job.secrets.hf_token
    on a cluster; locally also the caller's own (HF_TOKEN or `hf auth login`)."""

    has_token = cfg.job.secrets.hf_token.name is not None
    if not in_pods(cfg) and not has_token:
        from huggingface_hub import get_token  # lazy: start-up (hub client)

        has_token = get_token() is not None
    check_access(source, has_token)
