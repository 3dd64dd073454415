"""The Training API in the cluster (infra/training_api.py) under Pulumi's mocks: the hardened
Deployment, the Service (ClusterIP or internal NLB), RBAC limited to the training namespace's
PyTorchJobs, ConfigMaps, pods and pod logs, Pod Identity, and the token Secret holding hashes
copied from Secrets Manager; plus the settings' one-line errors."""

from __future__ import annotations

import hashlib
import json

import pytest

from infra.settings.stack import ConfigError, parse_stack_config
from infra.training_api import RBAC_RULES
from jobs.backends.kubernetes.client import submit
from tests.infra.pulumi_harness import ACCOUNT, RecordingMocks, run_program, stack_file_config

SECRET_ARN = f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:trainstack/api-tokens-AbCdEf"
IMAGE = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/trainstack/trainer@sha256:{'a' * 64}"
HASHES = {"ci": hashlib.sha256(b"t1").hexdigest(), "ui": hashlib.sha256(b"t2").hexdigest()}


class SecretsMocks(RecordingMocks):
    """Secrets Manager answers with `secret_string` for the API's token secret."""

    def __init__(self, secret_string: str) -> None:
        super().__init__()
        self.secret_string = secret_string

    def call(self, args):
        if args.token == "aws:secretsmanager/getSecretVersion:getSecretVersion":
            self.invokes.append(args.token)
            return {"arn": args.args["secretId"], "secretString": self.secret_string}
        return super().call(args)


TLS_SECRET = "trainstack-api-tls"
CERTIFICATE_ARN = (
    "arn:aws:acm:us-east-1:123456789012:certificate/0b1c2d3e-aaaa-bbbb-cccc-1234567890ab"
)


def with_api(**settings) -> dict:
    """The dev stack with the API; TLS from the pod's Secret unless `settings` name a TLS
    setting (a None value leaves that setting out)."""
    config = stack_file_config("dev")
    tls_named = {"certificateArn", "tlsSecretName"} & set(settings)
    config["trainstack:trainingApi"] = {
        "image": IMAGE,
        "tokenHashesSecretArn": SECRET_ARN,
        **({} if tls_named else {"tlsSecretName": TLS_SECRET}),
        **{k: v for k, v in settings.items() if v is not None},
    }
    return config


GOOD_SECRET = json.dumps(HASHES)


def run(config, secret=GOOD_SECRET):
    return run_program(config, "dev", mocks=SecretsMocks(secret))


def named(run_, type_: str, suffix: str = "-api"):
    found = [r for r in run_.of_type(type_) if r.name.endswith(suffix)]
    assert len(found) == 1, [r.name for r in run_.of_type(type_)]
    return found[0]


