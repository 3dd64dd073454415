"""The framework-neutral job spec: what to run, where, with which resources and environment.

`to_job_spec` is pure: names, clocks and the git SHA come in as arguments. Every backend
starts from the same spec, so a job run here gets the command and environment a pod gets.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from catalog import InstanceType, get_instance_type
from catalog.kubernetes import PRIORITY_LABEL, QUEUE_LABEL
from catalog.pods import Resources, platform_env, pod_resources
from contract.run_dir import CONFIG_FILE
from jobs.resume_from import resume_from_path
from jobs.run_dirs import run_dir_for
from jobs.runners import runner_for
from jobs.runners.program import CodeArchive, PodProgram, code_archive
from jobs.schema import LOCAL_CPU, plain
from trainer.hf.hub import parse_hub

CONFIG_MOUNT_DIR = "/etc/trainstack"
POD_CONFIG_PATH = f"{CONFIG_MOUNT_DIR}/{CONFIG_FILE}"
LABEL_PREFIX = "trainstack.io"
OWNER_LABEL = f"{LABEL_PREFIX}/owner"
RUN_ID_LABEL = f"{LABEL_PREFIX}/run-id"
"""Who launched the run (`job.owner`): `runs --mine`, `GET /v1/runs?owner=me`."""
TORCHRUN_EXIT_MARGIN_S = 30
"""Of the pod's grace period, what torchrun keeps for itself after its workers stopped."""
SECRET_ENV_NAMES = {"wandb_api_key": "WANDB_API_KEY", "hf_token": "HF_TOKEN"}


@dataclass(frozen=True)
class SecretEnv:
    env: str
    secret: str
    key: str


@dataclass(frozen=True)
class Elastic:
    min_nodes: int
    max_nodes: int


@dataclass(frozen=True)
class JobSpec:
    name: str
    """The run id: job name, label value and run dir leaf."""
    run_dir: str
    image: str | None
    """None for `local_cpu` (runs from this checkout)."""
    command: tuple[str, ...]
    """`program.argv`: e.g. python -m trainer.launch (torchrun) ... -m trainer --config
    POD_CONFIG_PATH; node topology comes from PET_* env."""
    program: PodProgram
    """The runner's (command, args, env), as its `program` (jobs/runners/) made them."""
    runner: str
    code: CodeArchive | None
    """The packed runner.workdir the pod fetches, or None."""
    env: dict[str, str]
    secret_env: tuple[SecretEnv, ...]
    nodes: int
    nproc_per_node: int
    elastic: Elastic | None
    instance_type: str | None
    resources: Resources | None
    """Each node's pod share of its instance (catalog.pods)."""
    termination_grace_period_seconds: int
    labels: dict[str, str]
    annotations: dict[str, str]
    trainer_config: dict[str, Any]
    """Exactly the file the trainer reads (`contract.config.RunConfig`)."""
    config_hash: str
    model_cache: tuple[str, str] | None = None
    """(hf://org/name[@rev], its run storage cache) when a model initializer fills the cache
    before the trainer starts; the trainer config's init_from is then the cache."""


def elastic_of(cfg: Any) -> Elastic | None:
    """The elastic range when `job.elastic` sets a node bound (validated: both), else None."""
    elastic = cfg.job.elastic
    if elastic.min_nodes is None and elastic.max_nodes is None:
        return None
    return Elastic(elastic.min_nodes, elastic.max_nodes)


def procs_per_node(compute: Any) -> int:
    """Trainer processes per node: `procs_per_node` on local_cpu, one per GPU elsewhere."""
    return compute.procs_per_node if compute.name == LOCAL_CPU else compute.gpus_per_node


def trainer_config(cfg: Any, run_dir: str) -> dict[str, Any]:
    """The `--config` file: run_dir, seed, model, data, trainer (exactly what the built-in
    trainer reads). runner=hf reads those too, plus its `runner` section; runner=command gets
    run_dir, seed and `runner` only (the run record: which program, args and code ran).
    `trainer.resume_from=RUN[/step-N]` becomes the path under storage.root it names."""
    config: dict[str, Any] = {"run_dir": run_dir, "seed": cfg.seed}
    runner = runner_for(cfg)
    if runner.reads_model:
        trainer = plain(cfg.trainer)
        trainer["resume_from"] = resume_from_path(cfg)
        config.update(model=plain(cfg.model), data=plain(cfg.data), trainer=trainer)
    record = runner.record(cfg.runner)
    if record is not None:
        config["runner"] = record
    return config


def config_hash(trainer_cfg: dict[str, Any]) -> str:
    """Hash of what is trained (run_dir left out): equal hashes mean the same experiment."""
    content = {k: v for k, v in trainer_cfg.items() if k != "run_dir"}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:12]


