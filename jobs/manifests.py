"""Job spec -> Kubernetes manifests: a `kubeflow.org/v1` PyTorchJob and the ConfigMap holding
the trainer's config, built with the official client models and checked before returning.

Pure: the same spec always gives the same dicts (golden tests pin them).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import yaml

from jobs.manifest_checks import check_manifests
from jobs.spec import CONFIG_FILE, CONFIG_MOUNT_DIR, JobSpec

CONTAINER_NAME = "pytorch"
"""The operator finds the trainer container by this name."""
RESTART_POLICY = "ExitCode"
"""Retry exit codes 128-255 (SIGTERM preemption: the trainer resumes), fail on 1-127."""
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_TAINT = "nvidia.com/gpu"
IMAGE_UID = 10001
"""The trainer image's user (images/trainer/Dockerfile: `USER 10001:10001`)."""


def config_map_name(run_id: str) -> str:
    return f"{run_id}-config"


def trainer_config_yaml(spec: JobSpec) -> str:
    return yaml.safe_dump(spec.trainer_config, sort_keys=False)


@cache
def _serializer() -> Any:
    from kubernetes.client import ApiClient

    return ApiClient()


def _resources(spec: JobSpec) -> Any:
    from kubernetes.client import V1ResourceRequirements

    res = spec.resources
    amounts = {"cpu": res.cpu, "memory": res.memory, "nvidia.com/gpu": str(res.gpus)}
    if res.efa:
        amounts["vpc.amazonaws.com/efa"] = str(res.efa)
    if res.hugepages_2mi:
        amounts["hugepages-2Mi"] = res.hugepages_2mi
    return V1ResourceRequirements(requests=dict(amounts), limits=dict(amounts))


def _env(spec: JobSpec) -> list[Any]:
    from kubernetes.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

    env = [V1EnvVar(name=k, value=v) for k, v in spec.env.items()]
    for ref in spec.secret_env:
        selector = V1SecretKeySelector(name=ref.secret, key=ref.key)
        env.append(V1EnvVar(name=ref.env, value_from=V1EnvVarSource(secret_key_ref=selector)))
    return env


def security_contexts(k8s: Any) -> tuple[Any, Any]:
    """(pod, container) contexts meeting the `restricted` Pod Security Standard: a non-root
    uid (the image's), no privilege escalation, every capability dropped, the runtime's
    default seccomp profile. EFA needs none back: the device plugin hands the pod its
    /dev/infiniband devices, the huge pages come as a resource, and memory locking (which
    libfabric needs unlimited) is the node runtime's memlock ulimit — CAP_IPC_LOCK would only
    matter if the pod had to raise that limit itself; the image self-test checks it."""
    pod = k8s.V1PodSecurityContext(
        run_as_non_root=True,
        run_as_user=IMAGE_UID,
        run_as_group=IMAGE_UID,
        fs_group=IMAGE_UID,
        seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
    )
    container = k8s.V1SecurityContext(
        run_as_non_root=True,
        run_as_user=IMAGE_UID,
        allow_privilege_escalation=False,
        capabilities=k8s.V1Capabilities(drop=["ALL"]),
        seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
    )
    return pod, container


