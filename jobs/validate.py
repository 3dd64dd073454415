"""Checks on a composed job before anything is written, run or sent.

Each rule raises `JobConfigError` whose text is one line: the key, what is wrong, and what is
allowed. Hydra's schema has already checked types and key names; these are the rules a type
can't express. The trainer's own checks are reused where it has them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from catalog import INSTANCE_TYPES
from catalog.kubernetes import JOB_APIS
from contract.model.args import ARCH_FIELDS
from jobs.backends.kubernetes.runtimes import RUNTIME_GRACE_S
from jobs.errors import JobConfigError
from jobs.naming import run_id_problem, sweep_id_problem
from jobs.references import DNS1123_SUBDOMAIN, LABEL_VALUE
from jobs.resume_from import check_resume_from, resume_from_path
from jobs.runners import check_runner, runner_for
from jobs.schema import BACKENDS, CAPACITY_TYPES, CLEAN_POD_POLICIES, LOCAL_CPU, REQUIRED, JobConfig
from jobs.spec import (
    CONFIG_MOUNT_DIR,
    CPU_RUNTIME,
    RUNTIME_PREFIX,
    elastic_of,
    gpu_runtime_name,
    pod_resources,
    procs_per_node,
)
from jobs.validate_targets import (
    check_cluster_names,
    check_cost_inputs,
    check_image_approved,
    check_image_reference,
    check_output_root,
    check_priority_approved,
    check_secrets_approved,
)

__all__ = ["JobConfigError", "validate_job"]

if TYPE_CHECKING:
    from contract.plan import Plan as TrainerPlan


def _allowed(values: Any) -> str:
    return ", ".join(str(v) for v in values)


def _at_least(key: str, value: int | None, minimum: int) -> None:
    if value is not None and value < minimum:
        raise JobConfigError(key, f"must be >= {minimum}, got {value}")


def _at_most(key: str, value: int | None, maximum: int) -> None:
    if value is not None and value > maximum:
        raise JobConfigError(key, f"must be <= {maximum}, got {value}")


JOB_LIMITS = {
    "termination_grace_period_seconds": 3600,
    "max_restarts": 100,
    "max_retries": 100,
    "ttl_seconds_after_finished": 90 * 24 * 3600,
    "active_deadline_seconds": 90 * 24 * 3600,
}
"""The most each job key may be: a checkpoint's save window, restarts and resubmissions of a
run that keeps failing, how long a finished job stays on the cluster, and how long one may
run (an unbounded deadline was rendered as 1e20, past Kubernetes' int64)."""
MAX_NODES = 1024
"""The most nodes one job may ask for (compute.nodes, job.elastic.max_nodes): above any node
group a stack runs (an elastic range is checked with one plan, plus arithmetic per size)."""


def data_parallel_sizes(cfg: Any) -> list[int]:
    """Every world size the job can run at (elastic jobs: each node count in range)."""
    elastic = elastic_of(cfg)
    nodes = range(elastic.min_nodes, elastic.max_nodes + 1) if elastic else [cfg.compute.nodes]
    return [n * procs_per_node(cfg.compute) for n in nodes]


def check_compute(cfg: Any) -> None:
    compute, backend = cfg.compute, cfg.backend.name
    if backend not in BACKENDS:
        raise JobConfigError(
            "backend.name", f"unknown backend {backend!r}; allowed: {_allowed(BACKENDS)}"
        )
    _at_least("compute.nodes", compute.nodes, 1)
    _at_most("compute.nodes", compute.nodes, MAX_NODES)
    gpu_types = _allowed(INSTANCE_TYPES)
    if compute.name == LOCAL_CPU:
        if backend != "local":
            raise JobConfigError(
                "compute",
                f"local_cpu runs only with backend=local; for "
                f"backend={backend} choose one of {gpu_types}",
            )
        if compute.nodes != 1:
            raise JobConfigError(
                "compute.nodes",
                f"local_cpu runs on this one machine; allowed: 1, got {compute.nodes}",
            )
        _at_least("compute.procs_per_node", compute.procs_per_node, 1)
        if compute.instance_type is not None:
            raise JobConfigError(
                "compute.instance_type",
                f"local_cpu runs on this machine; allowed: null (or compute=<one of {gpu_types}>)",
            )
        return
    if compute.capacity not in CAPACITY_TYPES:
        raise JobConfigError(
            "compute.capacity",
            f"{compute.capacity!r} is not allowed; allowed: {_allowed(CAPACITY_TYPES)}",
        )
    if compute.instance_type not in INSTANCE_TYPES:
        raise JobConfigError(
            "compute.instance_type",
            f"unknown instance type {compute.instance_type!r}; allowed: {gpu_types}",
        )
    if backend == "local":
        raise JobConfigError(
            "backend",
            f"compute={compute.name} needs a cluster: use "
            "backend=render or backend=kubernetes (local runs compute=local_cpu)",
        )
    gpus = INSTANCE_TYPES[compute.instance_type].gpus
    if not 1 <= compute.gpus_per_node <= gpus:
        raise JobConfigError(
            "compute.gpus_per_node",
            f"{compute.instance_type} has {gpus} "
            f"GPUs; allowed: 1..{gpus}, got {compute.gpus_per_node}",
        )
    check_efa_share(compute.instance_type, compute.gpus_per_node)


def check_efa_share(instance_type: str, gpus_per_node: int) -> None:
    """Pods on an EFA instance set FI_PROVIDER=efa (jobs.spec.EFA_ENV): each must also be
    given an EFA device, or NCCL fails at start on every node, long after submission."""
    instance = INSTANCE_TYPES[instance_type]
    if not instance.has_efa or pod_resources(instance, gpus_per_node).efa >= 1:
        return
    with_efa = [g for g in range(1, instance.gpus + 1) if pod_resources(instance, g).efa >= 1]
    raise JobConfigError(
        "compute.gpus_per_node",
        f"{gpus_per_node} of {instance_type}'s GPUs would get no EFA device while its pods set "
        f"FI_PROVIDER=efa; allowed: {_allowed(with_efa) or 'none (an EFA share is missing)'}",
    )


def check_elastic(cfg: Any) -> None:
    elastic = cfg.job.elastic
    if elastic.min_nodes is None and elastic.max_nodes is None:
        return
    if elastic.min_nodes is None or elastic.max_nodes is None:
        raise JobConfigError(
            "job.elastic", "set both min_nodes and max_nodes (or neither for a fixed-size job)"
        )
    _at_least("job.elastic.min_nodes", elastic.min_nodes, 1)
    _at_most("job.elastic.max_nodes", elastic.max_nodes, MAX_NODES)
    if elastic.min_nodes > elastic.max_nodes:
        raise JobConfigError(
            "job.elastic.min_nodes",
            f"{elastic.min_nodes} is above "
            f"job.elastic.max_nodes ({elastic.max_nodes}); allowed: min <= max",
        )
    if not elastic.min_nodes <= cfg.compute.nodes <= elastic.max_nodes:
        raise JobConfigError(
            "compute.nodes",
            f"{cfg.compute.nodes} is outside the elastic "
            f"range; allowed: {elastic.min_nodes}..{elastic.max_nodes}",
        )
    if cfg.compute.name == LOCAL_CPU:
        raise JobConfigError(
            "job.elastic", "elastic jobs need a cluster backend; allowed with local_cpu: null"
        )


def check_trainer(cfg: Any) -> TrainerPlan:
    """The trainer's own start-up checks (model, choices, ranges, seq_len, batch divisibility)
    at every world size the job can run at, so a bad value fails here and not on the nodes.
    Returns the trainer's plan (model, batch) at the job's own size."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from contract.config import RunConfig
    from contract.plan import data_parallel_mesh, grad_accum_steps, make_plan
    from trainer.errors import ConfigError
    from trainer.hf.config import read_hf_config

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
        plan = make_plan(trainer_cfg, sizes[0], hf_config)
        for size in sizes[1:]:
            data_parallel_mesh(trainer_cfg, size)
            grad_accum_steps(trainer_cfg, size)
        own_size = cfg.compute.nodes * procs_per_node(cfg.compute)
        if own_size != sizes[0]:
            plan = make_plan(trainer_cfg, own_size, hf_config)
    except ConfigError as err:
        key, _, problem = str(err).partition(": ")
        raise JobConfigError(key, problem) from None
    return plan


def check_hub_access(cfg: Any, source: str) -> None:
    """A Hub model exists at its revision, and a gated one has a token: job.secrets.hf_token
    on a cluster; locally also the caller's own (HF_TOKEN or `hf auth login`)."""
    from trainer.hf.hub import check_access

    has_token = cfg.job.secrets.hf_token.name is not None
    if cfg.backend.name == "local" and not has_token:
        from huggingface_hub import get_token

        has_token = get_token() is not None
    check_access(source, has_token)


def check_image(cfg: Any, git_sha: str | None) -> None:
    if cfg.compute.name == LOCAL_CPU:
        return
    image = cfg.job.image
    if not image:
        if cfg.job.image_repository and git_sha:
            return
        raise JobConfigError(
            "job.image",
            f"backend={cfg.backend.name} needs the trainer image: "
            "set job.image=REPOSITORY:TAG, or job.image_repository (e.g. from "
            "stack=<name>) in a git checkout",
        )
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else None
    if "@" not in image and tag in (None, "latest"):
        raise JobConfigError(
            "job.image",
            f"{image!r} has tag 'latest' (implied when absent), "
            "which is not reproducible; allowed: an immutable tag or @sha256 "
            "digest",
        )


def check_storage(cfg: Any) -> None:
    root = cfg.storage.root
    multi_node = cfg.compute.nodes > 1 or elastic_of(cfg) is not None
    if multi_node and not root.startswith("s3://"):
        raise JobConfigError(
            "storage.root",
            f"a multi-node job needs storage every node "
            f"shares; allowed: s3://bucket/prefix, got {root!r}",
        )
    # Every s3:// URL names a plain bucket: an access point or Outposts ARN would make
    # botocore contact a host the value names, with this machine's credentials.
    urls = [("storage.root", root)] + [(key, value) for key, value, _ in input_paths(cfg)]
    for key, url in urls:
        if not str(url).startswith("s3://"):
            continue
        bucket = url.removeprefix("s3://").split("/", 1)[0]
        if key == "storage.root":
            problem = bucket_name_problem(bucket)
        else:  # an input: only what is not a plain bucket name at all (an ARN, a host)
            plain = bool(bucket) and set(bucket) <= _BUCKET_CHARS
            problem = None if plain else "is not a bucket name"
        if problem:
            raise JobConfigError(
                key,
                f"{url!r}: bucket {bucket!r} {problem}; allowed: s3://bucket[/prefix], the "
                "bucket 3-63 characters of a-z, 0-9, '.' and '-', starting and ending with a "
                "letter or digit (no ARNs)",
            )


S3_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]\Z")
_BUCKET_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789.-")


