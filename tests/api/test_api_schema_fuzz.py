"""Every route of docs/openapi.json fuzzed from its schema (schemathesis, on hypothesis) against
the service as the stack deploys it (infra's arguments; the Kubernetes double, the stack's
bucket in moto): no answer is a 5xx, every 4xx is one `detail` line, and every request is
answered within the client's timeout (a hang fails the test). Issue 43.

The budget is small on purpose (EXAMPLES per operation, no deadline: a 2-core CI runs the
whole file in a couple of minutes); hypothesis keeps no database here, so each run draws new
examples."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from testing_support.k8s.cluster import seed_cluster, seed_trainer
from testing_support.k8s.fake_apiserver import FakeKubeApiServer
from testing_support.k8s.fake_operator import FakeOperator, JobPlan
from testing_support.k8s.fake_trainer import FakeTrainer
from testing_support.s3_server import s3_env
from tests.api.conftest import TOKEN, start_api

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
SCHEMA = schemathesis.openapi.from_path(str(OPENAPI))
EXAMPLES = 25
"""Examples per operation (9 operations): about a minute of requests on one core."""
REQUEST_TIMEOUT_S = 30
"""Each request's bound: a hang (a follow that never ends, a lock never released) is an
error here, not a slow test."""


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, moto_s3):
    """One service for the whole file (every operation's examples share it), with infra's
    arguments, on the stack's bucket (moto) and a fake cluster of its own."""
    from jobs.api.auth import token_hash
    from jobs.backends.kubernetes.backend import KubernetesBackend
    from jobs.backends.kubernetes.client import api as client_api

    home = tmp_path_factory.mktemp("fuzz")
    apiserver = FakeKubeApiServer().start()
    FakeOperator(apiserver, JobPlan())
    FakeTrainer(apiserver)
    seed_cluster(apiserver)
    seed_trainer(apiserver)
    bucket = f"fuzz-{uuid.uuid4().hex[:12]}"
    moto_s3.client().create_bucket(Bucket=bucket)
    (home / "tokens").mkdir()
    (home / "tokens" / "current").write_text(f"{token_hash(TOKEN)} fuzzer")
    retry = client_api.RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.05)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in s3_env(moto_s3.url).items():
            patch.setenv(name, value)
        patch.setattr(client_api, "DEFAULT_RETRY", retry)
        patch.setattr(KubernetesBackend, "restart_backoff_s", 0.01)
        patch.chdir(home)
        kubeconfig = apiserver.write_kubeconfig(home / "kubeconfig")
        server, api = start_api(kubeconfig, home / "tokens", f"s3://{bucket}/runs")
        try:
            yield api
        finally:
            api.client.close()
            server.stop()
            apiserver.operator.shutdown()
            apiserver.trainer.shutdown()
            apiserver.stop()


@SCHEMA.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_route_answers_5xx_or_more_than_one_line(case, deployed):
    response = case.call(
        base_url=deployed.url,
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=REQUEST_TIMEOUT_S,
    )
    assert response.status_code < 500, (case.as_curl_command(), response.text[:500])
    if 400 <= response.status_code < 500:
        detail = response.json()["detail"]
        assert isinstance(detail, str) and detail and "\n" not in detail, response.text[:500]
