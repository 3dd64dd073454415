"""Issue 47, scenario 4: 50 users at once on the Training API, each submitting 10 runs, listing
the runs after each submission, following one run's log, sending one submission twice and one
the service refuses (testing_support/api_load.py).

`trainstack serve` runs as its own process with the stack's deployed arguments
(infra.training_api.serve_args; local run dirs instead of the stack's bucket, as the API tests
run it) against the Kubernetes REST API test double and its operator (every run held active,
so a resubmission is `already active`). tests/e2e/test_e2e_api_load.py runs the same load,
smaller, against the real control plane, and bench_api_load_localcluster.py the full one.
Figures: submit and list p50/p99, and what the promises come to: 5xx, run ids accepted twice,
accepted runs missing on the cluster, refused runs left on it. BENCH_API_LOAD_USERS /
BENCH_API_LOAD_RUNS shrink it.
Targets: no 5xx, and nothing lost, duplicated or left behind (latency is the machine's: a
shared 2-core box; submissions queue behind Hydra's one composition at a time).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

USERS = int(os.environ.get("BENCH_API_LOAD_USERS", "50"))
RUNS = int(os.environ.get("BENCH_API_LOAD_RUNS", "10"))
NAMESPACE = "training"
IMAGE = "registry.example.com/trainer:v1"


def deployed_overrides(runs_root: Path, kubeconfig: Path) -> list[str]:
    """infra's own serve_args, parsed by the serve command's parser, then what points at this
    machine: the test double's kubeconfig, local run dirs, the benchmark's registry."""
    from infra.bucket_layout import published_grants
    from infra.training_api import serve_args
    from jobs.commands.serve import add_arguments
    from testing_support.k8s.cluster import GPU_TYPE

    argv = serve_args(
        NAMESPACE,
        "s3://stack-bucket/runs",
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack/trainer",
        tls="nlb",
        node_groups=((GPU_TYPE.replace(".", "-"), GPU_TYPE, 4),),
        grants=published_grants("stack-bucket"),
    )
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return [
        *parser.parse_args(argv[1:]).overrides,
        "storage=local",
        f"storage.root={runs_root}",
        f"cluster.kubeconfig={kubeconfig}",
        "cluster.approved_images=[registry.example.com]",
    ]


def run() -> dict:
    from jobs.api.auth import token_hash
    from testing_support.api_load import figures, run_load
    from testing_support.api_process import ApiProcess
    from testing_support.k8s.cluster import GPU_TYPE, seed_cluster
    from testing_support.k8s.fake_apiserver import FakeKubeApiServer
    from testing_support.k8s.fake_operator import FakeOperator, JobPlan

    apiserver = FakeKubeApiServer().start()
    FakeOperator(apiserver, JobPlan(hold=True))
    seed_cluster(apiserver)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        hashes = home / "token-hashes"
        hashes.mkdir()
        tokens = {f"user{i:02d}": f"bench-load-token-{i:02d}-0123456789" for i in range(USERS)}
        for user, token in tokens.items():
            (hashes / user).write_text(f"{token_hash(token)} {user}")
        kubeconfig = apiserver.write_kubeconfig(home / "kubeconfig")
        api = ApiProcess(hashes, deployed_overrides(home / "runs", kubeconfig), home)
        try:
            api.start()
            result = asyncio.run(
                run_load(
                    api.url,
                    tokens,
                    RUNS,
                    lambda user, run_id: {"run_id": run_id, "compute": GPU_TYPE, "image": IMAGE},
                )
            )
            on_cluster = [j["metadata"]["name"] for j in apiserver.list("pytorchjobs", NAMESPACE)]
        finally:
            api.stop()
            apiserver.operator.shutdown()
            apiserver.stop()
    problems = result.problems(on_cluster)
    found = {"users": USERS, "runs_per_user": RUNS, **figures(result), "problems": problems}
    found["checks"] = {
        "no 5xx": {
            "value": found["server_errors"],
            "target": 0,
            "ok": found["server_errors"] == 0,
        },
        "nothing lost, duplicated or left behind": {
            "value": len(problems),
            "target": 0,
            "ok": not problems,
        },
    }
    return found
