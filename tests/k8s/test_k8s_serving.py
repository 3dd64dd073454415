"""`serve-model` on the cluster: the vLLM manifests (probes that wait for the model, GPUs and
node group from the catalog, LoRA flags, its own ServiceAccount, NetworkPolicy and priority
class, labels and name lengths), checked against Kubernetes' schemas; the CLI's render, apply
and take-down; bad input is one line and exit 2 with nothing written or applied."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

import jobs.commands.serve_cluster as serve_cluster
from catalog import INSTANCE_TYPES
from catalog.kubernetes import SERVING_PRIORITY_CLASS
from catalog.pods import pod_resources
from jobs.backends.kubernetes.client import serving as client
from jobs.backends.kubernetes.client.ownership import NotOurs
from jobs.backends.kubernetes.manifest_checks import ManifestError, check_schema
from jobs.backends.kubernetes.serving import (
    CLIENT_LABEL,
    KINDS,
    MAX_NAME,
    PROBE_PERIOD_S,
    ServingSpec,
    selector,
    to_manifests,
)
from jobs.cli import main
from trainer.serving import fetch

SPEC = ServingSpec(
    run_id="llama-20260101-000000-abcd",
    export_uri="s3://bkt/runs/llama-20260101-000000-abcd/export",
    namespace="training",
    instance_type="p5.48xlarge",
    gpus=2,
    fetch_image="registry.example.com/trainer:v1",
    region="us-east-1",
    kubernetes_version="1.35",
    served_name="llama",
    node_group="p5",
)


def by_kind(manifests: list[dict]) -> dict[str, dict]:
    return {m["kind"]: m for m in manifests}


def pod(manifests: list[dict]) -> dict:
    return by_kind(manifests)["Deployment"]["spec"]["template"]["spec"]


def test_every_object_passes_the_kubernetes_schema_and_carries_the_serving_labels():
    manifests = to_manifests(SPEC)
    assert [m["kind"] for m in manifests] == [
        "ServiceAccount",
        "NetworkPolicy",
        "Service",
        "Deployment",
    ]
    assert {(m["apiVersion"], m["kind"]) for m in manifests} == set(KINDS)
    for manifest in manifests:
        check_schema(manifest, "1.35", manifest["kind"])  # again, here: the test's own call
        labels = manifest["metadata"]["labels"]
        assert selector(SPEC.run_id) == ",".join(f"{k}={v}" for k, v in labels.items())
        assert len(manifest["metadata"]["name"]) <= MAX_NAME
        assert "trainstack.io/run-id" not in labels  # a run's pods, listed by status, are not
    deployment = by_kind(manifests)["Deployment"]
    assert deployment["spec"]["template"]["metadata"]["labels"] == labels
    service = by_kind(manifests)["Service"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_a_schema_breaking_field_is_refused():
    broken = dataclasses.replace(SPEC, gpus=1)
    manifests = to_manifests(broken)
    deployment = by_kind(manifests)["Deployment"]
    deployment["spec"]["replicas"] = "one"
    with pytest.raises(ManifestError, match=r"spec\.replicas"):
        check_schema(deployment, "1.35", "Deployment")


def test_probes_wait_for_the_model_on_health_not_a_fixed_delay():
    (server,) = pod(to_manifests(dataclasses.replace(SPEC, startup_timeout_s=1200)))["containers"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"] == {"path": "/health", "port": "http"}
        assert "initialDelaySeconds" not in server[probe]
    startup = server["startupProbe"]
    assert startup["failureThreshold"] * startup["periodSeconds"] >= 1200
    assert startup["periodSeconds"] == PROBE_PERIOD_S


def test_gpus_instance_and_node_group_come_from_the_catalog_and_the_stack():
    spec = pod(to_manifests(SPEC))
    (server,) = spec["containers"]
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert server["resources"]["requests"] == server["resources"]["limits"]
    share = pod_resources(INSTANCE_TYPES["p5.48xlarge"], 2)
    assert server["resources"]["limits"]["cpu"] == share.cpu
    assert server["resources"]["limits"]["memory"] == share.memory
    mounts = {m["mountPath"] for m in server["volumeMounts"]}
    assert "/dev/shm" in mounts
    assert spec["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "trainstack.io/node-group": "p5",
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    command = server["command"]
    assert command[:3] == ["vllm", "serve", f"/models/{SPEC.run_id}"]
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    assert command[command.index("--served-model-name") + 1] == "llama"
    assert "--enable-lora" not in command


def test_a_lora_export_is_served_on_its_base_with_enable_lora():
    spec = dataclasses.replace(SPEC, lora_base="meta-llama/Llama-3.2-1B")
    (server,) = pod(to_manifests(spec))["containers"]
    command = server["command"]
    assert command[2] == "meta-llama/Llama-3.2-1B"
    assert "--enable-lora" in command
    assert command[command.index("--lora-modules") + 1] == f"llama=/models/{SPEC.run_id}"


def test_the_init_container_copies_only_this_runs_export():
    spec = pod(to_manifests(SPEC))
    (fetch,) = spec["initContainers"]
    assert fetch["command"] == [
        "python",
        "-m",
        "trainer.serving.fetch",
        SPEC.export_uri,
        f"/models/{SPEC.run_id}",
    ]
    assert fetch["image"] == SPEC.fetch_image
    (server,) = spec["containers"]
    mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
    assert mounts["/models"].get("readOnly") is True


def test_own_service_account_network_policy_and_priority_class():
    manifests = by_kind(to_manifests(SPEC))
    account = manifests["ServiceAccount"]
    assert account["metadata"]["name"] == SPEC.run_id  # the serving role's policy reads it back
    assert account["automountServiceAccountToken"] is False
    spec = manifests["Deployment"]["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == SPEC.run_id
    assert spec["priorityClassName"] == SERVING_PRIORITY_CLASS
    policy = manifests["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= account["metadata"]["labels"].items()
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}]
    selectors = [peer["podSelector"]["matchLabels"] for peer in rule["from"]]
    assert selectors == [{CLIENT_LABEL: "true"}, {"app.kubernetes.io/name": "trainstack-api"}]
    assert all("namespaceSelector" not in peer for peer in rule["from"])  # same namespace only


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"gpus": 9}, "compute.gpus_per_node: 9; allowed: 1 to 8 (p5.48xlarge)"),
        ({"gpus": 0}, "compute.gpus_per_node: 0; allowed: 1 to 8"),
        ({"instance_type": "m5.large"}, "compute: 'm5.large'; allowed: g5.12xlarge"),
        ({"run_id": "r" * 58}, "RUN: 'rrrr"),
        ({"startup_timeout_s": 1}, "--startup-timeout: 1; allowed: at least 10 s"),
    ],
)
def test_bad_specs_are_one_line_naming_the_key(change, key):
    with pytest.raises(ManifestError) as err:
        to_manifests(dataclasses.replace(SPEC, **change))
    assert key in str(err.value)
    assert "\n" not in str(err.value)


# -- the CLI --------------------------------------------------------------------------------


@pytest.fixture
def runs(s3_direct, s3_bucket) -> str:
    """A storage root on moto with one run holding a full export, one a LoRA adapter export,
    one an adapter on an S3 base and one no export."""
    s3 = s3_direct.client()
    for run, key, body in (
        ("full", "export/config.json", "{}"),
        ("lora", "export/adapter_config.json", json.dumps({"base_model_name_or_path": "org/m"})),
        (
            "s3base",
            "export/adapter_config.json",
            json.dumps({"base_model_name_or_path": "s3://b/m"}),
        ),
        ("bare", "metrics.jsonl", "{}"),
    ):
        s3.put_object(Bucket=s3_bucket, Key=f"runs/{run}/{key}", Body=body.encode())
    return f"s3://{s3_bucket}/runs"


def serve(root: str, run: str, *rest: str, compute: tuple[str, ...] | None = None) -> list[str]:
    return [
        "serve-model",
        run,
        f"storage.root={root}",
        "job.image=registry.example.com/trainer:v1",
        *(compute if compute is not None else ("compute=p5.48xlarge", "compute.gpus_per_node=1")),
        *rest,
    ]


def rendered(tmp_path: Path, run: str) -> list[dict]:
    text = (tmp_path / f"{run}-serve" / "manifests.yaml").read_text()
    return list(yaml.safe_load_all(text))


def test_render_writes_the_manifests(runs, tmp_path, capsys):
    out = f"backend.output_root={tmp_path}"
    assert main(serve(runs, "full", "backend=render", out)) == 0, capsys.readouterr().err
    assert "full-serve: wrote" in capsys.readouterr().out
    manifests = by_kind(rendered(tmp_path, "full"))
    assert pod(list(manifests.values()))["initContainers"][0]["command"][3] == f"{runs}/full/export"
    assert main(serve(runs, "lora", "backend=render", out)) == 0
    command = pod(rendered(tmp_path, "lora"))["containers"][0]["command"]
    assert command[2] == "org/m" and "--enable-lora" in command


@pytest.mark.parametrize(
    ("run", "extra", "message"),
    [
        ("nosuch", {}, "RUN: no run 'nosuch'"),
        ("bare", {}, "has no export (export/config.json or export/adapter_config.json)"),
        ("s3base", {}, "the export is a LoRA adapter on 's3://b/m'; allowed: a Hugging Face"),
        (
            "full",
            {"compute": ("compute=p5.48xlarge", "compute.gpus_per_node=16")},
            "compute.gpus_per_node: 16; allowed: 1 to 8",
        ),
        ("full", {"compute": ()}, "compute: 'local_cpu'; allowed: a GPU instance type"),
        ("full", {"flags": ("--step", "3")}, "--step: 3;"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    runs, tmp_path, capsys, monkeypatch, run, extra, message
):
    applied = []
    monkeypatch.setattr(serve_cluster.serving_client, "apply", lambda *a: applied.append(a))
    out = f"backend.output_root={tmp_path}"
    for backend in ("render", "kubernetes"):
        args = serve(runs, run, f"backend={backend}", out, compute=extra.get("compute"))
        code = main([*args, *extra.get("flags", ())])
        err = capsys.readouterr().err
        assert code == 2, err
        assert message in err
        assert len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())
    assert not applied


def test_a_node_group_the_stack_lacks_is_refused(runs, tmp_path, capsys):
    groups = "cluster.node_groups=[{name:g5,instance_type:g5.12xlarge}]"
    code = main(serve(runs, "full", "backend=render", f"backend.output_root={tmp_path}", groups))
    err = capsys.readouterr().err
    assert code == 2
    assert "compute: 'p5.48xlarge' has no node group in this stack; allowed: g5.12xlarge" in err


def test_kubernetes_applies_in_order_and_prints_the_service_url(runs, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(serve_cluster, "connect", lambda *a: FakeCluster())
    monkeypatch.setattr(serve_cluster.serving_client, "dynamic_resources", lambda c: None)
    monkeypatch.setattr(
        serve_cluster.serving_client,
        "apply",
        lambda cluster, manifests, resources: seen.append(manifests) or ["Deployment/full-serve"],
    )
    assert main(serve(runs, "full", "backend=kubernetes")) == 0, capsys.readouterr().err
    assert "http://full-serve.training.svc.cluster.local:8000/v1" in capsys.readouterr().out
    (manifests,) = seen
    assert [m["kind"] for m in manifests][-1] == "Deployment"


def test_down_needs_a_cluster_backend(runs, capsys):
    assert main(serve(runs, "full", "--down")) == 2
    assert "--down: allowed with backend=kubernetes only" in capsys.readouterr().err
    assert main(serve(runs, "full", "--down", "backend=render")) == 2
    assert "--down: backend=render; allowed: backend=kubernetes" in capsys.readouterr().err


# -- apply and take-down against a fake API -------------------------------------------------


class FakeCluster:
    """What `Cluster.call` does, without retries."""

    namespace = "training"

    def call(self, action, fn, *args, **kwargs):
        kwargs.pop("expect", None)
        return fn(*args, **kwargs)

    def call_or_none(self, action, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KeyError:
            return None


class FakeResource:
    def __init__(self, store: dict, kind: str):
        self.store, self.kind = store, kind

    def get(self, name=None, namespace=None, label_selector=""):
        if name is not None:
            return self.store[(self.kind, name)]
        wanted = dict(p.split("=", 1) for p in label_selector.split(",") if p)
        items = [
            obj
            for (kind, _), obj in sorted(self.store.items())
            if kind == self.kind and wanted.items() <= obj["metadata"].get("labels", {}).items()
        ]
        return {"items": items}

    def server_side_apply(self, body, name, namespace, field_manager, force_conflicts):
        self.store[(self.kind, name)] = body

    def delete(self, name, namespace, body):
        return self.store.pop((self.kind, name))


def fake_resources(store: dict):
    return lambda api_version, kind: FakeResource(store, kind)


def test_take_down_deletes_exactly_the_served_runs_objects():
    store: dict = {}
    cluster = FakeCluster()
    client.apply(cluster, to_manifests(SPEC), fake_resources(store))
    other = dataclasses.replace(
        SPEC, run_id="other-run", export_uri="s3://bkt/runs/other-run/export"
    )
    client.apply(cluster, to_manifests(other), fake_resources(store))
    foreign = {"metadata": {"name": "mine", "labels": {"app": "x"}}}
    store[("Deployment", "mine")] = foreign
    deleted = client.take_down(cluster, KINDS, selector(SPEC.run_id), fake_resources(store))
    assert sorted(deleted) == sorted(
        f"{m['kind']}/{m['metadata']['name']}" for m in to_manifests(SPEC)
    )
    left = sorted(name for _, name in store)
    assert left == ["mine", "other-run", "other-run-serve", "other-run-serve", "other-run-serve"]
    assert client.take_down(cluster, KINDS, selector(SPEC.run_id), fake_resources(store)) == []


def test_apply_refuses_an_object_trainstack_did_not_make():
    store: dict = {("ServiceAccount", SPEC.run_id): {"metadata": {"name": SPEC.run_id}}}
    with pytest.raises(NotOurs):
        client.apply(FakeCluster(), to_manifests(SPEC), fake_resources(store))
    assert list(store) == [("ServiceAccount", SPEC.run_id)]


class FakeEks:
    def __init__(self):
        self.associations: dict[str, dict] = {}

    def list_pod_identity_associations(self, clusterName, namespace, serviceAccount):
        found = [
            {"associationId": k}
            for k, a in self.associations.items()
            if (a["namespace"], a["serviceAccount"]) == (namespace, serviceAccount)
        ]
        return {"associations": found}

    def describe_pod_identity_association(self, clusterName, associationId):
        return {"association": self.associations[associationId]}

    def create_pod_identity_association(self, **kwargs):
        key = f"a-{len(self.associations)}"
        self.associations[key] = kwargs
        return {"association": {"associationId": key}}

    def delete_pod_identity_association(self, clusterName, associationId):
        del self.associations[associationId]


def test_pod_identity_binding_is_made_once_and_removed_on_take_down():
    eks = FakeEks()
    role = "arn:aws:iam::1:role/serving"
    first = client.associate("c", "training", "run-a", role, None, eks=eks)
    assert client.associate("c", "training", "run-a", role, None, eks=eks) == first
    assert len(eks.associations) == 1
    with pytest.raises(client.ClusterError, match="not the serving role"):
        client.associate("c", "training", "run-a", "arn:aws:iam::1:role/other", None, eks=eks)
    client.associate("c", "training", "run-b", role, None, eks=eks)
    assert client.dissociate("c", "training", "run-a", None, eks=eks) == 1
    assert [a["serviceAccount"] for a in eks.associations.values()] == ["run-b"]


def test_the_init_container_program_copies_the_export_alone(s3_direct, s3_bucket, tmp_path):
    s3 = s3_direct.client()
    for key in ("runs/r/export/config.json", "runs/r/export/model.safetensors", "runs/r/ckpt/x"):
        s3.put_object(Bucket=s3_bucket, Key=key, Body=b"x")
    dest = tmp_path / "models" / "r"
    assert fetch.main([f"s3://{s3_bucket}/runs/r/export", str(dest)]) == 0
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "model.safetensors"]
    assert fetch.main([f"s3://{s3_bucket}/runs/none/export", str(tmp_path / "n")]) == 2