def bucket_name_problem(bucket: str) -> str | None:
    """Why `bucket` cannot be an S3 bucket name (AWS's general-purpose naming rules), or
    None."""
    if not bucket:
        return "is missing"
    if not 3 <= len(bucket) <= 63:
        count = f"{len(bucket)} character" + ("s" if len(bucket) != 1 else "")
        return f"is {count} long (S3 bucket names are 3-63)"
    if not S3_BUCKET_NAME.match(bucket):
        return "has a character S3 bucket names do not allow, or starts or ends with one"
    if ".." in bucket:
        return "has two dots in a row"
    return None


IMAGE_WORKDIR = "/workspace"
IMAGE_FILES = ("data/sample/train.jsonl",)
"""Files the trainer image carries under its working directory (images/trainer/Dockerfile)."""


def inside_image(path: str) -> bool:
    return path.removeprefix(f"{IMAGE_WORKDIR}/").removeprefix("./") in IMAGE_FILES


def input_paths(cfg: Any) -> list[tuple[str, str, str]]:
    """(key, value, what is allowed) of every input path the trainer reads; the tokenizer
    defaults to the init_from directory's."""
    allowed = (
        "a JSONL file or prepared dataset (manifest.json or its directory), or s3://bucket/key"
    )
    paths = [("data.path", cfg.data.path, allowed)] if cfg.data.path is not None else []
    for index, source in enumerate(cfg.data.mixture):
        allowed = "a prepared dataset (its manifest.json or directory) or s3://bucket/prefix"
        paths.append((f"data.mixture[{index}].path", source.path, allowed))
    if cfg.model.init_from is not None and not cfg.model.init_from.startswith("hf://"):
        allowed = "a Hugging Face model directory, s3://bucket/prefix or hf://org/name[@rev]"
        paths.append(("model.init_from", cfg.model.init_from, allowed))
    resume_from = resume_from_path(cfg)
    if resume_from is not None:
        allowed = "a run dir or its checkpoints/step-N (local or s3://), or RUN[/step-N]"
        paths.append(("trainer.resume_from", resume_from, allowed))
    if cfg.data.tokenizer not in (None, "byte"):
        allowed = "byte, or a local Hugging Face tokenizer directory, or s3://bucket/prefix"
        paths.append(("data.tokenizer", cfg.data.tokenizer, allowed))
    return paths


