"""Every bad input of issue 3 section 3 through `trainstack launch`: one line naming the key
and what is allowed, exit 2, and nothing written in the working directory."""

from __future__ import annotations

import pytest

from jobs.errors import JobConfigError
from tests.jobs.conftest import CLUSTER, SAMPLE_DATA, build, files_under

P5 = ["compute=p5.48xlarge", *CLUSTER]

BAD_INPUTS = {
    "gpus above the instance's": (
        [*P5, "compute.gpus_per_node=16"],
        "compute.gpus_per_node",
        "1..8",
    ),
    "no nodes": ([*P5, "compute.nodes=0"], "compute.nodes", ">= 1"),
    "batch not divisible by dp": (
        [*P5, "compute.nodes=2", "trainer.global_batch_size=100", "trainer.micro_batch_size=2"],
        "trainer.global_batch_size",
        "multiple of 32",
    ),
    "batch not divisible locally": (
        ["trainer.global_batch_size=7"],
        "trainer.global_batch_size",
        "multiple of 16",
    ),
    "unknown instance type option": (["compute=p9.48xlarge"], "compute", "p5.48xlarge"),
    "unknown instance type key": (
        [*P5, "compute.instance_type=p9.48xlarge"],
        "compute.instance_type",
        "g5.12xlarge",
    ),
    "elastic min above max": (
        [*P5, "compute.nodes=2", "job.elastic.min_nodes=3", "job.elastic.max_nodes=2"],
        "job.elastic.min_nodes",
        "min <= max",
    ),
    "elastic half set": ([*P5, "job.elastic.min_nodes=1"], "job.elastic", "both"),
    "image tag latest": ([*P5, "job.image=repo/trainer:latest"], "job.image", "immutable"),
    "image without tag": ([*P5, "job.image=repo/trainer"], "job.image", "immutable"),
    "no image on a GPU backend": (
        ["compute=g5.12xlarge", "backend=render", "storage.root=s3://bucket/runs"],
        "job.image",
        "job.image=REPOSITORY:TAG",
    ),
    "local storage for multi-node": (
        [*P5, "compute.nodes=2", "storage.root=runs"],
        "storage.root",
        "s3://bucket/prefix",
    ),
    "local_cpu on a cluster backend": (["backend=render"], "compute", "g5.12xlarge"),
    "GPU compute on the local backend": (
        ["compute=p5.48xlarge", "job.image=r/t:v1"],
        "backend",
        "backend=render",
    ),
    "local_cpu with several nodes": (["compute.nodes=2"], "compute.nodes", "allowed: 1"),
    "seq_len above the model's": (["data.seq_len=4096"], "data.seq_len", "1..2048"),
    "unknown choice": (["trainer.mixed_precision=fp8"], "trainer.mixed_precision", "bf16"),
    "unknown model option": (["model=gpt5"], "model", "llama3_8b"),
    "bad run id": (["run_id=My_Run"], "run_id", "DNS-1035"),
    "run id too long": (["run_id=" + "a" * 60], "run_id", "at most"),
    # JobSet's pod-name rule (jobs/naming.py): 48 up to 10 nodes, 47 up to 100.
    "TrainJob run id too long for 2 nodes": (
        [*P5, "compute.nodes=2", "run_id=" + "a" * 49],
        "run_id",
        "at most 48 characters (for a TrainJob of 2 node(s)",
    ),
    "TrainJob run id too long for 11 nodes": (
        [*P5, "compute.nodes=11", "run_id=" + "a" * 48],
        "run_id",
        "at most 47 characters (for a TrainJob of 11 node(s)",
    ),
    "queued TrainJob grace above the runtime's": (
        [*P5, "job.queue=training", "job.termination_grace_period_seconds=900"],
        "job.termination_grace_period_seconds",
        "up to 600",
    ),
    "TrainJob sweep id too long": (
        ["-m", *P5, "sweep_id=" + "s" * 44, "seed=1,2"],
        "sweep_id",
        "at most 43 characters",
    ),
    "unknown key": (["trainer.maxsteps=3"], "trainer.maxsteps", "unknown key"),
    "wrong type": (["trainer.max_steps=many"], "trainer.max_steps", "Integer"),
    "bad clean pod policy": (
        [*P5, "job.clean_pod_policy=Sometimes"],
        "job.clean_pod_policy",
        "Running",
    ),
    "secret half set": ([*P5, "job.secrets.hf_token.name=hf"], "job.secrets.hf_token", "key"),
    "unknown backend": (["backend.name=slurm"], "backend.name", "kubernetes"),
    "s3 storage without a root": (
        ["storage=s3", "compute=g5.12xlarge", "backend=render", "job.image=r/t:v1"],
        "storage.root",
        "Missing mandatory value",
    ),
    "cluster experiment without data": (
        ["experiment=llama3_8b_p5x4", *CLUSTER],
        "data.path, data.tokenizer",  # every missing key in the one line
        "s3://bucket/train.jsonl",
    ),
    "cluster experiment without a tokenizer": (
        ["experiment=llama3_8b_p5x4", *CLUSTER, "data.path=s3://bucket/train.jsonl"],
        "data.tokenizer",
        "tokenizer directory",
    ),
    # `${required:}` (jobs.schema.REQUIRED): keys an option or experiment file makes
    # mandatory over a value set before it, which `???` cannot.
    "SFT experiment without weights": (
        ["experiment=llama3_8b_sft_p5x2", *CLUSTER, "data.path=s3://bucket/chat.jsonl"],
        "model.init_from",
        "Missing mandatory value",
    ),
    "SFT experiment without data": (
        ["experiment=llama3_8b_sft_p5x2", *CLUSTER, "model.init_from=s3://bucket/models/x"],
        "data.path",
        "Missing mandatory value",
    ),
    "model=hf without weights": (["model=hf", *P5], "model.init_from", "Hugging Face checkpoint"),
    "data=mixture without sources": (["data=mixture"], "data.mixture", "weight: 3"),
    "HSDP replicas not dividing the world": (
        [*P5, "trainer.parallel.dp_replicate=3"],
        "trainer.parallel.dp_replicate",
        "a divisor of 8",
    ),
    "HSDP mesh not the world size": (
        [*P5, "compute.nodes=2", "trainer.parallel.dp_replicate=2", "trainer.parallel.dp_shard=4"],
        "trainer.parallel.dp_replicate x trainer.parallel.dp_shard",
        "2 x 4 = 8 must equal the world size 16",
    ),
    "profile steps reversed": (
        ["trainer.profile.steps=[3,2]"],
        "trainer.profile.steps",
        "1 <= first <= last <= trainer.max_steps (150)",
    ),
    "missing data file": (["data.path=nowhere.jsonl"], "data.path", "s3://bucket/key"),
    "missing tokenizer": (
        [f"data.path={SAMPLE_DATA}", "data.tokenizer=no/such/dir"],
        "data.tokenizer",
        "byte",
    ),
    "mixture and data.path both": (
        ["data.mixture=[{path: s3://b/web, weight: 1}]"],
        "data.mixture",
        "one of them",
    ),
    "empty mixture": (["data.path=null", "data.mixture=[]"], "data.mixture", "weight"),
    "mixture weight not positive": (
        [
            "data.path=null",
            "data.mixture=[{path: s3://b/web, weight: 2}, {path: s3://b/c, weight: 0}]",
        ],
        "data.mixture[1].weight",
        "a finite number > 0",
    ),
    "mixture source missing": (
        ["data.path=null", "data.mixture=[{path: nowhere, weight: 1}]"],
        "data.mixture[0].path",
        "prepared dataset",
    ),
    # What one job API cannot express is refused for it, never dropped.
    "elastic on a TrainJob": (
        [*P5, "compute.nodes=2", "job.elastic.min_nodes=1", "job.elastic.max_nodes=4"],
        "job.elastic",
        "job.api=pytorchjob",
    ),
    "clean pod policy on a TrainJob": (
        [*P5, "job.clean_pod_policy=All"],
        "job.clean_pod_policy",
        "allowed: Running, or job.api=pytorchjob",
    ),
    "TTL on a TrainJob": (
        [*P5, "job.ttl_seconds_after_finished=60"],
        "job.ttl_seconds_after_finished",
        "allowed: 604800",
    ),
    "unknown job API": ([*P5, "job.api=mpijob"], "job.api", "trainjob, pytorchjob"),
    "runtime on a PyTorchJob": (
        [*P5, "job.api=pytorchjob", "job.runtime=trainstack-p5"],
        "job.runtime",
        "job.api=trainjob",
    ),
    "runtime not a DNS name": ([*P5, "job.runtime=My_Runtime"], "job.runtime", "DNS-1123"),
    "a grace period that never frees the GPUs": (
        [*P5, "job.termination_grace_period_seconds=999999999"],
        "job.termination_grace_period_seconds",
        "must be <= 3600",
    ),
    "restarts without end": ([*P5, "job.max_restarts=1000000"], "job.max_restarts", "<= 100"),
    "unsupported kubernetes version": (
        [*P5, "cluster.kubernetes_version=2.5"],
        "cluster.kubernetes_version",
        "allowed",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_nothing_written(cli, workdir, case):
    overrides, key, allowed = BAD_INPUTS[case]
    result = cli("launch", *overrides)
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert f"{key}:" in lines[0] and allowed in lines[0], lines[0]
    assert result.out == ""
    assert files_under(workdir) == []


def test_bad_point_in_a_sweep_writes_nothing(cli, workdir):
    result = cli("launch", "-m", *P5, "compute.gpus_per_node=4,16")
    assert result.code == 2
    assert "sweep point 1" in result.err and "compute.gpus_per_node" in result.err
    assert files_under(workdir) == []


def test_dryrun_writes_nothing(cli, workdir):
    result = cli("launch", "--dryrun", *P5, "run_id=dry")
    assert result.code == 0
    assert "kind: TrainJob" in result.out and "name: dry" in result.out
    assert files_under(workdir) == []


@pytest.mark.parametrize("nodes", [1, 2, 10, 11, 12, 100, 101, 1000])
def test_the_trainjob_run_id_limit_is_jobsets_pod_name_rule(nodes):
    """kubernetes-sigs/jobset v0.12.0, pkg/webhooks/jobset_webhook.go: the longest pod name,
    `<jobset>-<replicated job>-<max job index>-<max pod index>` + "-abcde", is a DNS-1035
    label (at most 63). A TrainJob's JobSet has one replicated job `node` of one Job
    (pkg/runtime/framework/plugins/jobset in kubeflow/trainer v2.3.0) and `nodes` pods."""
    from jobs.backends.kubernetes.client.kinds import TRAINJOB
    from jobs.naming import max_run_id_len, run_id_problem

    limit = max_run_id_len(TRAINJOB.pod_names, nodes)
    longest_pod = f"{'a' * limit}-node-0-{nodes - 1}-abcde"
    assert len(longest_pod) == 63
    assert run_id_problem("a" * limit, TRAINJOB.pod_names, nodes) is None
    assert "at most" in run_id_problem("a" * (limit + 1), TRAINJOB.pod_names, nodes)
    assert limit == (48 if nodes <= 10 else 47 if nodes <= 100 else 46)


def test_a_trainjob_run_id_at_the_limit_renders(cli, workdir):
    result = cli("launch", *P5, "compute.nodes=2", "run_id=" + "a" * 48)
    assert result.code == 0, result.err


def test_an_elastic_range_is_checked_with_a_bounded_number_of_plans(monkeypatch):
    """Issue 37, finding 4: one trainer plan per elastic world size made max_nodes=10^6 cost
    minutes. Every size of the range is still checked (batch and mesh divisibility), but the
    plans made do not grow with its length."""
    import contract.plan

    made = []
    real = contract.plan.make_plan
    monkeypatch.setattr(
        contract.plan, "make_plan", lambda *a, **k: made.append(a[1]) or real(*a, **k)
    )
    elastic = [*P5, "job.api=pytorchjob", "compute.nodes=2", "job.elastic.min_nodes=1"]
    # micro batch 8 x 8 GPUs a node: a batch of 64 x lcm(1..4) fits every size of 1..4 nodes.
    build([*elastic, "job.elastic.max_nodes=4", f"trainer.global_batch_size={64 * 12}"])
    assert made == [8, 16]  # the smallest world size, then the job's own
    # 64 x lcm(1..10) fits 1..10 nodes, not 11: found without a plan for each size before it.
    made.clear()
    with pytest.raises(JobConfigError, match=r"data-parallel ranks \(88\)"):
        build([*elastic, "job.elastic.max_nodes=1024", f"trainer.global_batch_size={64 * 2520}"])
    assert made == [8]
