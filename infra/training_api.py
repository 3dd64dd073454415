"""The Training API in the cluster: `trainstack serve` (images/api) behind a Service.

Two replicas of a hardened Deployment (non-root, read-only root filesystem, no privilege
escalation, every capability dropped, RuntimeDefault seccomp), probed on /healthz; a ClusterIP
Service, or an internal NLB when `trainingApi.internalLoadBalancer` is set. Its ServiceAccount
may touch only its job kinds (TrainJobs, PyTorchJobs, and RayJobs where KubeRay is installed),
ConfigMaps, NetworkPolicies, pods and pod logs in the training namespace (a Role,
not a ClusterRole: the service runs with `backend.preflight=false`, so it reads no nodes or
CRDs), and by Pod Identity read run dirs in S3 and look up ECR digests. Bearer tokens: the
Secret holds SHA-256 hashes only, copied from the Secrets Manager secret the stack names;
each value is checked to be a hash, so a plaintext token can never land in the cluster.
TLS only (port 443): either the pod serves HTTPS with a mounted kubernetes.io/tls Secret
(`tlsSecretName`, end to end) or the internal NLB ends TLS with the stack's ACM certificate
(`certificateArn`; the pod marks its cookies Secure).
"""

from __future__ import annotations

import json
import re

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.bucket_layout import RUNS
from infra.iam import pod_identity_role
from infra.policies import training_api_policy
from infra.settings.types import TrainingApiConfig

PORT = 8080
TOKEN_DIR = "/etc/trainstack/token-hashes"
TLS_DIR = "/etc/trainstack/tls"
NLB_TLS_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
_HASH = re.compile(r"^(sha256:)?[0-9a-f]{64}\Z")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+\Z")
RAYJOB_RULE = {
    "apiGroups": ["ray.io"],
    "resources": ["rayjobs"],
    "verbs": ["get", "list", "watch", "create", "patch", "delete"],
}
"""A RayJob, as the kubernetes backend handles a training job: submitted, followed, suspended,
deleted. Nothing of its RayCluster (KubeRay makes and deletes it; the run's pods are read as
pods)."""
_BASE_RULES = (
    {
        "apiGroups": ["kubeflow.org"],
        "resources": ["pytorchjobs"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    {
        "apiGroups": ["trainer.kubeflow.org"],
        "resources": ["trainjobs"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    # A TrainJob's JobSet: its restarts, in a run's status.
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]},
    # A queued run's Workload: Kueue's reason in its status; `cancel` deactivates it (a suspend
    # alone Kueue undoes: jobs/backends/kubernetes/client/kueue.py).
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list", "patch"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "create", "update", "patch", "delete"],
    },
    # Each run's NetworkPolicy, submitted (and replaced on a resubmission) beside its ConfigMap
    # (jobs/backends/kubernetes/client/submit.py); without it the real RBAC refused every submission
    # through the API
    # (found by tests/e2e against the local control plane).
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["get", "create", "update", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    # `eval.every_checkpoint`'s eval Jobs, one per checkpoint (jobs/api/eval_scheduler.py):
    # created and counted, never changed or deleted (their TTL does that).
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "create"]},
)


def rbac_rules(*, ray_jobs: bool = True) -> tuple[dict, ...]:
    """The Role's rules: RayJobs only where the stack installs KubeRay (`trainstack:rayJobs`)."""
    return (*_BASE_RULES, *((RAYJOB_RULE,) if ray_jobs else ()))


RBAC_RULES = rbac_rules()
"""Every rule the API may need (RayJobs included): what a cluster with every operator grants."""


def api_name(stack_name: str) -> str:
    """The Deployment's, ServiceAccount's, Role's and Service's name."""
    return f"{stack_name}-api"


def api_labels(app: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "trainstack-api", "app.kubernetes.io/instance": app}


def network_policy_spec(labels: dict[str, str]) -> dict:
    """Pure: the API's port open to its own pods only (the namespace denies ingress by default;
    nothing reaches the jobs)."""
    return {
        "podSelector": {"matchLabels": labels},
        "policyTypes": ["Ingress"],
        "ingress": [{"ports": [{"port": PORT, "protocol": "TCP"}]}],
    }


def token_hashes(
    secret_string: str | None, secret_arn: str, admins: tuple[str, ...] = ()
) -> dict[str, str]:
    """The Secret's data: {name: sha256 hex}. Anything else is refused with one line, and so
    is an admin with no token (a misspelt name would silently make nobody an admin)."""
    try:
        loaded = json.loads(secret_string or "")
    except json.JSONDecodeError:
        loaded = None
    if not isinstance(loaded, dict) or not loaded:
        raise pulumi.RunError(
            f"trainstack:trainingApi.tokenHashesSecretArn: {secret_arn} must hold a JSON object "
            '{"<name>": "<sha256 hex of a token>", ...} (`trainstack serve --hash-token`)'
        )
    for name, value in loaded.items():
        if not _SECRET_KEY.match(str(name)) or not isinstance(value, str) or not _HASH.match(value):
            raise pulumi.RunError(
                f"trainstack:trainingApi.tokenHashesSecretArn: entry {name!r} is not a SHA-256 "
                "hex digest; store hashes, never tokens"
            )
    missing = [admin for admin in admins if admin not in loaded]
    if missing:
        raise pulumi.RunError(
            f"trainstack:trainingApi.admins: {', '.join(missing)} has no token in "
            f"{secret_arn}; allowed: the names it holds"
        )
    return {str(k): v for k, v in loaded.items()}