def image_for(cfg: Any, git_sha: str | None) -> str | None:
    if cfg.compute.name == LOCAL_CPU:
        return None
    if cfg.job.image:
        return cfg.job.image
    if cfg.job.image_repository and git_sha:
        variant = runner_for(cfg).image_variant  # runner=hf: the image's `hf-` variant
        return f"{cfg.job.image_repository}:{variant}{git_sha}"
    return None


def job_env(cfg: Any, run_id: str, run_dir: str, instance: InstanceType | None) -> dict[str, str]:
    env = {
        "PYTHONUNBUFFERED": "1",
        "TRAINSTACK_RUN_ID": run_id,
        "TRAINSTACK_RUN_DIR": run_dir,
    }
    if cfg.sweep_id:
        env["TRAINSTACK_SWEEP_ID"] = cfg.sweep_id
    return env | platform_env(instance)


def hub_cache_uri(storage_root: str, source: str) -> str:
    """Where a cluster run keeps a Hub model: one copy per repo and revision under the storage
    root, shared by every run that names them."""
    return f"{storage_root.rstrip('/')}/models/{parse_hub(source).cache_key}"


def to_job_spec(cfg: Any, *, run_id: str, sweep_id: str | None, git_sha: str | None) -> JobSpec:
    """The job described by composed (and validated) config `cfg`. No clock: the same config
    gives the same spec, so renders of it are byte-identical (the kubernetes backend stamps
    `created-at` on what it submits)."""
    compute = cfg.compute
    local = compute.name == LOCAL_CPU
    instance = None if local else get_instance_type(compute.instance_type)
    run_dir = run_dir_for(cfg.storage.root, run_id)
    trainer_cfg = trainer_config(cfg, run_dir)
    model_cache = None
    source = cfg.model.init_from
    if not local and source is not None and source.startswith("hf://"):
        model_cache = (source, hub_cache_uri(cfg.storage.root, source))
        trainer_cfg["model"]["init_from"] = model_cache[1]
    digest = config_hash(trainer_cfg)
    grace = cfg.job.termination_grace_period_seconds
    elastic = elastic_of(cfg)
    code = code_archive(run_dir, cfg.runner.code)
    runner = runner_for(cfg)
    program = runner.program(
        cfg.runner,
        run_dir=run_dir,
        shutdown_timeout_s=max(grace - TORCHRUN_EXIT_MARGIN_S, 1),
        max_restarts=cfg.job.max_restarts,
        config_path=POD_CONFIG_PATH,
        code=code,
    )
    labels = {
        "app.kubernetes.io/name": "trainstack",
        "app.kubernetes.io/managed-by": "trainstack",
        RUN_ID_LABEL: run_id,
        f"{LABEL_PREFIX}/config-hash": digest,
        f"{LABEL_PREFIX}/git-sha": git_sha or "unknown",
    }
    if sweep_id:
        labels[f"{LABEL_PREFIX}/sweep-id"] = sweep_id
    if cfg.job.owner:
        labels[OWNER_LABEL] = cfg.job.owner
    if cfg.job.queue:
        labels[QUEUE_LABEL] = cfg.job.queue
    if cfg.job.priority:
        labels[PRIORITY_LABEL] = cfg.job.priority
    if not runner.builtin:  # golden manifests of the built-in trainer unchanged
        labels[f"{LABEL_PREFIX}/runner"] = runner.name
    annotations = {
        f"{LABEL_PREFIX}/run-dir": run_dir,
        f"{LABEL_PREFIX}/model": runner.job_label(cfg),
        f"{LABEL_PREFIX}/max-retries": str(cfg.job.max_retries),
    }
    secrets = tuple(
        SecretEnv(env=SECRET_ENV_NAMES[key], secret=ref.name, key=ref.key)
        for key, ref in cfg.job.secrets.items()
        if ref.name is not None
    )
    return JobSpec(
        name=run_id,
        run_dir=run_dir,
        image=image_for(cfg, git_sha),
        command=program.argv,
        program=program,
        runner=cfg.runner.name,
        code=code,
        env={**job_env(cfg, run_id, run_dir, instance), **program.env},
        secret_env=secrets,
        nodes=compute.nodes,
        nproc_per_node=procs_per_node(compute),
        elastic=elastic,
        instance_type=None if local else instance.name,
        resources=None if local else pod_resources(instance, compute.gpus_per_node),
        termination_grace_period_seconds=grace,
        labels=labels,
        annotations=annotations,
        trainer_config=trainer_cfg,
        config_hash=digest,
        model_cache=model_cache,
    )