def check_fsx(cfg: Any) -> None:
    """storage.fsx mounts the stack's FSx volume: there must be one, and pods to mount it in."""
    storage = cfg.storage
    if not storage.fsx:
        return
    if cfg.backend.name == "local":
        raise JobConfigError(
            "storage.fsx", "FSx is mounted in cluster pods; allowed with backend=local: false"
        )
    if not storage.fsx_claim:
        raise JobConfigError(
            "storage.fsx",
            "the stack has no FSx file system (its output fsx_claim is null: set trainstack:fsx "
            "and re-run `python -m infra.stack_defaults`); allowed: false",
        )
    for key, value in (("storage.fsx_claim", storage.fsx_claim),):
        if not DNS1123_SUBDOMAIN.match(value):
            raise JobConfigError(key, f"{value!r} is not allowed; allowed: a DNS-1123 name")
    if not re.fullmatch(r"/[\w.-]+(/[\w.-]+)*", storage.fsx_mount) or storage.fsx_mount in (
        "/tmp",
        "/dev/shm",
        CONFIG_MOUNT_DIR,
    ):
        raise JobConfigError(
            "storage.fsx_mount",
            f"{storage.fsx_mount!r} is not allowed; allowed: an absolute path other than /tmp, "
            f"/dev/shm and {CONFIG_MOUNT_DIR}",
        )