def _quoted(value: str) -> str:
    """A value in Hydra's override grammar (names and instance types: no quotes in them)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def serve_args(
    namespace: str,
    storage_root: str,
    repository_url: str,
    tls: str = "pod",
    admins: tuple[str, ...] = (),
    *,
    job_api: str = "pytorchjob",
    node_groups: tuple[tuple[str, str, int], ...] = (),
    queue: str | None = None,
    grants: dict[str, list[dict]] | None = None,
) -> list[str]:
    """The container's arguments (pure: the API tests start the service from these).
    `tls`: "pod" (the pod serves HTTPS with the mounted certificate) or "nlb" (the NLB ends
    TLS; cookies are still Secure). `job_api`: the operator the stack installed.
    `node_groups`: (name, instance type, max size) of each GPU node group: a job runs only on the
    runtimes the stack installs for them. `queue`: the stack's Kueue LocalQueue (None: no
    Kueue; either way a request cannot pick another). `grants`: the stack's `s3_grants`
    (role -> [{url, access}]): the service reads no s3:// input outside the pods' grants."""
    encryption = (
        [f"--tls-cert={TLS_DIR}/tls.crt", f"--tls-key={TLS_DIR}/tls.key"]
        if tls == "pod"
        else ["--secure-cookies"]
    )
    groups = ",".join(
        f"{{name:{_quoted(name)},instance_type:{_quoted(instance)},max_size:{int(most)}}}"
        for name, instance, most in node_groups
    )
    roles = ",".join(
        f"{role}:["
        + ",".join(f"{{url:{_quoted(g['url'])},access:{_quoted(g['access'])}}}" for g in items)
        + "]"
        for role, items in (grants or {}).items()
    )
    return [
        "serve",
        "--host=0.0.0.0",
        f"--port={PORT}",
        f"--token-hashes={TOKEN_DIR}",
        *encryption,
        *(f"--admin={admin}" for admin in admins),
        f"cluster.namespace={namespace}",
        f"cluster.node_groups=[{groups}]",
        "storage=s3",
        f"storage.root={storage_root}",
        f"storage.grants={{{roles}}}",
        f"job.image_repository={repository_url}",
        f"job.api={job_api}",
        # Locked either way: the stack's queue, or none (a request cannot name another team's).
        f"job.queue={_quoted(queue) if queue else 'null'}",
        # Preflight reads nodes and CRDs (cluster-wide); the Role grants only the namespace.
        # Validation checks what the preflight would have on every path (job.runtime).
        "backend.preflight=false",
    ]