def test_the_api_deployment_service_rbac_identity_and_secret(api_stack_run):
    result = api_stack_run
    deployment = named(result, "kubernetes:apps/v1:Deployment")
    spec = deployment.inputs["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    hardened = container["securityContext"]
    assert hardened["runAsNonRoot"] is True and hardened["allowPrivilegeEscalation"] is False
    assert hardened["capabilities"] == {"drop": ["ALL"]}
    assert hardened["readOnlyRootFilesystem"] is True
    assert hardened["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    args = container["args"]
    assert args[0] == "serve" and "backend.preflight=false" in args
    assert "--token-hashes=/etc/trainstack/token-hashes" in args
    assert "cluster.namespace=training" in args and "storage=s3" in args
    # The stack's own job settings: its runtimes (node groups), its queue, its operator's kind.
    assert any(a.startswith("cluster.node_groups=[{name:") for a in args)
    assert "job.queue='training'" in args  # the stack's LocalQueue, locked
    assert "job.api=trainjob" in args

    service = named(result, "kubernetes:core/v1:Service")
    assert service.inputs["spec"]["type"] == "ClusterIP"
    assert service.inputs["metadata"].get("annotations", {}) == {}

    role = named(result, "kubernetes:rbac.authorization.k8s.io/v1:Role")
    assert role.inputs["metadata"]["namespace"] == "training"
    granted = {
        (g, r)
        for rule in role.inputs["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert granted == {
        ("kubeflow.org", "pytorchjobs"),
        ("trainer.kubeflow.org", "trainjobs"),
        ("ray.io", "rayjobs"),  # trainstack:rayJobs (on by default)
        ("jobset.x-k8s.io", "jobsets"),
        ("kueue.x-k8s.io", "workloads"),  # cancel deactivates a queued run's Workload
        ("", "configmaps"),
        ("networking.k8s.io", "networkpolicies"),  # each run's own policy
        ("", "pods"),
        ("", "pods/log"),
        ("batch", "jobs"),  # eval.every_checkpoint's eval Jobs (jobs/api/eval_scheduler.py)
    }
    (jobs_rule,) = [rule for rule in role.inputs["rules"] if rule["apiGroups"] == ["batch"]]
    assert sorted(jobs_rule["verbs"]) == ["create", "get", "list"]  # never changed or deleted
    assert not result.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole") or all(
        "api" not in r.name
        for r in result.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
    )
    binding = named(result, "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
    assert binding.inputs["roleRef"]["kind"] == "Role"
    assert binding.inputs["subjects"][0]["name"] == "trainstack-dev-api"

    association = named(result, "aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert association.inputs["serviceAccount"] == "trainstack-dev-api"
    policy = json.loads(
        named(result, "aws:iam/rolePolicy:RolePolicy", "-api-inline").inputs["policy"]
    )
    actions = {
        a
        for s in policy["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert actions == {"s3:GetObject", "s3:ListBucket", "kms:Decrypt", "ecr:DescribeImages"}

    secret = named(result, "kubernetes:core/v1:Secret", "-api-token-hashes")
    data = secret.inputs["stringData"]
    assert data["4dabf18193072939515e22adb298388d"] == "1b47061264138c4ac30d75fd1eb44270"  # secret
    assert data["value"] == HASHES
    assert "aws:secretsmanager/getSecretVersion:getSecretVersion" in result.invokes
    assert result.outputs["training_api_service"] == "trainstack-dev-api"


def test_an_internal_nlb_by_setting():
    service = named(run(with_api(internalLoadBalancer=True)), "kubernetes:core/v1:Service")
    assert service.inputs["spec"]["type"] == "LoadBalancer"
    annotations = service.inputs["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-internal"] == "true"
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-type"] == "nlb"


def test_the_pod_serves_https_with_the_mounted_certificate(api_stack_run):
    result = api_stack_run
    deployment = named(result, "kubernetes:apps/v1:Deployment")
    pod = deployment.inputs["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "--tls-cert=/etc/trainstack/tls/tls.crt" in container["args"]
    assert "--tls-key=/etc/trainstack/tls/tls.key" in container["args"]
    assert {"name": "tls", "secret": {"secretName": TLS_SECRET}} in pod["volumes"]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    service = named(result, "kubernetes:core/v1:Service")
    assert service.inputs["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https"}
    ]


def test_the_nlb_serves_tls_with_the_acm_certificate():
    result = run(with_api(internalLoadBalancer=True, certificateArn=CERTIFICATE_ARN))
    service = named(result, "kubernetes:core/v1:Service")
    annotations = service.inputs["metadata"]["annotations"]
    prefix = "service.beta.kubernetes.io/aws-load-balancer-"
    assert annotations[f"{prefix}ssl-cert"] == CERTIFICATE_ARN
    assert annotations[f"{prefix}ssl-ports"] == "https"
    assert annotations[f"{prefix}ssl-negotiation-policy"].startswith("ELBSecurityPolicy-TLS13")
    assert service.inputs["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "http"}]
    container = named(result, "kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "--secure-cookies" in container["args"]
    assert not any(a.startswith("--tls-cert") for a in container["args"])


def test_no_api_without_the_setting():
    result = run(stack_file_config("dev"))
    assert not [
        r for r in result.of_type("kubernetes:apps/v1:Deployment") if r.name.endswith("-api")
    ]
    assert result.outputs["training_api_service"] is None


@pytest.mark.parametrize("secret", ['{"ci": "my-plain-token"}', "not json", "{}"])
def test_a_secret_that_is_not_hashes_stops_the_deploy(secret):
    with pytest.raises(Exception, match=r"tokenHashesSecretArn: .*(SHA-256|JSON object)"):
        run(with_api(), secret=secret)


@pytest.mark.parametrize(
    ("settings", "key", "words"),
    [
        ({"image": "registry/trainstack/trainer:latest"}, "trainingApi.image", "@sha256:<digest>"),
        (
            {"tokenHashesSecretArn": "my-token"},
            "trainingApi.tokenHashesSecretArn",
            "Secrets Manager",
        ),
        ({"replicas": 0}, "trainingApi.replicas", ""),
        ({"cpu": "lots"}, "trainingApi.cpu", "CPU quantity"),
        (
            {"colour": "red"},
            "trainingApi.colour",
            "unknown setting; allowed: admins, certificateArn, cpu, image",
        ),
        ({"tlsSecretName": None}, "trainingApi.certificateArn", "serves TLS only"),
        ({"certificateArn": CERTIFICATE_ARN}, "trainingApi.certificateArn", "internal NLB"),
        (
            {"certificateArn": "my-cert", "internalLoadBalancer": True},
            "trainingApi.certificateArn",
            "ACM certificate ARN",
        ),
    ],
)
def test_bad_api_settings_are_one_line(settings, key, words):
    config = {
        k.split(":", 1)[1]: v
        for k, v in with_api(**settings).items()
        if k.startswith("trainstack:")
    }
    values = {k: json.dumps(v) if isinstance(v, dict | list) else str(v) for k, v in config.items()}
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(values, stack="dev", region="us-east-1")
    message = str(raised.value)
    assert message.startswith(f"trainstack:{key}: ") and words in message and "\n" not in message


def test_admins_are_named_in_config_and_passed_to_serve(api_stack_run):
    result = run(with_api(admins=["ci", "ui"]))
    deployment = named(result, "kubernetes:apps/v1:Deployment")
    args = deployment.inputs["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--admin")] == ["--admin=ci", "--admin=ui"]
    args = named(api_stack_run, "kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert not [a for a in args if a.startswith("--admin")]  # nobody unless named


def test_an_admin_without_a_token_stops_the_deploy():
    with pytest.raises(Exception, match=r"trainingApi.admins: carol has no token in arn:"):
        run(with_api(admins=["ci", "carol"]))


@pytest.mark.parametrize(
    ("admins", "words"),
    [
        ("alice", "expected a list of strings"),
        (["--no-auth"], "a user name as in the token hashes secret"),
        (["a b"], "a user name as in the token hashes secret"),
        (["x" * 64], "a user name as in the token hashes secret"),
        (["ci", "ci"], "listed twice"),
    ],
)
def test_bad_admin_names_are_one_line(admins, words):
    config = {
        k.split(":", 1)[1]: v
        for k, v in with_api(admins=admins).items()
        if k.startswith("trainstack:")
    }
    values = {k: json.dumps(v) if isinstance(v, dict | list) else str(v) for k, v in config.items()}
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(values, stack="dev", region="us-east-1")
    message = str(raised.value)
    assert message.startswith("trainstack:trainingApi.admins: ") and words in message
    assert "\n" not in message


# The RBAC verb each client call of a run's submission needs
# (jobs/backends/kubernetes/client/submit.py's `_verbs`).
CLIENT_VERB_TO_RBAC = {"create": "create", "read": "get", "replace": "update", "patch": "patch"}
COMPANION_RESOURCES = {
    "ConfigMap": ("", "configmaps"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
}


def test_the_role_grants_every_verb_a_submission_uses_on_its_companions():
    """Every object a submission sends beside its job (submit.COMPANION_KINDS) with every verb
    the submit path calls on it is granted to the API's Role: the Role once left out
    NetworkPolicies, and the real RBAC refused every POST /v1/runs (tests/e2e)."""
    granted = {
        (group, resource, verb)
        for rule in RBAC_RULES
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for kind in submit.COMPANION_KINDS:
        group, resource = COMPANION_RESOURCES[kind]
        for client_verb in submit._verbs(_NamingCluster(), kind):
            verb = CLIENT_VERB_TO_RBAC.get(client_verb, client_verb)
            assert (group, resource, verb) in granted, (kind, client_verb)


class _NamingCluster:
    """Stands in for the client APIs: any method name resolves, so `_verbs` can be asked
    which calls it would make."""

    class _Api:
        def __getattr__(self, name):
            return name

    core = networking = _Api()