def on_fsx(cfg: Any, path: str) -> bool:
    mount = cfg.storage.fsx_mount.rstrip("/")
    return bool(cfg.storage.fsx) and (path == mount or path.startswith(f"{mount}/"))


def check_pod_paths(cfg: Any) -> None:
    """render/kubernetes: every input must be readable in the pod — s3://, a file the image
    carries, or (storage.fsx) a path on the stack's FSx mount; a path on this machine would
    fail the pod at start."""
    if cfg.backend.name == "local":
        return
    for key, value, _ in input_paths(cfg):
        if value.startswith("s3://") or (key == "data.path" and inside_image(value)):
            continue
        if on_fsx(cfg, value):
            continue
        raise JobConfigError(
            key,
            f"{value!r} is a path on this machine, not inside the trainer image (which carries "
            f"only {', '.join(IMAGE_FILES)}); allowed for backend={cfg.backend.name}: "
            "s3://bucket/prefix",
        )


def check_grants(cfg: Any) -> None:
    """render/kubernetes: every s3:// URL the pods read, and the run dirs they write, must be
    inside the stack's grants for training pods (jobs/grants.py)."""
    if cfg.backend.name == "local":
        return
    from jobs.grants import check_urls
    from jobs.schema import plain

    urls = [(key, value, False) for key, value, _ in input_paths(cfg)]
    urls.append(("storage.root", f"{cfg.storage.root.rstrip('/')}/", True))
    check_urls(plain(cfg.storage.grants)["training"], "training", urls)


