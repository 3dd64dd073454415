"""Structured-config schema of a job: the top-level keys users compose with Hydra.

The `model`, `data` and `trainer` sections are the trainer's own dataclasses (the job writes
exactly that file), so their defaults live in `contract/config.py` only. Everything else here
is what the launcher needs to place and run the trainer. `register()` puts the schema and one
`compute` option per catalog instance type into Hydra's ConfigStore, so a typo or a wrong
type fails at compose time with Hydra's own message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, OmegaConf

from catalog import INSTANCE_TYPES
from catalog.kubernetes import KUBERNETES_VERSION
from contract.config import DataConfig, ModelConfig, TrainerConfig
from contract.model.args import ARCH_FIELDS
from jobs import backend_registry, runners
from jobs.backend_registry.traits import BackendOptions
from jobs.runners.base import RunnerOptions
from trainer.evaluation.config import EvalConfig

SCHEMA_NAME = "trainstack_schema"
LOCAL_CPU = "local_cpu"

# OmegaConf 2.3 has no Literal support: closed choices are strings checked in jobs.validate.
CLEAN_POD_POLICIES = ("None", "Running", "All")
CAPACITY_TYPES = {"on-demand": "ON_DEMAND", "spot": "SPOT", "any": None}
"""compute.capacity -> the value of EKS managed node groups' `eks.amazonaws.com/capacityType`
label the pods select (any: no selector)."""


@dataclass
class ComputeConfig:
    name: str = LOCAL_CPU
    """`local_cpu` or an instance type from the catalog (the group option's name)."""
    instance_type: str | None = None
    """Catalog instance type the pods run on; null for `local_cpu`."""
    nodes: int = 1
    """Machines (pods) in the job."""
    gpus_per_node: int = 0
    """GPUs (and trainer processes) per node; at most the instance's GPU count."""
    procs_per_node: int = 2
    """Trainer processes per node on `local_cpu` (gloo on CPU); GPU types use gpus_per_node."""
    hourly_usd: float | None = None
    """USD per node-hour for the estimate; null takes the catalog's price (on-demand, or its
    spot estimate for `capacity=spot`)."""
    capacity: str = "any"
    """on-demand, spot or any: the nodes' capacity type the pods select (node selector
    `eks.amazonaws.com/capacityType`); any schedules on either. The plan prices it."""
    step_time_s: float | None = None
    """Seconds per optimizer step for the estimate (e.g. measured); null estimates it from
    FLOPs/token and the GPU's peak at an assumed MFU."""


@dataclass
class GrantConfig:
    url: str = MISSING
    """`s3://bucket/prefix/` the pods' role may use."""
    access: str = "read"
    """read or readwrite."""


@dataclass
class GrantsConfig:
    """The stack's `s3_grants` (set by a stack file): what each pod role may reach on S3. Empty:
    unknown, nothing checked at launch (jobs/grants.py)."""

    training: list[GrantConfig] = field(default_factory=list)
    data_prepare: list[GrantConfig] = field(default_factory=list)


@dataclass
class StorageConfig:
    root: str = MISSING
    """A local directory or `s3://bucket/prefix`; the run dir is `<root>/<run_id>`. Set by the
    storage group (`local`: runs) or a stack; `storage=s3` alone leaves it to you."""
    grants: GrantsConfig = field(default_factory=GrantsConfig)
    fsx: bool = False
    """Mount the stack's FSx for Lustre file system (its PVC, `fsx_claim`) at `fsx_mount` in
    every pod: prepared data and checkpoints can live there; the run dir stays `root`."""
    fsx_claim: str | None = None
    """The stack's FSx PersistentVolumeClaim (stack output fsx_claim; null: the stack has none)."""
    fsx_mount: str = "/fsx"


@dataclass
class ElasticConfig:
    """Elastic when both node bounds are set. (Not an Optional section: OmegaConf 2.3 can't
    merge overrides into a structured field whose value is null.)"""

    min_nodes: int | None = None
    max_nodes: int | None = None


@dataclass
class SecretRef:
    """A key of a Kubernetes Secret in the job's namespace; values never enter the config.
    Unused while `name` is null."""

    name: str | None = None
    key: str | None = None


@dataclass
class SecretsConfig:
    wandb_api_key: SecretRef = field(default_factory=SecretRef)
    """Exposed to the trainer as WANDB_API_KEY."""
    hf_token: SecretRef = field(default_factory=SecretRef)
    """Exposed to the trainer as HF_TOKEN."""


@dataclass
class JobConfig:
    api: str = "trainjob"
    """Kubernetes API the job is made of: `trainjob` (Kubeflow Trainer v2, a TrainJob on the
    stack's ClusterTrainingRuntime) or `pytorchjob` (Training Operator v1). A stack file sets
    the one its cluster runs; without a stack, trainjob."""
    runtime: str | None = None
    """trainjob: the ClusterTrainingRuntime to run on; null picks trainstack's runtime of the
    node group that has compute's instance type (`trainstack-<group>`)."""
    image: str | None = None
    """Full image reference; null builds `<image_repository>:<git sha>`."""
    image_repository: str | None = None
    """Registry repository of the trainer image (set by the stack group)."""
    elastic: ElasticConfig = field(default_factory=ElasticConfig)
    """Worker-only elastic job with c10d rendezvous between min and max nodes."""
    max_restarts: int = 3
    """Recovery without a follower, on every backend: torchrun restarts all ranks of a node
    together (from the last committed checkpoint) up to this many times when one dies. On a
    cluster, failed pods (exit 128-255: preempted, killed, peer lost) are recreated: on
    job.api=trainjob by the runtime's JobSet failure policy, whose maxRestarts is the
    platform's (jobs/backends/kubernetes/runtimes.py: 3); on job.api=pytorchjob by the
    operator, up to this many times per replica: each pod counts its starts in
    `<run_dir>/pod-starts/` (trainer.pod_starts) and exits 2 past them, as Training Operator
    v1.9.4 bounds nothing under restartPolicy ExitCode (runPolicy.backoffLimit, rendered from
    this key too, counts container restarts only). A resume after a Kueue preemption is a
    start too. Bad input (exit 2) is never restarted."""
    max_retries: int = 2
    """kubernetes, second line: while `--wait` follows a run it submitted, resubmit it (same
    run id and manifests, resumes) this many times after it ended Failed."""
    clean_pod_policy: str = "Running"
    """runPolicy.cleanPodPolicy: None, Running or All."""
    ttl_seconds_after_finished: int = 7 * 24 * 3600
    """Seconds a finished PyTorchJob is kept (pods and logs with it)."""
    active_deadline_seconds: int | None = None
    """Wall-clock limit of the whole job; null means none."""
    queue: str | None = None
    """Kueue LocalQueue (in cluster.namespace) the job waits in: it is created suspended and
    Kueue admits all its pods at once when the quota allows. Set by the stack; null: no
    Kueue, the pods go straight to the scheduler."""
    priority: str | None = None
    """Kueue WorkloadPriorityClass (e.g. the stack's `high`/`low`); a higher one may preempt
    lower ones (they checkpoint on SIGTERM and resume when re-admitted). Needs `job.queue`."""
    termination_grace_period_seconds: int = 300
    """Seconds between SIGTERM and SIGKILL for a pod: the trainer checkpoints in this window."""
    secrets: SecretsConfig = field(default_factory=SecretsConfig)
    owner: str | None = "${oc.env:TRAINSTACK_USER,${oc.env:USER,null}}"
    """Who launched the run: the `trainstack.io/owner` label (`trainstack runs --mine`). The
    CLI uses $TRAINSTACK_USER, else the login name ($USER); the Training API sets the name of
    the request's token (a request cannot set it)."""


@dataclass
class NodeGroupConfig:
    name: str = "???"
    instance_type: str = "???"
    min_size: int = 0
    desired_size: int = 0
    max_size: int = 1


@dataclass
class ClusterConfig:
    name: str = "trainstack"
    region: str = "us-east-1"
    kubeconfig: str | None = None
    """Path of a kubeconfig file; null uses the client's default lookup."""
    context: str | None = None
    namespace: str = "training"
    service_account: str = "trainer"
    data_prepare_service_account: str = "data-prepare"
    """The service account `data prepare` Jobs run as (its role writes datasets/)."""
    kubernetes_version: str = KUBERNETES_VERSION
    """Pod templates are validated against this version's schemas; a stack's outputs set its
    cluster's version (the stack file), the default is what new clusters run."""
    node_groups: list[NodeGroupConfig] = field(default_factory=list)
    approved_images: list[str] | None = None
    """Where else jobs may pull images from, besides `job.image_repository`: registries
    (`registry.example.com`) or repository paths (`host/team`: it and everything under it,
    by whole path components); null: no image check on `launch` (the Training API always
    checks: null means only the stack's repository there)."""
    log_group: str | None = None
    """CloudWatch Logs group of the namespace's container logs (the stack's
    `container_log_group`): `trainstack logs` reads a rank's log there once its pod is gone."""
    approved_secrets: list[str] | None = None
    """Names of the Secrets jobs may mount (`job.secrets.*.name`); null: no check on `launch`
    (the Training API always checks: null means none there). A list, not a label read from
    the cluster, so the service needs no right to read Secrets."""
    serving_role_arn: str | None = None
    """The stack's serving role (its `serving_role_arn` output): `serve-model
    backend=kubernetes` binds it to each served run's ServiceAccount (EKS Pod Identity); null:
    no binding is made (the local cluster, a stack from before serving)."""
    approved_priorities: list[str] | None = None
    """Kueue WorkloadPriorityClasses jobs may name (`job.priority`); null: no check on
    `launch` (the Training API always checks: null means none there, so a token cannot make
    its jobs preempt everyone else's)."""


@dataclass
class LaunchEvalConfig(EvalConfig):
    """`trainstack eval`'s keys (trainer/evaluation/config.py), plus when a launch runs it."""

    every_checkpoint: bool = False
    """Score each committed checkpoint that has no results yet with these settings, as
    `trainstack eval RUN --step N` would (results under `<run_dir>/eval/`). backend=local:
    once the run has trained; a failed evaluation is one line in the run's message, never a
    failed run. backend=kubernetes (with `--wait`): one eval Job per checkpoint as it lands,
    on one GPU of compute's instance type, queued by Kueue beside the run and never taking its
    GPUs; `launch --wait` submits them. The other `eval.*` keys are read only with it."""
    max_concurrent: int = 1
    """backend=kubernetes: most eval Jobs of the run queued or running at once (1..16); the
    others wait for one to finish. Every Job is one GPU of the ClusterQueue's quota."""


@dataclass
class LaunchConfig:
    """The composed config: `conf/config.yaml` builds on this."""

    run_id: str | None = None
    """Name of the run (DNS-1035); made as <model>-<yyyymmdd-hhmmss>-<4 hex> when null."""
    sweep_id: str | None = None
    """Set for every point of a multirun."""
    seed: int = 0
    model: ModelConfig = field(
        default_factory=lambda: ModelConfig(**dict.fromkeys(ARCH_FIELDS, MISSING))
    )
    """Every architecture key is mandatory: each model option states them all (`model=hf`
    sets them null: the checkpoint's config.json decides), so the job's record and config
    hash describe the model without the code."""
    data: DataConfig = field(default_factory=lambda: DataConfig(path=MISSING, tokenizer=MISSING))
    """Corpus and tokenizer come from a `data` option (`sample`, the default, sets both) or
    from you: `data=jsonl` and cluster experiments leave them mandatory, so a job never
    trains on the bundled sample by accident."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    runner: RunnerOptions = field(default_factory=RunnerOptions)
    """The runner group's option sets its own options' class (jobs/runners/)."""
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    backend: BackendOptions = field(default_factory=BackendOptions)
    """The backend group's option sets its own options' class (jobs/backends/)."""
    storage: StorageConfig = field(default_factory=StorageConfig)
    job: JobConfig = field(default_factory=JobConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    eval: LaunchEvalConfig = field(default_factory=LaunchEvalConfig)
    """`eval.every_checkpoint=true` and `trainstack eval`'s keys: score checkpoints once the
    run has trained (jobs/validate_eval.py, jobs/backends/local/evals.py)."""


def gpu_compute_option(instance_type: str) -> dict[str, Any]:
    """The `compute=<instance type>` option: one node using every GPU the catalog lists. A
    plain mapping, not a ComputeConfig: the schema types the `compute` it merges into, and a
    structured node costs every composition a deeper copy of Hydra's ConfigStore."""
    spec = INSTANCE_TYPES[instance_type]
    return {"name": spec.name, "instance_type": spec.name, "gpus_per_node": spec.gpus}


REQUIRED = "${required:}"
"""How an option or experiment file makes a key mandatory. `???` cannot: merged over a value
that the schema or an earlier option gave, OmegaConf keeps that value, so the key stays
quietly set (an SFT experiment trained from random weights on the sample corpus). An
interpolation replaces the value like any other; `jobs.validate.check_mandatory` names each key
still holding it, and resolving one (`--cfg job --resolve`) fails naming the key."""


def _required(*, _node_: Any) -> None:
    raise ValueError(f"{_node_._get_full_key(None)}: this job needs it set")


_registered = False


def register() -> None:
    """Store the schema and the catalog's compute options in Hydra's ConfigStore, and the
    `required` resolver (once)."""
    global _registered
    if _registered:
        return
    from hydra.core.config_store import ConfigStore  # lazy: hydra (~0.14 s), for composing only

    OmegaConf.register_new_resolver("required", _required, replace=True)
    # The help's list of backends, one line each (conf/config.yaml's hydra.help.template).
    OmegaConf.register_new_resolver("trainstack_backends", backend_registry.described, replace=True)
    store = ConfigStore.instance()
    store.store(name=SCHEMA_NAME, node=LaunchConfig)
    runners.register(store)
    backend_registry.register(store)
    for name in INSTANCE_TYPES:
        store.store(group="compute", name=name, node=gpu_compute_option(name))
    _registered = True


def plain(cfg: Any) -> dict:
    """A resolved plain-dict copy of a (DictConfig) section."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
