"""Checks on manifests before they are written or sent.

Two layers: the operators' admission-webhook rules for PyTorchJob and TrainJob (which a schema
can't express), and every pod template strictly against the Kubernetes JSON schemas of
`cluster.kubernetes_version` (kubernetes-validate's bundled schemas): a PyTorchJob's replica
templates, what a TrainJob puts into its pods, a runtime's templates. (The TrainJob and runtime
objects themselves are checked against Trainer's CRDs in the tests: testing_support/crd_schema.py.)
Compiled validators are cached per kind and version, so a 1,000-point sweep loads each schema
once.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from functools import cache
from typing import Any

from jobs.backends.kubernetes.client.kinds import BY_KIND, PYTORCHJOB, RAYJOB, TRAINJOB
from jobs.backends.kubernetes.client.state import nodes
from jobs.backends.kubernetes.rayjob_checks import rayjob_problem
from jobs.naming import run_id_problem

REPLICA_TYPES = ("Master", "Worker")
TORCH_RESERVED_ENV = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
"""Set by Trainer's torch plugin on the `node` container; a TrainJob may not set them."""
# kubernetes-sigs/jobset v0.12.0, pkg/webhooks/jobset_webhook.go (`ruleNameFmt`,
# `maxRuleNameLength`, validateFailurePolicy): a failure-policy rule's name, unique in its JobSet.
JOBSET_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?\Z")
JOBSET_RULE_NAME_MAX = 128
_PATCH_MANAGER = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*)?\Z")


class ManifestError(ValueError):
    """A manifest would be rejected by the API server or the operator; one line."""


def _checked_name(job: dict, kind: str) -> str:
    """`<kind> <name>`, what every message starts with, once the name is known to be valid."""
    where = f"{kind} {job['metadata']['name']}"
    problem = run_id_problem(job["metadata"]["name"], BY_KIND[kind].pod_names, nodes(job))
    if problem:
        raise ManifestError(f"{where}: metadata.name: {problem}")
    return where


def check_pytorchjob_webhook(job: dict) -> None:
    """The operator's validating webhook rules for kubeflow.org/v1 PyTorchJob."""
    where = _checked_name(job, "PyTorchJob")
    spec = job["spec"]
    replicas = spec.get("pytorchReplicaSpecs") or {}
    if not replicas:
        raise ManifestError(f"{where}: spec.pytorchReplicaSpecs: at least one of Master, Worker")
    for rtype, replica in replicas.items():
        key = f"spec.pytorchReplicaSpecs.{rtype}"
        if rtype not in REPLICA_TYPES:
            raise ManifestError(f"{where}: {key}: allowed replica types: Master, Worker")
        if rtype == "Master" and replica.get("replicas", 1) != 1:
            raise ManifestError(f"{where}: {key}.replicas: must be 1")
        containers = replica["template"]["spec"].get("containers") or []
        named = [c for c in containers if c.get("name") == "pytorch"]
        if not named:
            raise ManifestError(f"{where}: {key}: needs a container named 'pytorch'")
        if not named[0].get("image"):
            raise ManifestError(f"{where}: {key}: container 'pytorch' needs an image")
    elastic = spec.get("elasticPolicy")
    if elastic and "nProcPerNode" in elastic and "nprocPerNode" in spec:
        raise ManifestError(
            f"{where}: spec.elasticPolicy.nProcPerNode: set nprocPerNode in one place only"
        )
    if elastic and "Master" in replicas:
        raise ManifestError(
            f"{where}: spec.pytorchReplicaSpecs.Master: elastic jobs are "
            "Worker-only (c10d rendezvous)"
        )