def check_local_files(cfg: Any) -> None:
    """local: the inputs must be here already; the trainer would find out only after torchrun
    started."""
    if cfg.backend.name != "local":
        return
    for key, value, allowed in input_paths(cfg):
        if key == "trainer.resume_from":  # check_resume_from names the missing run or step
            continue
        path = Path(value)
        is_data = key.startswith("data.") and key != "data.tokenizer"
        if value.startswith("s3://") or path.is_dir() or (is_data and path.is_file()):
            continue
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        what = "file or directory" if is_data else "directory"
        raise JobConfigError(key, f"no such {what} {value!r}{where}; allowed: {allowed}")


def check_job_policy(cfg: Any) -> None:
    job = cfg.job
    if job.clean_pod_policy not in CLEAN_POD_POLICIES:
        raise JobConfigError(
            "job.clean_pod_policy",
            f"{job.clean_pod_policy!r} is not allowed; allowed: {_allowed(CLEAN_POD_POLICIES)}",
        )
    _at_least("job.max_retries", job.max_retries, 0)
    _at_least("job.max_restarts", job.max_restarts, 0)
    for key in ("queue", "priority"):
        value = job[key]
        if value is not None and not DNS1123_SUBDOMAIN.match(value):
            raise JobConfigError(
                f"job.{key}", f"{value!r} is not allowed; allowed: a DNS-1123 name"
            )
    if job.owner is not None and not LABEL_VALUE.match(job.owner):
        raise JobConfigError(
            "job.owner",
            f"{job.owner!r} is not allowed; allowed: a label value (letters, digits, . _ -; "
            "at most 63; set $TRAINSTACK_USER)",
        )
    if job.priority is not None and job.queue is None:
        raise JobConfigError("job.priority", "needs job.queue (priorities are Kueue's)")
    _at_least("job.ttl_seconds_after_finished", job.ttl_seconds_after_finished, 0)
    _at_least("job.active_deadline_seconds", job.active_deadline_seconds, 1)
    _at_least("job.termination_grace_period_seconds", job.termination_grace_period_seconds, 60)
    # Upper bounds: a cancelled or preempted job must give its GPUs back (grace), a crashing
    # one must stop (restarts), a finished one must go (TTL), whoever set them.
    for key, most in JOB_LIMITS.items():
        _at_most(f"job.{key}", job[key], most)
    for key, ref in job.secrets.items():
        if (ref.name, ref.key) == (None, None):
            continue
        if not (ref.name and DNS1123_SUBDOMAIN.match(ref.name) and ref.key):
            raise JobConfigError(
                f"job.secrets.{key}",
                "needs {name: <Secret name (DNS-1123)>, "
                "key: <key in it>}; values are never put in config",
            )


_TRAINJOB_FIXED = {
    "clean_pod_policy": "the JobSet's pods are kept until its TTL",
    "ttl_seconds_after_finished": "trainstack deletes a finished TrainJob after 7 days",
}
"""job keys a TrainJob cannot set (the runtime decides): allowed only at their default."""