def pod_template(spec: JobSpec) -> Any:
    from kubernetes import client as k8s

    pod_security, container_security = security_contexts(k8s)
    container = k8s.V1Container(
        name=CONTAINER_NAME,
        image=spec.image,
        image_pull_policy="IfNotPresent",
        command=list(spec.command),
        env=_env(spec),
        resources=_resources(spec),
        security_context=container_security,
        volume_mounts=[
            k8s.V1VolumeMount(name="trainer-config", mount_path=CONFIG_MOUNT_DIR, read_only=True),
            k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm"),
        ],
    )
    volumes = [
        k8s.V1Volume(
            name="trainer-config",
            config_map=k8s.V1ConfigMapVolumeSource(
                name=config_map_name(spec.name),
                items=[k8s.V1KeyToPath(key=CONFIG_FILE, path=CONFIG_FILE)],
            ),
        ),
        # NCCL and the data loader use shared memory; the default 64 MiB is far too small.
        k8s.V1Volume(
            name="dshm",
            empty_dir=k8s.V1EmptyDirVolumeSource(
                medium="Memory", size_limit=spec.resources.shm_size
            ),
        ),
    ]
    pod = k8s.V1PodSpec(
        containers=[container],
        volumes=volumes,
        node_selector={INSTANCE_TYPE_LABEL: spec.instance_type},
        tolerations=[k8s.V1Toleration(key=GPU_TAINT, operator="Exists", effect="NoSchedule")],
        service_account_name=spec.service_account,
        termination_grace_period_seconds=spec.termination_grace_period_seconds,
        security_context=pod_security,
    )
    # Kueue's labels belong on the job only: Kueue admits the job, never its pods one by one.
    labels = {k: v for k, v in spec.labels.items() if not k.startswith("kueue.x-k8s.io/")}
    meta = k8s.V1ObjectMeta(labels=labels, annotations=dict(spec.annotations))
    return k8s.V1PodTemplateSpec(metadata=meta, spec=pod)


def _metadata(spec: JobSpec, name: str) -> Any:
    from kubernetes.client import V1ObjectMeta

    return V1ObjectMeta(
        name=name,
        namespace=spec.namespace,
        labels=dict(spec.labels),
        annotations=dict(spec.annotations),
    )


def pytorch_job(spec: JobSpec) -> Any:
    from kubeflow.training import models as kf

    template = pod_template(spec)
    replicas = {}
    if spec.master_replicas:
        replicas["Master"] = kf.KubeflowOrgV1ReplicaSpec(
            replicas=spec.master_replicas, restart_policy=RESTART_POLICY, template=template
        )
    if spec.worker_replicas:
        replicas["Worker"] = kf.KubeflowOrgV1ReplicaSpec(
            replicas=spec.worker_replicas, restart_policy=RESTART_POLICY, template=template
        )
    elastic = None
    if spec.elastic:
        elastic = kf.KubeflowOrgV1ElasticPolicy(
            rdzv_backend="c10d",
            min_replicas=spec.elastic.min_nodes,
            max_replicas=spec.elastic.max_nodes,
            max_restarts=spec.run_policy.backoff_limit,  # job.max_restarts, as torchrun's
        )
    policy = spec.run_policy
    run_policy = kf.KubeflowOrgV1RunPolicy(
        backoff_limit=policy.backoff_limit,
        clean_pod_policy=policy.clean_pod_policy,
        ttl_seconds_after_finished=policy.ttl_seconds_after_finished,
        active_deadline_seconds=policy.active_deadline_seconds,
        suspend=True if policy.suspend else None,
    )
    return kf.KubeflowOrgV1PyTorchJob(
        api_version="kubeflow.org/v1",
        kind="PyTorchJob",
        metadata=_metadata(spec, spec.name),
        spec=kf.KubeflowOrgV1PyTorchJobSpec(
            nproc_per_node=str(spec.nproc_per_node),
            elastic_policy=elastic,
            pytorch_replica_specs=replicas,
            run_policy=run_policy,
        ),
    )


def config_map(spec: JobSpec) -> Any:
    from kubernetes.client import V1ConfigMap

    return V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=_metadata(spec, config_map_name(spec.name)),
        data={CONFIG_FILE: trainer_config_yaml(spec)},
    )


def to_manifests(spec: JobSpec) -> list[dict]:
    """[ConfigMap, PyTorchJob] as plain dicts, validated (raises `ManifestError`)."""
    serialize = _serializer().sanitize_for_serialization
    manifests = [serialize(config_map(spec)), serialize(pytorch_job(spec))]
    check_manifests(manifests, spec.kubernetes_version)
    return manifests


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the trainer config in the ConfigMap) as readable `|` blocks."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_BlockDumper.add_representer(str, _represent_str)


def to_yaml(manifests: list[dict]) -> str:
    """Multi-document YAML that `kubectl apply -f` takes."""
    return yaml.dump_all(manifests, Dumper=_BlockDumper, sort_keys=False)