def check_trainjob_webhook(job: dict, runtime_jobs: tuple[str, ...] = ("node",)) -> None:
    """Kubeflow Trainer v2.3's admission rules for a TrainJob on a torch runtime whose
    replicated jobs (and their containers) are `runtime_jobs`."""
    where = _checked_name(job, "TrainJob")
    spec = job["spec"]
    if not (spec.get("runtimeRef") or {}).get("name"):
        raise ManifestError(f"{where}: spec.runtimeRef.name: the runtime to run on is required")
    trainer = spec.get("trainer") or {}
    if not trainer.get("image"):
        raise ManifestError(f"{where}: spec.trainer.image: required")
    reserved = sorted({e["name"] for e in trainer.get("env") or []} & set(TORCH_RESERVED_ENV))
    if reserved:
        raise ManifestError(f"{where}: spec.trainer.env: reserved for torchrun: {reserved}")
    for index, patch in enumerate(spec.get("runtimePatches") or []):
        key = f"spec.runtimePatches[{index}]"
        if not _PATCH_MANAGER.match(patch.get("manager", "")):
            raise ManifestError(f"{where}: {key}.manager: a domain-prefixed path, e.g. x.io/y")
        template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        for rjob in (template.get("spec") or {}).get("replicatedJobs") or []:
            if rjob["name"] not in runtime_jobs:
                raise ManifestError(
                    f"{where}: {key}: replicated job {rjob['name']!r} is not in the runtime; "
                    f"allowed: {', '.join(runtime_jobs)}"
                )
            pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get(
                "spec"
            ) or {}
            for container in pod.get("containers") or []:
                if container["name"] not in runtime_jobs:
                    raise ManifestError(
                        f"{where}: {key}: container {container['name']!r} is not in the runtime"
                    )
                if container.get("env"):
                    raise ManifestError(
                        f"{where}: {key}: no env patches on the {container['name']!r} "
                        "container; use spec.trainer.env"
                    )


def check_jobset_webhook(runtime: dict) -> None:
    """JobSet's admission rules on a runtime's JobSet template that a schema can't express:
    Trainer applies that JobSet for every TrainJob, and JobSet's webhook refuses it (only an
    event says so; the TrainJob stays Created, and under Kueue no Workload is ever made)."""
    where = f"{runtime['kind']} {runtime['metadata']['name']}"
    policy = runtime["spec"]["template"]["spec"].get("failurePolicy") or {}
    names = [rule.get("name", "") for rule in policy.get("rules") or []]
    for index, name in enumerate(names):
        key = f"spec.template.spec.failurePolicy.rules[{index}].name"
        if len(name) > JOBSET_RULE_NAME_MAX or not JOBSET_RULE_NAME.match(name):
            raise ManifestError(
                f"{where}: {key}: {name!r} is not allowed; allowed: letters, digits, '_', ',' "
                f"and ':', starting with a letter, at most {JOBSET_RULE_NAME_MAX} characters "
                "(JobSet's webhook)"
            )
        if names.count(name) > 1:
            raise ManifestError(f"{where}: {key}: {name!r} names two rules; names are unique")


def trainjob_pod_template(job: dict) -> dict:
    """What the TrainJob itself puts into its pods, as a pod template the Kubernetes schema can
    check: the trainer container's fields and the patched pod fields (the runtime adds the
    rest, and is checked on its own)."""
    spec = job["spec"]
    trainer = spec["trainer"]
    container = {"name": "node"}
    for key in ("image", "command", "args", "env"):
        if key in trainer:
            container[key] = trainer[key]
    if "resourcesPerNode" in trainer:
        container["resources"] = trainer["resourcesPerNode"]
    pod: dict[str, Any] = {"containers": [container]}
    metadata: dict[str, Any] = {}
    for patch in spec.get("runtimePatches") or []:
        template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        for rjob in (template.get("spec") or {}).get("replicatedJobs") or []:
            pod_template = ((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
            metadata.update(pod_template.get("metadata") or {})
            for field_name, value in (pod_template.get("spec") or {}).items():
                if field_name == "containers":
                    for patched in value:
                        if patched["name"] == "node":
                            container.update({k: v for k, v in patched.items() if k != "name"})
                else:
                    pod[field_name] = value
    return {"metadata": metadata, "spec": pod}


def runtime_pod_templates(runtime: dict) -> dict[str, dict]:
    """replicated job name -> pod template of a (Cluster)TrainingRuntime."""
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return {rjob["name"]: rjob["template"]["spec"]["template"] for rjob in jobs}


def _check_pod_template(template: dict, name: str, where: str, version: str | None) -> None:
    wrapped = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name},
        "template": template,
    }
    check_schema(wrapped, version, where)