def check_job_api(cfg: Any) -> None:
    """`job.api` is one of JOB_APIS, and what the chosen API cannot express is refused rather
    than dropped (Kubeflow Trainer v2.2 removed ElasticPolicy; cleanup and TTL are the
    runtime's)."""
    job = cfg.job
    if job.api not in JOB_APIS:
        raise JobConfigError(
            "job.api", f"{job.api!r} is not allowed; allowed: {_allowed(JOB_APIS)}"
        )
    if job.runtime is not None and not DNS1123_SUBDOMAIN.match(job.runtime):
        raise JobConfigError("job.runtime", f"{job.runtime!r} is not a DNS-1123 name")
    if job.api != "trainjob" or cfg.backend.name == "local":
        if job.runtime is not None and cfg.backend.name != "local":
            raise JobConfigError("job.runtime", "only job.api=trainjob runs on a runtime")
        return
    check_runtime_is_trainstacks(cfg)
    if elastic_of(cfg) is not None:
        raise JobConfigError(
            "job.elastic",
            "elastic min/max nodes need job.api=pytorchjob (Kubeflow Trainer v2 has no "
            "elastic policy); allowed with trainjob: null",
        )
    source = cfg.model.init_from
    if cfg.compute.name != LOCAL_CPU and source is not None and str(source).startswith("hf://"):
        raise JobConfigError(
            "model.init_from",
            f"{source!r}: an hf:// model needs job.api=pytorchjob on a cluster (a TrainJob has "
            "no model-initializer step yet); allowed with trainjob: a path or s3:// URL",
        )
    grace = job.termination_grace_period_seconds
    if job.queue and isinstance(grace, int) and grace > RUNTIME_GRACE_S:
        # Kueue rewrites a queued TrainJob with Trainer types that have no grace-period patch
        # (jobs/backends/kubernetes/trainjob.py): its pods get the runtime's.
        raise JobConfigError(
            "job.termination_grace_period_seconds",
            f"{grace} is above what a queued TrainJob gets (its runtime's {RUNTIME_GRACE_S}: "
            f"Kueue keeps no per-job grace period); allowed with job.queue: up to "
            f"{RUNTIME_GRACE_S}, or job.api=pytorchjob",
        )
    defaults = JobConfig()
    for key, why in _TRAINJOB_FIXED.items():
        if job[key] != getattr(defaults, key):
            raise JobConfigError(
                f"job.{key}",
                f"not settable with job.api=trainjob ({why}); allowed: "
                f"{getattr(defaults, key)}, or job.api=pytorchjob",
            )


def stack_runtimes(node_groups: Any) -> list[str]:
    """The ClusterTrainingRuntimes a stack installs
    (jobs.backends.kubernetes.runtimes.cluster_training_runtimes):
    one per GPU node group, then the CPU runtime."""
    return [*(gpu_runtime_name(group.name) for group in node_groups), CPU_RUNTIME]


def check_runtime_is_trainstacks(cfg: Any) -> None:
    """`job.runtime` names one of trainstack's runtimes, on every path (the preflight's label
    check is off where the service runs with backend.preflight=false): another runtime (an
    admin's, another team's) could carry any pod template (privileged, host paths). With the
    stack's node groups known the name must be one the stack installs; without, a name
    trainstack would install (the preflight then checks its label)."""
    runtime = cfg.job.runtime
    if runtime is None:
        return  # runtime_for() picks one of the stack's
    installed = stack_runtimes(cfg.cluster.node_groups)
    known = runtime in installed if cfg.cluster.node_groups else runtime.startswith(RUNTIME_PREFIX)
    if not known:
        allowed = _allowed(installed) if cfg.cluster.node_groups else f"{RUNTIME_PREFIX}<name>"
        raise JobConfigError(
            "job.runtime",
            f"{runtime!r} is not one of trainstack's ClusterTrainingRuntimes; allowed: {allowed}",
        )


def check_names(cfg: Any) -> None:
    """The run and sweep ids fit the pod names of the job they will name (on a cluster, a
    TrainJob's limit depends on its node count: jobs.naming), before anything is written."""
    api = cfg.job.api if cfg.backend.name != "local" else None
    nodes = cfg.compute.nodes if isinstance(cfg.compute.nodes, int) else 1
    # sweep_id first: a sweep point's run id is made from it, and the user typed only it.
    for key, problem_of in (("sweep_id", sweep_id_problem), ("run_id", run_id_problem)):
        value = cfg[key]
        problem = problem_of(value, api, nodes) if value is not None else None
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
    from omegaconf import OmegaConf

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
    check_names(cfg)
    hf_config = check_runner(cfg)
    check_compute(cfg)
    check_elastic(cfg)
    check_fsx(cfg)
    check_job_api(cfg)
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
    check_secrets_approved(cfg)
    check_priority_approved(cfg)
    check_cluster_names(cfg)
    check_cost_inputs(cfg)
    if runner.reads_model:
        check_local_files(cfg)
    check_resume_from(cfg)
    check_job_policy(cfg)
    check_output_root(cfg)
    return Validated(trainer_plan, hf_config)
