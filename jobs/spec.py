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
from contract.run_dir import CONFIG_FILE
from jobs.run_dirs import run_dir_for
from jobs.runners import runner_for
from jobs.runners.program import CodeArchive, PodProgram, code_archive
from jobs.schema import CAPACITY_TYPES, LOCAL_CPU, plain

CONFIG_MOUNT_DIR = "/etc/trainstack"
POD_CONFIG_PATH = f"{CONFIG_MOUNT_DIR}/{CONFIG_FILE}"
LABEL_PREFIX = "trainstack.io"
OWNER_LABEL = f"{LABEL_PREFIX}/owner"
"""Who launched the run (`job.owner`): `runs --mine`, `GET /v1/runs?owner=me`."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
HUGEPAGES_2MI = "5120Mi"
"""libfabric's EFA provider registers its buffers in 2 MiB huge pages."""
TORCHRUN_EXIT_MARGIN_S = 30
"""Of the pod's grace period, what torchrun keeps for itself after its workers stopped."""

# NCCL over EFA (aws-ofi-nccl): set only on instances that have EFA.
EFA_ENV = {
    "FI_PROVIDER": "efa",
    "FI_EFA_FORK_SAFE": "1",
    "NCCL_SOCKET_IFNAME": "^lo,docker",
    "NCCL_DEBUG": "WARN",
}
NCCL_HEARTBEAT_TIMEOUT_S = 300
# How a GPU rank notices a dead peer or a hung collective (torch's ProcessGroupNCCL): the
# watchdog aborts a collective after trainer.collective_timeout_s and tears the process down
# (async error handling 1), so torchrun restarts the ranks; the heartbeat monitor kills a rank
# whose watchdog itself is stuck (e.g. inside a hung CUDA call) after this many seconds.
NCCL_RECOVERY_ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCH_NCCL_ENABLE_MONITORING": "1",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(NCCL_HEARTBEAT_TIMEOUT_S),
}
SECRET_ENV_NAMES = {"wandb_api_key": "WANDB_API_KEY", "hf_token": "HF_TOKEN"}
RUNTIME_PREFIX = "trainstack-"
CPU_RUNTIME = f"{RUNTIME_PREFIX}cpu"


@dataclass(frozen=True)
class Resources:
    """Per pod; requests equal limits so GPU pods get the Guaranteed QoS class."""

    cpu: str
    memory: str
    gpus: int
    efa: int
    hugepages_2mi: str | None
    shm_size: str
    """sizeLimit of the memory-backed /dev/shm emptyDir (counts against `memory`)."""


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
class RunPolicy:
    backoff_limit: int
    clean_pod_policy: str
    ttl_seconds_after_finished: int
    active_deadline_seconds: int | None
    suspend: bool = False
    """Created suspended for Kueue (job.queue): only Kueue un-suspends it, on admission."""


@dataclass(frozen=True)
class JobSpec:
    name: str
    """The run id: job name, label value and run dir leaf."""
    namespace: str
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
    master_replicas: int
    """1 with `nodes - 1` workers; 0 for an elastic Worker-only job."""
    worker_replicas: int
    elastic: Elastic | None
    instance_type: str | None
    resources: Resources | None
    service_account: str
    termination_grace_period_seconds: int
    run_policy: RunPolicy
    labels: dict[str, str]
    annotations: dict[str, str]
    trainer_config: dict[str, Any]
    """Exactly the file the trainer reads (`contract.config.RunConfig`)."""
    config_hash: str
    kubernetes_version: str
    api: str = "trainjob"
    """`job.api`: trainjob or pytorchjob."""
    runtime: str | None = None
    """trainjob: the ClusterTrainingRuntime the TrainJob names (`runtimeRef`)."""
    platform_env: tuple[str, ...] = ()
    """Keys of `env` a trainstack runtime sets for every job on its node group (NCCL/EFA):
    a TrainJob leaves them to its runtime, a PyTorchJob carries them."""
    capacity_type: str | None = None
    """`eks.amazonaws.com/capacityType` the pods select (ON_DEMAND, SPOT), or None: any."""
    fsx: tuple[str, str] | None = None
    """(claim, mount path) of the stack's FSx volume mounted in every pod, or None."""
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
        from jobs.resume_from import (
            resume_from_path,
        )  # lazy: pulumi up loads this module (the runtime renderer), never the trainer

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