def check_restricted_pod(template: dict, where: str) -> None:
    """The `restricted` Pod Security Standard's rules for a pod template (what the training
    namespace enforces; a pod breaking one would be refused at creation, after submit)."""
    spec = template["spec"]
    pod = spec.get("securityContext") or {}
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        ctx = container.get("securityContext") or {}
        key = f"{where}: container {container['name']!r} securityContext"
        non_root = ctx.get("runAsNonRoot", pod.get("runAsNonRoot"))
        uid = ctx.get("runAsUser", pod.get("runAsUser"))
        seccomp = (ctx.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        added = set((ctx.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}
        problems = [
            ("runAsNonRoot", non_root is not True, "must be true"),
            ("runAsUser", uid == 0, "must not be 0"),
            ("allowPrivilegeEscalation", ctx.get("allowPrivilegeEscalation") is not False, "false"),
            (
                "capabilities.drop",
                "ALL" not in ((ctx.get("capabilities") or {}).get("drop") or []),
                "[ALL]",
            ),
            ("capabilities.add", bool(added), f"nothing but NET_BIND_SERVICE, got {sorted(added)}"),
            (
                "seccompProfile.type",
                seccomp not in ("RuntimeDefault", "Localhost"),
                "RuntimeDefault",
            ),
            ("privileged", bool(ctx.get("privileged")), "must not be true"),
        ]
        for field, bad, allowed in problems:
            if bad:
                raise ManifestError(f"{key}.{field}: {allowed} (Pod Security Standard restricted)")
    for volume in spec.get("volumes", []):
        if "hostPath" in volume:
            raise ManifestError(f"{where}: volume {volume['name']!r}: hostPath is not allowed")


def _schema_version(kubernetes_version: str) -> str:
    """The newest bundled schema version not newer than `kubernetes_version`."""
    from kubernetes_validate import utils  # lazy: start-up (schema sets)

    wanted = utils.major_minor(kubernetes_version.lstrip("v"))
    key = lambda v: tuple(int(p) for p in utils.major_minor(v).split("."))  # noqa: E731
    versions = utils.all_versions()
    if not re.fullmatch(r"\d+\.\d+", wanted) or key(wanted) > key(versions[-1]):
        raise ManifestError(
            f"cluster.kubernetes_version: {kubernetes_version!r} is not "
            f"supported; allowed: {utils.major_minor(versions[0])}.."
            f"{utils.major_minor(versions[-1])}"
        )
    older = [v for v in versions if key(v) <= key(wanted)]
    if not older:
        raise ManifestError(
            f"cluster.kubernetes_version: {kubernetes_version!r} is older "
            f"than the oldest supported {utils.major_minor(versions[0])}"
        )
    return older[-1]


SCHEMA_MODULES = ("jsonschema", "kubernetes_validate", "referencing")
"""What the schema check needs: the `jobs` extra, which `make run` (the `local` extra) leaves
out (kubernetes-validate's schemas alone are about 110 MB)."""
JOBS_EXTRA = "pip install -c constraints.txt -e '.[jobs]'"


def schemas_installed() -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in SCHEMA_MODULES)
    except ImportError:  # a finder that refuses the name outright
        return False


@cache
def _validator(kind: str, api_version: str, kubernetes_version: str) -> Any:
    import jsonschema  # lazy: start-up (schema checks)
    from kubernetes_validate import utils  # lazy: start-up (schema sets)
    from referencing import Registry, Resource  # lazy: start-up (schema checks)

    version = _schema_version(kubernetes_version)
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    directory = f"kubernetes-json-schema/v{version}-local-strict"
    schema = utils.schema_contents(f"{directory}/{kind.lower()}-{group}.json", version)
    definitions = utils.schema_contents(f"{directory}/_definitions.json", version)
    registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def check_schema(resource: dict, kubernetes_version: str | None, where: str) -> None:
    """Against Kubernetes `kubernetes_version`'s schema; None: not checked."""
    if kubernetes_version is None:
        return
    validator = _validator(resource["kind"], resource["apiVersion"], kubernetes_version)
    error = next(iter(validator.iter_errors(resource)), None)
    if error is not None:
        path = ".".join(str(p) for p in error.absolute_path) or "(root)"
        raise ManifestError(
            f"{where}: {path}: {error.message} (Kubernetes {kubernetes_version} schema)"
        )


def check_manifests(manifests: list[dict], kubernetes_version: str, schemas: bool = True) -> None:
    """Raise ManifestError for the first manifest the cluster or the operator would reject;
    `schemas=False` leaves out only the check against Kubernetes' JSON schemas (a render
    where the jobs extra is not installed; the render says so)."""
    if schemas and not schemas_installed():
        raise ManifestError(
            f"checking the manifests against Kubernetes' schemas needs the jobs extra: {JOBS_EXTRA}"
        )
    version = kubernetes_version if schemas else None
    for manifest in manifests:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        if kind in JOB_CHECKS:
            JOB_CHECKS[kind](manifest, version)
        elif kind in ("ClusterTrainingRuntime", "TrainingRuntime"):
            check_jobset_webhook(manifest)
            for rjob, template in runtime_pod_templates(manifest).items():
                where = f"{kind} {name} {rjob} template"
                _check_pod_template(template, f"{name}-{rjob}", where, version)
                check_restricted_pod(template, where)
        else:
            check_schema(manifest, version, f"{kind} {name}")


def _check_trainjob(job: dict, version: str | None) -> None:
    name = job["metadata"]["name"]
    check_trainjob_webhook(job)
    _check_pod_template(trainjob_pod_template(job), name, f"TrainJob {name} pod template", version)


def _check_pytorchjob(job: dict, version: str | None) -> None:
    name = job["metadata"]["name"]
    check_pytorchjob_webhook(job)
    for rtype, replica in job["spec"]["pytorchReplicaSpecs"].items():
        wrapped = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"{name}-{rtype.lower()}"},
            "template": replica["template"],
        }
        where = f"PyTorchJob {name} {rtype} template"
        check_schema(wrapped, version, where)
        check_restricted_pod(replica["template"], where)


