"""Small things a newcomer met (issue 29): each refusal says why, each record is whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.backends import run_state


def finished_local_run(root: Path, run_id: str, **state) -> Path:
    """A finished 2-rank local run as the backend leaves it (no training needed)."""
    state_dir = root / run_id
    run_state.write_state(
        state_dir,
        {"run_id": run_id, "backend": "local", "state": "succeeded", "exit_code": 0, **state},
    )
    log = "[default0]:rank zero line\n[default1]:rank one line\nlauncher line\n"
    (state_dir / run_state.OUTPUT_LOG).write_text(log)
    return state_dir


@pytest.mark.parametrize("recorded", ["state", "request"])
def test_logs_refuses_a_rank_the_run_does_not_have(cli, workdir, recorded):
    runs = workdir / "runs"
    if recorded == "state":
        finished_local_run(runs, "two", ranks=2)
    else:  # a run started before state.json recorded its ranks
        state_dir = finished_local_run(runs, "two")
        request = {"argv": [], "env": {"PET_NPROC_PER_NODE": "2"}, "cwd": "."}
        (state_dir / "job" / "request.json").write_text(json.dumps(request))
    refused = cli("logs", "two", "--rank", "5")
    assert refused.code == 2 and refused.out == ""
    assert refused.err == "trainstack logs: --rank 5: run two has ranks 0-1\n"
    shown = cli("logs", "two", "--rank", "1")
    assert shown.code == 0 and "[default1]:rank one line" in shown.out
    assert "rank zero" not in shown.out


@pytest.mark.parametrize(
    ("root", "why"),
    [
        ("s3://b/runs", "bucket 'b' is 1 character long (S3 bucket names are 3-63)"),
        ("s3://" + "b" * 64, "is 64 characters long (S3 bucket names are 3-63)"),
        ("s3://My_Bucket/runs", "has a character S3 bucket names do not allow"),
        ("s3:///runs", "bucket '' is missing"),
    ],
)
def test_a_bad_bucket_name_is_refused_saying_why(cli, workdir, root, why):
    result = cli("launch", "--dryrun", f"storage.root={root}")
    assert result.code == 2
    assert result.err.startswith(f"trainstack launch: storage.root: {root!r}: ")
    assert why in result.err and "3-63 characters" in result.err
    assert result.err.count("\n") == 1


def test_every_missing_model_key_is_named_in_one_message():
    from jobs.errors import JobConfigError
    from tests.jobs.conftest import build

    with pytest.raises(JobConfigError) as raised:
        build(["model=tiny", "model.dim=???", "model.n_kv_heads=???", "model.vocab_size=???"])
    message = str(raised.value)
    assert message.startswith(
        "model.dim, model.n_kv_heads, model.vocab_size: Missing mandatory values: this job "
        "needs them set; a model option states every architecture key"
    )
    assert "\n" not in message and raised.value.key == "model.dim"


def test_the_plan_names_a_resized_preset_as_modified():
    from tests.jobs.conftest import build

    assert build(["model.dim=384", "model.n_layers=2"]).plan.model == (
        "tiny (modified: dim, n_layers)"
    )
    assert "model    tiny (modified: dim)," in str(build(["model.dim=384"]).plan)
    # Every shipped preset option states its preset's numbers: named plainly.
    for option in ("tiny", "llama3_1b"):
        assert build([f"model={option}"]).plan.model == option
    # The run id and the manifests keep the plain name.
    assert build(["model.dim=384"], run_id=None).run_id.startswith("tiny-")


def test_the_default_job_on_two_p5_nodes_warns_about_the_sample_corpus_and_byte_tokenizer():
    from tests.jobs.conftest import CLUSTER, OWN_DATA, build

    p5x2 = ["compute=p5.48xlarge", "compute.nodes=2", *CLUSTER]
    (warning,) = [w for w in build(p5x2).plan.warnings if "bundled sample" in w]
    assert warning.startswith(
        "data.path=data/sample/train.jsonl is the bundled sample corpus (a few MB) and the "
        "tokenizer is the byte tokenizer (data.tokenizer=byte or null): on 2 x p5.48xlarge"
    )
    assert f"warning  {warning}" in str(build(p5x2).plan)
    own = build([*p5x2, *OWN_DATA]).plan.warnings
    assert not [w for w in own if "demo" in w]
    assert not [w for w in build([]).plan.warnings if "demo" in w]  # the CPU demo itself


def test_own_jsonl_without_a_tokenizer_names_the_choices(cli, workdir):
    (workdir / "my.jsonl").write_text('{"text": "hello"}\n')
    result = cli("launch", "data=jsonl", "data.path=my.jsonl")
    assert result.code == 2 and result.err.count("\n") == 1
    assert result.err.startswith("trainstack launch: data.tokenizer: Missing mandatory value")
    for choice in ("data.tokenizer=byte", "tokenizer directory", "model.init_from"):
        assert choice in result.err, choice
    assert sorted(p.name for p in workdir.iterdir()) == ["my.jsonl"]  # nothing written
    ran = cli("launch", "--dryrun", "data=jsonl", "data.path=my.jsonl", "data.tokenizer=byte")
    assert ran.code == 0, ran.err