def pod_resources(instance: InstanceType, gpus: int) -> Resources:
    """A share of the node proportional to the GPUs used, less headroom for the node's
    daemons (kubelet, EFA/NVIDIA device plugins, CNI, log agents)."""
    share = gpus / instance.gpus
    cpu = int((instance.vcpus - max(2, instance.vcpus // 12)) * share)
    memory_gib = int((instance.memory_gib - max(8, instance.memory_gib // 10)) * share)
    efa = max(1, int(instance.efa_interfaces * share)) if instance.has_efa else 0
    return Resources(
        cpu=str(cpu),
        memory=f"{memory_gib}Gi",
        gpus=gpus,
        efa=efa,
        hugepages_2mi=HUGEPAGES_2MI if instance.has_efa else None,
        shm_size=f"{max(1, memory_gib // 4)}Gi",
    )


def platform_env(instance: InstanceType | None) -> dict[str, str]:
    """What every job on `instance` needs whatever it runs: NCCL's failure detection and, with
    EFA, libfabric's provider settings. A trainstack runtime carries it
    (jobs.backends.kubernetes.runtimes)."""
    env: dict[str, str] = {}
    if instance is not None and instance.gpus:
        env.update(NCCL_RECOVERY_ENV)
    if instance is not None and instance.has_efa:
        env.update(EFA_ENV)
        if instance.gpudirect_rdma:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return env


def job_env(cfg: Any, run_id: str, run_dir: str, instance: InstanceType | None) -> dict[str, str]:
    env = {
        "PYTHONUNBUFFERED": "1",
        "TRAINSTACK_RUN_ID": run_id,
        "TRAINSTACK_RUN_DIR": run_dir,
    }
    if cfg.sweep_id:
        env["TRAINSTACK_SWEEP_ID"] = cfg.sweep_id
    return env | platform_env(instance)


def gpu_runtime_name(node_group: str) -> str:
    """The ClusterTrainingRuntime `pulumi up` installs for GPU node group `node_group`."""
    return f"{RUNTIME_PREFIX}{node_group}"


def default_group_name(instance_type: str) -> str:
    """The node group name a job assumes without a stack: the instance type, DNS-safe."""
    return instance_type.replace(".", "-")


def runtime_for(cfg: Any) -> str | None:
    """`job.runtime`, else the runtime of the stack's node group of compute's instance type
    (the first listed), else the one a group named after the instance type would have."""
    if cfg.job.runtime:
        return cfg.job.runtime
    instance_type = cfg.compute.instance_type
    if instance_type is None:
        return CPU_RUNTIME
    for group in cfg.cluster.node_groups:
        if group.instance_type == instance_type:
            return gpu_runtime_name(group.name)
    return gpu_runtime_name(default_group_name(instance_type))


def hub_cache_uri(storage_root: str, source: str) -> str:
    """Where a cluster run keeps a Hub model: one copy per repo and revision under the storage
    root, shared by every run that names them."""

    from trainer.hf.hub import parse_hub  # lazy: pulumi up loads this module, never the trainer

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
        f"{LABEL_PREFIX}/run-id": run_id,
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
        namespace=cfg.cluster.namespace,
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
        master_replicas=0 if elastic else 1,
        worker_replicas=compute.nodes if elastic else compute.nodes - 1,
        elastic=elastic,
        instance_type=None if local else instance.name,
        resources=None if local else pod_resources(instance, compute.gpus_per_node),
        service_account=cfg.cluster.service_account,
        termination_grace_period_seconds=grace,
        run_policy=RunPolicy(
            backoff_limit=cfg.job.max_restarts,
            clean_pod_policy=cfg.job.clean_pod_policy,
            ttl_seconds_after_finished=cfg.job.ttl_seconds_after_finished,
            active_deadline_seconds=cfg.job.active_deadline_seconds,
            suspend=bool(cfg.job.queue),
        ),
        labels=labels,
        annotations=annotations,
        trainer_config=trainer_cfg,
        config_hash=digest,
        kubernetes_version=str(cfg.cluster.kubernetes_version),
        api=cfg.job.api,
        runtime=runtime_for(cfg) if cfg.job.api == "trainjob" else None,
        platform_env=tuple(platform_env(instance)),
        capacity_type=None if local else CAPACITY_TYPES[compute.capacity],
        fsx=(cfg.storage.fsx_claim, cfg.storage.fsx_mount) if cfg.storage.fsx else None,
        model_cache=model_cache,
    )