def _check_rayjob(job: dict, version: str | None) -> None:
    """Kueue's and KubeRay's rules (rayjob_checks), then each pod template of the Ray cluster
    and the submitter against the Kubernetes schema and the restricted standard."""
    where = _checked_name(job, RAYJOB.kind)
    problem = rayjob_problem(job)
    if problem:
        key, allowed = problem
        raise ManifestError(f"{where}: {key}: {allowed}")
    spec = job["spec"]
    cluster = spec["rayClusterSpec"]
    templates = {"head": cluster["headGroupSpec"]["template"]}
    for group in cluster.get("workerGroupSpecs") or []:
        templates[str(group.get("groupName"))] = group["template"]
    if spec.get("submitterPodTemplate"):
        templates["submitter"] = spec["submitterPodTemplate"]
    for name, template in templates.items():
        template_where = f"{where} {name} template"
        _check_pod_template(template, f"{job['metadata']['name']}-{name}", template_where, version)
        check_restricted_pod(template, template_where)


JOB_CHECKS: dict[str, Callable[[dict, str | None], None]] = {
    TRAINJOB.kind: _check_trainjob,
    PYTORCHJOB.kind: _check_pytorchjob,
    RAYJOB.kind: _check_rayjob,
}
"""A job kind's name -> its operator's admission rules and its pod templates' checks (the
Kubernetes schema for `version`, None: not checked; the restricted standard)."""