class TrainingApi(pulumi.ComponentResource):
    service_name: pulumi.Output[str]
    role_arn: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: TrainingApiConfig,
        namespace: pulumi.Input[str],
        cluster_name: pulumi.Input[str],
        partition: str,
        account_id: str,
        bucket_arn: pulumi.Input[str],
        bucket_key_arn: pulumi.Input[str],
        storage_root: pulumi.Input[str],
        repository_arn: pulumi.Input[str],
        repository_url: pulumi.Input[str],
        k8s_provider: k8s.Provider,
        node_groups: tuple[tuple[str, str, int], ...] = (),
        queue: pulumi.Input[str] | None = None,
        job_api: str = "pytorchjob",
        grants: pulumi.Input[dict] | None = None,
        ray_jobs: bool = True,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:TrainingApi", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=k8s_provider)
        app = api_name(name)
        labels = api_labels(app)

        account = k8s.core.v1.ServiceAccount(
            app, metadata={"name": app, "namespace": namespace, "labels": labels}, opts=child
        )
        role, _ = pod_identity_role(
            app,
            self,
            partition,
            account_id,
            cluster_name,
            namespace,
            account.metadata.name,
            inline_policy=pulumi.Output.all(bucket_arn, bucket_key_arn, repository_arn).apply(
                lambda arns: training_api_policy(arns[0], RUNS, arns[1], arns[2])
            ),
        )
        rbac_role = k8s.rbac.v1.Role(
            app,
            metadata={"name": app, "namespace": namespace, "labels": labels},
            rules=list(rbac_rules(ray_jobs=ray_jobs)),
            opts=child,
        )
        k8s.rbac.v1.RoleBinding(
            app,
            metadata={"name": app, "namespace": namespace, "labels": labels},
            role_ref={
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": rbac_role.metadata.name,
            },
            subjects=[
                {"kind": "ServiceAccount", "name": account.metadata.name, "namespace": namespace}
            ],
            opts=child,
        )
        secret_arn = settings.token_hashes_secret_arn
        stored = aws.secretsmanager.get_secret_version_output(secret_id=secret_arn, opts=None)
        tokens = k8s.core.v1.Secret(
            f"{app}-token-hashes",
            metadata={"name": f"{app}-token-hashes", "namespace": namespace, "labels": labels},
            type="Opaque",
            string_data=pulumi.Output.secret(
                stored.secret_string.apply(
                    lambda text: token_hashes(text, secret_arn, settings.admins)
                )
            ),
            opts=child,
        )
        if settings.tls_secret_name:  # the pod serves HTTPS with the mounted certificate
            tls, scheme, port_name = "pod", "HTTPS", "https"
            tls_mounts = [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}]
            tls_volumes = [{"name": "tls", "secret": {"secretName": settings.tls_secret_name}}]
        else:  # the NLB ends TLS with the stack's ACM certificate
            tls, scheme, port_name = "nlb", "HTTP", "http"
            tls_mounts, tls_volumes = [], []
        container = {
            "name": "api",
            "image": settings.image,
            "args": pulumi.Output.all(namespace, storage_root, repository_url, queue, grants).apply(
                lambda values: serve_args(
                    *values[:3],
                    tls=tls,
                    admins=settings.admins,
                    job_api=job_api,
                    node_groups=node_groups,
                    queue=values[3],
                    grants=values[4],
                )
            ),
            "ports": [{"name": port_name, "containerPort": PORT}],
            "env": [{"name": "MPLCONFIGDIR", "value": "/tmp/matplotlib"}],
            "readinessProbe": {
                "httpGet": {"path": "/healthz", "port": port_name, "scheme": scheme},
                "periodSeconds": 5,
                "failureThreshold": 3,
            },
            "livenessProbe": {
                "httpGet": {"path": "/healthz", "port": port_name, "scheme": scheme},
                "initialDelaySeconds": 20,
                "periodSeconds": 10,
                "failureThreshold": 6,
            },
            "resources": {
                "requests": {"cpu": settings.cpu, "memory": settings.memory},
                "limits": {"memory": settings.memory},
            },
            "securityContext": {
                "runAsNonRoot": True,
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "volumeMounts": [
                {"name": "token-hashes", "mountPath": TOKEN_DIR, "readOnly": True},
                {"name": "tmp", "mountPath": "/tmp"},
                *tls_mounts,
            ],
        }
        deployment = k8s.apps.v1.Deployment(
            app,
            metadata={"name": app, "namespace": namespace, "labels": labels},
            spec={
                "replicas": settings.replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": account.metadata.name,
                        "automountServiceAccountToken": True,
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 10001,
                            "runAsGroup": 10001,
                            "fsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        # One replica per node where possible: a node drain keeps the API up.
                        "topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": "kubernetes.io/hostname",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": labels},
                            }
                        ],
                        "containers": [container],
                        "volumes": [
                            {
                                "name": "token-hashes",
                                "secret": {"secretName": tokens.metadata.name},
                            },
                            {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
                            *tls_volumes,
                        ],
                    },
                },
            },
            opts=child,
        )
        # The training namespace denies ingress by default: open the API's port, to its pods only
        # (the Service and its internal load balancer forward there; nothing reaches the jobs).
        k8s.networking.v1.NetworkPolicy(
            app,
            metadata={"name": app, "namespace": namespace, "labels": labels},
            spec=network_policy_spec(labels),
            opts=child,
        )
        annotations = {}
        if settings.internal_load_balancer:
            annotations = {
                "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
                "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
            }
        if settings.certificate_arn:  # the NLB ends TLS with the stack's ACM certificate
            annotations = {
                **annotations,
                "service.beta.kubernetes.io/aws-load-balancer-ssl-cert": settings.certificate_arn,
                "service.beta.kubernetes.io/aws-load-balancer-ssl-ports": "https",
                "service.beta.kubernetes.io/aws-load-balancer-backend-protocol": "tcp",
                "service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy": (
                    NLB_TLS_POLICY
                ),
            }
        service = k8s.core.v1.Service(
            app,
            metadata={
                "name": app,
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
            },
            spec={
                "type": "LoadBalancer" if settings.internal_load_balancer else "ClusterIP",
                "selector": labels,
                # TLS only: 443 is HTTPS, from the pod or from the NLB's certificate.
                "ports": [{"name": "https", "port": 443, "targetPort": port_name}],
            },
            opts=pulumi.ResourceOptions(
                parent=self, provider=k8s_provider, depends_on=[deployment]
            ),
        )
        self.service_name = service.metadata.name
        self.role_arn = role.arn
        self.register_outputs({"service_name": self.service_name, "role_arn": self.role_arn})
