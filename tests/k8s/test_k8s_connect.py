"""Reaching the cluster: kubeconfig problems and an unreachable API are one line each."""

from __future__ import annotations

import os

import pytest

from jobs.backends.kubernetes.client.api import ClusterError, connect
from testing_support.k8s.fake_apiserver import FakeKubeApiServer


def test_missing_kubeconfig_names_the_keys_to_set(tmp_path):
    with pytest.raises(ClusterError) as caught:
        connect(str(tmp_path / "nope"), None, "training")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"cannot load kubeconfig {tmp_path / 'nope'} (set cluster.kubeconfig")


def test_unknown_context(kubeconfig):
    with pytest.raises(ClusterError) as caught:
        connect(str(kubeconfig), "prod", "training")
    assert str(caught.value).startswith(f"cannot load context 'prod' of kubeconfig {kubeconfig}")


def test_unreachable_api_server_is_retried_then_one_line(tmp_path, fast_retry):
    server = FakeKubeApiServer().start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    server.stop()  # nobody listens on its port any more
    cluster = connect(str(tmp_path / "kubeconfig"), None, "training", retry=fast_retry)
    with pytest.raises(ClusterError) as caught:
        cluster.list_jobs()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("list PyTorchJobs in training failed after 4 attempts: ")
    assert "Connection refused" in message


def test_kubeconfig_path_list_wins_over_the_pod_service_account(kubeconfig, tmp_path, monkeypatch):
    """In a pod with $KUBECONFIG listing several files, the kubeconfig is used (the client
    merges the list), not the service account."""
    from kubernetes.config import kube_config

    listed = os.pathsep.join([str(kubeconfig), str(tmp_path / "absent")])
    monkeypatch.setenv("KUBECONFIG", listed)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", listed)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert connect(None, None, "training").list_jobs() == []


def test_kubeconfig_set_after_the_client_was_imported_is_the_one_read(kubeconfig, monkeypatch):
    """The client reads $KUBECONFIG's default once, at its import; a process that sets it later
    (a notebook before `trainstack.launch`, tests/e2e/test_e2e_python_api.py) reaches the
    cluster it names, not the one named at import."""
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", "/nonexistent/kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert connect(None, None, "training").list_jobs() == []
