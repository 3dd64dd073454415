"""Issue 45 item 3: `eval.every_checkpoint` on `trainstack launch`, before anything runs: each
bad value is one line naming the key and what is allowed, exit 2, nothing written; the plan
and the local dry run say what will be scored and how; a relaunch may turn it on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from jobs.backends.local.backend import LocalBackend
from jobs.compose import compose
from jobs.errors import JobConfigError
from jobs.relaunch import relaunch_config
from tests.jobs.conftest import CLUSTER, SAMPLE_DATA, build, files_under

REPO = Path(__file__).resolve().parents[2]
TASKS_DIR = str(REPO / "data" / "eval")
ON = ["eval.every_checkpoint=true", "eval.tasks=[ts_mc,ts_gen]"]
LOCAL_TASKS = [*ON, f"eval.include_path={TASKS_DIR}", "eval.include_defaults=false"]
KUBE_WAIT = [*CLUSTER[1:], "backend=kubernetes", "backend.wait=true", "compute=g5.12xlarge"]

BAD = {
    "no tasks": (["eval.every_checkpoint=true"], "eval.tasks", "name at least one task"),
    "a key without every_checkpoint": (
        ["eval.tasks=[ts_mc]"],
        "eval.tasks",
        "is read only with eval.every_checkpoint=true; allowed: eval.every_checkpoint=true",
    ),
    "a limit without every_checkpoint": (
        ["eval.limit=4"],
        "eval.limit",
        "is read only with eval.every_checkpoint=true",
    ),
    "render": (
        [*ON, *CLUSTER, "compute=g5.12xlarge"],
        "eval.every_checkpoint",
        "backend=render runs nothing, so no checkpoint lands to be scored; allowed: "
        "backend=kubernetes --wait",
    ),
    "kubernetes without --wait": (
        [*ON, *CLUSTER[1:], "backend=kubernetes", "compute=g5.12xlarge"],
        "eval.every_checkpoint",
        "on backend=kubernetes the eval jobs are submitted by the launch that follows the run; "
        "allowed: `trainstack launch --wait ...`",
    ),
    "kubernetes without a GPU": (
        [*ON, *CLUSTER[1:], "backend=kubernetes", "backend.wait=true"],
        "eval.every_checkpoint",
        "compute=local_cpu has no GPU for the eval jobs",
    ),
    "kubernetes with a local task dir": (
        [*ON, *KUBE_WAIT, f"eval.include_path={TASKS_DIR}"],
        "eval.include_path",
        "is this machine's directory, which the eval pods cannot read",
    ),
    "max_concurrent zero": (
        [*ON, *KUBE_WAIT, "eval.max_concurrent=0"],
        "eval.max_concurrent",
        "0 is out of range; allowed: 1..16",
    ),
    "max_concurrent 17": (
        [*ON, *KUBE_WAIT, "eval.max_concurrent=17"],
        "eval.max_concurrent",
        "17 is out of range; allowed: 1..16",
    ),
    "max_concurrent not a number": (
        [*ON, *KUBE_WAIT, "eval.max_concurrent=many"],
        "eval.max_concurrent",
        "many",
    ),
    "max_concurrent here": (
        [*ON, "eval.max_concurrent=2"],
        "eval.max_concurrent",
        "2: backend=local scores its checkpoints one after the other",
    ),
    "max_concurrent without every_checkpoint": (
        ["eval.max_concurrent=2"],
        "eval.max_concurrent",
        "is read only with eval.every_checkpoint=true",
    ),
    "another runner": (
        [*ON, "runner=command", "runner.command=[python,-c,pass]"],
        "eval.every_checkpoint",
        "runner=command writes checkpoints `trainstack eval` does not read; allowed: "
        "runner=trainstack",
    ),
    "limit zero": ([*ON, "eval.limit=0"], "eval.limit", "allowed: a count >= 1"),
    "limit 1.5": ([*ON, "eval.limit=1.5"], "eval.limit", "1.5 is not allowed"),
    "batch size": ([*ON, "eval.batch_size=0"], "eval.batch_size", "allowed: >= 1"),
    "fewshot": ([*ON, "eval.num_fewshot=-1"], "eval.num_fewshot", "allowed: >= 0"),
    "no task dir": (
        [*ON, "eval.include_path=/no/such/dir"],
        "eval.include_path",
        "'/no/such/dir' is not a directory",
    ),
    "no task left": (
        [*ON, "eval.include_defaults=false"],
        "eval.include_defaults",
        "false needs eval.include_path",
    ),
    "an unknown task": (
        [*LOCAL_TASKS, "eval.tasks=[ts_mc,nope]"],
        "eval.tasks",
        "no task named 'nope'; allowed: lm-eval's task names (`lm_eval ls tasks`) or a task in "
        "eval.include_path; tasks in eval.include_path: ts_gen, ts_mc",
    ),
    "not a bool": (["eval.every_checkpoint=maybe"], "eval.every_checkpoint", "maybe"),
    "an unknown key": ([*ON, "eval.max_parallel=2"], "eval.max_parallel", "unknown key"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_eval_input_is_one_line_exit_2_nothing_written(cli, workdir, case):
    overrides, key, allowed = BAD[case]
    result = cli("launch", f"data.path={SAMPLE_DATA}", *overrides)
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith(f"trainstack launch: {key}:"), lines[0]
    assert allowed in lines[0], lines[0]
    assert result.out == "" and files_under(workdir) == []


def test_without_lm_eval_installed_the_launch_says_which_extra(monkeypatch):
    import importlib.util

    from jobs import validate_eval

    real = importlib.util.find_spec
    monkeypatch.setattr(
        validate_eval.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "lm_eval" else real(name, *a),
    )
    with pytest.raises(JobConfigError) as refused:
        build([f"data.path={SAMPLE_DATA}", *ON])
    assert str(refused.value).startswith("eval.every_checkpoint: needs lm-evaluation-harness")
    assert "'.[eval]'" in str(refused.value)


def test_off_by_default_and_nothing_in_the_local_request():
    job = build([f"data.path={SAMPLE_DATA}"])
    dry = LocalBackend("runs").dryrun(job)
    assert dry.request.eval_argv is None and "every_checkpoint" not in dry.text
    assert "eval " not in str(job.plan)


def test_the_plan_and_the_dry_run_say_what_is_scored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = build([f"data.path={SAMPLE_DATA}", *LOCAL_TASKS, "eval.limit=4"], run_id="ev")
    assert "eval     each committed checkpoint, once trained: ts_mc, ts_gen, eval.limit=4" in (
        str(job.plan)
    )
    assert job.plan.warnings == ()  # 100 steps, every 50: two checkpoints, three kept
    dry = LocalBackend("runs").dryrun(job)
    argv = dry.request.eval_argv
    assert argv[1:4] == ["-m", "jobs.backends.local.evals", "--run-dir=runs/ev"]
    assert argv[4] == "--report=runs/ev/job/evals.json"
    settings = json.loads(argv[5].removeprefix("--settings="))
    assert settings == {
        "tasks": ["ts_mc", "ts_gen"],
        "include_path": TASKS_DIR,
        "include_defaults": False,
        "limit": 4.0,
        "num_fewshot": None,
        "batch_size": 1,
        "max_gen_tokens": None,
    }
    assert "# then, if it succeeded (eval.every_checkpoint):" in dry.text
    assert "jobs.backends.local.evals" in dry.text.splitlines()[-1]


def test_a_relative_task_dir_is_made_absolute_for_the_supervisor(tmp_path, monkeypatch):
    (tmp_path / "tasks").mkdir()
    for name in ("ts_mc.yaml", "ts_gen.yaml", "mc.jsonl", "gen.jsonl"):
        (tmp_path / "tasks" / name).write_text((Path(TASKS_DIR) / name).read_text())
    monkeypatch.chdir(tmp_path)
    job = build([f"data.path={SAMPLE_DATA}", *ON, "eval.include_path=tasks"], run_id="ev")
    settings = LocalBackend("runs").dryrun(job).request.eval_argv[5]
    assert json.loads(settings.removeprefix("--settings="))["include_path"] == str(
        tmp_path / "tasks"
    )


def test_the_plan_warns_when_checkpoints_are_deleted_before_they_are_scored():
    job = build(
        [f"data.path={SAMPLE_DATA}", *ON, "trainer.max_steps=210", "trainer.checkpoint.interval=50"]
    )
    (warning,) = [w for w in job.plan.warnings if w.startswith("eval.every_checkpoint")]
    assert "commits 5 checkpoints and keeps the newest 3" in warning
    assert "trainer.checkpoint.keep=5 scores them all" in warning
    kept = build(
        [f"data.path={SAMPLE_DATA}", *ON, "trainer.max_steps=210", "trainer.checkpoint.keep=5"]
    )
    assert not [w for w in kept.plan.warnings if w.startswith("eval.")]


@pytest.mark.parametrize("recorded_eval", [True, False], ids=["recorded", "before-the-key"])
def test_a_relaunch_may_turn_it_on(recorded_eval):
    """A run launched without it (or before the key existed) is relaunched with it: its
    checkpoints are then scored once the relaunch has trained."""
    base = [f"data.path={SAMPLE_DATA}", "run_id=r1"]
    record = OmegaConf.to_container(compose(base), resolve=False)
    if not recorded_eval:
        del record["eval"]
    overrides = [*base, *ON]
    cfg, where = relaunch_config(compose(overrides), overrides, found=("launch.yaml", record))
    assert where == "launch.yaml"
    assert cfg.eval.every_checkpoint is True and list(cfg.eval.tasks) == ["ts_mc", "ts_gen"]


def test_on_the_cluster_the_plan_says_one_eval_job_per_checkpoint():
    job = build(["data.path=data/sample/train.jsonl", *ON, *KUBE_WAIT, "eval.max_concurrent=3"])
    assert (
        "eval     each committed checkpoint as it lands, one eval Job on 1 GPU of g5.12xlarge "
        "(at most 3 at once, submitted while launch --wait follows): ts_mc, ts_gen"
    ) in str(job.plan)
