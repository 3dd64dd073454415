"""Multirun renders (one job per point, one sweep id, a summary with the total cost) and the
plan's cost estimate."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from contract.config import TrainerConfig
from jobs import sweep_workers
from jobs.sweep import BatchPreparation, expand
from jobs.sweep_points import SweepPointsLost, check_one_per_point
from tests.jobs.conftest import CLUSTER, OWN_DATA, SAMPLE_DATA, build, files_under


def test_render_sweep_one_job_per_point(cli, workdir):
    result = cli(
        "launch",
        "-m",
        "trainer.lr=1e-4,3e-4",
        "model=tiny,llama3_1b",
        "compute=p4d.24xlarge",
        "compute.step_time_s=2.0",
        *CLUSTER,
    )
    assert result.code == 0, result.err
    (summary_path,) = workdir.glob("runs/sweeps/*/summary.yaml")
    summary = yaml.safe_load(summary_path.read_text())
    sweep_id = summary["sweep_id"]
    assert summary_path.parent.name == sweep_id and summary["points"] == 4
    manifests = sorted(workdir.glob("runs/*/manifests.yaml"))
    assert len(manifests) == 4
    seen = set()
    for path in manifests:
        docs = list(yaml.safe_load_all(path.read_text()))
        job = docs[1]
        assert job["metadata"]["labels"]["trainstack.io/sweep-id"] == sweep_id
        lr = yaml.safe_load(docs[0]["data"]["config.yaml"])["trainer"]["lr"]
        seen.add((lr, job["metadata"]["annotations"]["trainstack.io/model"]))
    assert seen == {(1e-4, "tiny"), (3e-4, "tiny"), (1e-4, "llama3_1b"), (3e-4, "llama3_1b")}
    # The default max_steps (contract/config.py) x 2 s on one p4d.24xlarge, four times.
    each = TrainerConfig().max_steps * 2.0 / 3600 * 21.958
    assert summary["total_estimated_cost_usd"] == pytest.approx(4 * each, abs=0.02)
    assert {r["state"] for r in summary["runs"]} == {"rendered"}


def test_sweep_dryrun_writes_nothing(cli, workdir):
    result = cli("launch", "-m", "--dryrun", "trainer.max_steps=3,4", f"data.path={SAMPLE_DATA}")
    assert result.code == 0, result.err
    assert result.out.count("-m trainer --config") == 2
    assert files_under(workdir) == []


def test_the_points_run_the_jobs_their_launcher_prepared(cli, workdir, monkeypatch):
    """The launcher hands each batch's prepared jobs to the task object (jobs.app.LaunchTask,
    the task function Hydra gives it); the points schedule those, never materializing twice."""
    from jobs import app

    def again(*args, **kwargs):
        raise AssertionError("a point materialized a second time")

    monkeypatch.setattr(app, "materialize", again)
    result = cli("launch", "-m", "trainer.lr=1e-4,3e-4", "compute=p4d.24xlarge", *CLUSTER)
    assert result.code == 0, result.err
    assert len(list(workdir.glob("runs/*/manifests.yaml"))) == 2


def test_a_point_that_fails_to_schedule_fails_the_sweep_and_the_others_go_on(
    cli, workdir, monkeypatch
):
    """The points that failed are counted in the task object (by the sweep's launch path,
    jobs.sweep_driver): the sweep exits 1, the others ran."""
    from jobs import backend_registry
    from jobs.backends.base import BackendError

    for_backend = backend_registry.backend_for

    def failing_the_second(cfg, shared=None):
        backend = for_backend(cfg, shared)
        schedule = backend.schedule

        def scheduling(request):
            if request.job.run_id.endswith("-1"):
                raise BackendError("refused by the test")
            return schedule(request)

        backend.schedule = scheduling
        return backend

    monkeypatch.setattr(backend_registry, "backend_for", failing_the_second)
    result = cli("launch", "-m", "trainer.lr=1e-4,3e-4,1e-3", "compute=p4d.24xlarge", *CLUSTER)
    assert result.code == 1, result.err
    assert "sweep point 1: refused by the test" in result.err
    assert len(list(workdir.glob("runs/*/manifests.yaml"))) == 2


def test_trainstacks_launchers_take_the_launch_apps_task_only():
    """What a launch carries (flags, prepared jobs) passes through the task object alone."""
    from hydra_plugins.trainstack_launcher.launcher import TrainstackLauncher

    with pytest.raises(TypeError, match="LaunchTask"):
        TrainstackLauncher().setup(hydra_context=None, task_function=print, config=None)


def test_expand_uses_hydras_sweep_grammar():
    points = expand(["a=1,2", "b=x", "c=range(1,3)"])
    assert points == [
        ["a=1", "b=x", "c=1"],
        ["a=1", "b=x", "c=2"],
        ["a=2", "b=x", "c=1"],
        ["a=2", "b=x", "c=2"],
    ]


def test_plan_with_configured_step_time_and_price():
    plan = build(
        [
            *CLUSTER,
            "compute=p5.48xlarge",
            "compute.nodes=2",
            "compute.step_time_s=1.5",
            "compute.hourly_usd=40",
            "trainer.max_steps=2400",
        ]
    ).plan
    assert plan.hourly_usd == 80 and plan.hours == pytest.approx(1.0)
    assert plan.cost_usd == pytest.approx(80.0)
    assert "compute.step_time_s" in str(plan) and "compute.hourly_usd" in str(plan)


def test_plan_estimates_step_time_from_flops_and_says_so():
    plan = build(["experiment=llama3_8b_p5x4", *CLUSTER, *OWN_DATA]).plan
    assert plan.hourly_usd == pytest.approx(4 * 55.04)
    assert plan.step_time_source.startswith("estimated")
    # 8B x 6 FLOPs x 524k tokens / (32 x 989 TFLOP/s x MFU): on the order of seconds.
    assert 1 < plan.step_time_s < 10
    assert "estimated" in str(plan)


def test_sweep_through_a_hydra_launcher_writes_the_same_summary(cli, workdir):
    """`hydra/launcher=...` runs the points via hydra.main: task function + callback."""
    result = cli(
        "launch",
        "-m",
        "hydra/launcher=basic",
        "trainer.lr=1e-4,3e-4",
        "compute=g5.12xlarge",
        "compute.step_time_s=1.0",
        "trainer.max_steps=300",
        *CLUSTER,
    )
    assert result.code == 0, result.err
    (summary_path,) = workdir.glob("runs/sweeps/*/summary.yaml")
    summary = yaml.safe_load(summary_path.read_text())
    assert summary["points"] == 2 and {r["state"] for r in summary["runs"]} == {"rendered"}
    assert len(list(workdir.glob("runs/*/manifests.yaml"))) == 2
    assert summary["total_estimated_cost_usd"] == pytest.approx(2 * 300 / 3600 * 5.672, abs=0.01)


def test_plan_shows_the_data_and_a_mixtures_shares():
    mixture = "data.mixture=[{path: s3://b/web, weight: 3}, {path: s3://b/code, weight: 1}]"
    plan = build(["data.path=null", mixture]).plan
    assert "data     mixture of 2: s3://b/web 75.0%, s3://b/code 25.0%" in str(plan)
    assert "data     " in str(build([]).plan) and "train.jsonl" in str(build([]).plan)


def test_a_render_sweep_keeps_its_points_frozen_and_unfreezes_at_the_end(cli, workdir, monkeypatch):
    """The launchers hand each kept point to gc.freeze (jobs.sweep.kept_out_of_gc) and give
    everything back to the collector when the launch ends, also when a point is refused."""
    import gc

    from jobs import backend_registry

    frozen_while_writing = []
    for_backend = backend_registry.backend_for

    def spying(cfg, shared=None):
        frozen_while_writing.append(gc.get_freeze_count())
        return for_backend(cfg, shared)

    monkeypatch.setattr(backend_registry, "backend_for", spying)
    result = cli("launch", "-m", "trainer.lr=1e-4,3e-4", "compute=p4d.24xlarge", *CLUSTER)
    assert result.code == 0, result.err
    assert len(frozen_while_writing) == 2 and min(frozen_while_writing) > 0
    assert gc.get_freeze_count() == 0 and gc.isenabled()

    refused = cli("launch", "-m", "trainer.lr=1e-4,-1", "compute=p4d.24xlarge", *CLUSTER)
    assert refused.code == 2, refused.err
    assert gc.get_freeze_count() == 0


P4D = ["compute=p4d.24xlarge", *CLUSTER]
BIG_SWEEP = [
    "trainer.lr=1e-4,2e-4,3e-4,4e-4,5e-4,6e-4,7e-4,8e-4",
    "trainer.max_steps=10,20,30,40,50",
]


def rendered(root) -> dict[str, str]:
    """Each rendered run's manifests, without the creation time (one clock reading a batch)."""
    return {
        path.parent.name: re.sub(r"created-at: .*", "", path.read_text())
        for path in sorted(root.glob("runs/*/manifests.yaml"))
    }


def test_a_big_sweep_prepared_in_worker_processes_renders_what_one_process_does(cli, workdir):
    """40 points: from PARALLEL_FROM (32) the points are composed and validated in forked
    workers (jobs.sweep_workers); the result is the same, point for point."""
    from jobs.sweep_workers import PARALLEL_FROM

    assert len(expand(BIG_SWEEP)) >= PARALLEL_FROM
    alone = cli("launch", "-m", *BIG_SWEEP, *P4D, "sweep_id=alone", "hydra.launcher.workers=1")
    assert alone.code == 0, alone.err
    one = rendered(workdir)
    shutil.rmtree(workdir / "runs")
    forked = cli("launch", "-m", *BIG_SWEEP, *P4D, "sweep_id=alone", "hydra.launcher.workers=2")
    assert forked.code == 0, forked.err
    assert len(one) == 40 and rendered(workdir) == one


def test_a_bad_point_among_workers_is_the_first_in_order_and_nothing_is_written(cli, workdir):
    sweep = [
        "trainer.lr=1e-4,2e-4,3e-4,4e-4,5e-4,6e-4,7e-4,8e-4",
        "trainer.max_steps=10,20,30,-1,50",
    ]
    result = cli("launch", "-m", *sweep, *P4D, "hydra.launcher.workers=2")
    assert result.code == 2, result.err
    (line,) = result.err.strip().splitlines()
    assert re.match(r"trainstack launch: sweep point 3 \(.*trainer\.max_steps=-1", line), line
    assert files_under(workdir) == []


def test_workers_below_zero_are_refused(cli, workdir):
    result = cli("launch", "-m", "trainer.lr=1e-4,2e-4", *P4D, "hydra.launcher.workers=-1")
    assert result.code == 2
    assert "hydra.launcher.workers: -1 is not allowed; allowed: 0" in result.err
    assert files_under(workdir) == []


def test_one_prepared_point_per_point_or_an_error_naming_the_lost():
    numbered = [(i, [f"trainer.lr={i}e-4", "sweep_id=s"]) for i in range(40)]
    check_one_per_point(numbered, list(range(40)))
    # What dropping the last point of each of five worker runs of 8 would give back.
    lost = [i for i in range(40) if i % 8 != 7]
    with pytest.raises(SweepPointsLost) as caught:
        check_one_per_point(numbered, lost)
    assert str(caught.value) == (
        "sweep points 0..39: 35 prepared for 40, missing 5: 7 (trainer.lr=7e-4), "
        "15 (trainer.lr=15e-4), 23 (trainer.lr=23e-4), 31 (trainer.lr=31e-4), "
        "39 (trainer.lr=39e-4); nothing was written or run"
    )
    with pytest.raises(
        SweepPointsLost, match=r"missing 12: 0 .*, 9 \(trainer.lr=9e-4\) and 2 more"
    ):
        check_one_per_point(numbered, list(range(12, 40)))
    with pytest.raises(SweepPointsLost, match=r"missing 1: 3 .*; repeated: 2; its results are"):
        check_one_per_point(numbered[:4], [0, 1, 2, 2], ran=True)
    with pytest.raises(SweepPointsLost, match=r"4 prepared for 3, not of the batch: 7;"):
        check_one_per_point(numbered[:3], [0, 1, 2, 7])
    with pytest.raises(SweepPointsLost, match=r"3 prepared for 3, out of order;"):
        check_one_per_point(numbered[:3], [0, 2, 1])
    check_one_per_point([], [])
    with pytest.raises(SweepPointsLost, match=r"points \(none\): 1 prepared for 0, not of"):
        check_one_per_point([], [3])


def dropping_the_last_of_each_run(run):
    """`_prepare_run` losing the last point of its run (module level: the pool pickles it by
    name, and the forked workers find it here)."""
    points, failure = PREPARE_RUN(run)
    return points[:-1], failure


PREPARE_RUN = sweep_workers._prepare_run


def lost_line(result) -> str:
    assert result.code == 1, result
    (line,) = result.err.strip().splitlines()
    return line


def summary_indices(workdir, sweep_id: str) -> list[int]:
    summary = yaml.safe_load((workdir / f"runs/sweeps/{sweep_id}/summary.yaml").read_text())
    return [run["index"] for run in summary["runs"]]


def test_a_point_lost_by_the_worker_processes_fails_the_sweep(cli, workdir, monkeypatch):
    """(Every point back from the workers: the 40-point sweep above, which now fails here.)"""
    sweep = ["trainer.lr=1e-4,2e-4,3e-4", "trainer.max_steps=10,20,30,40", *P4D]
    monkeypatch.setattr(sweep_workers, "_prepare_run", dropping_the_last_of_each_run)
    line = lost_line(cli("launch", "-m", *sweep, "hydra.launcher.workers=2"))
    # 12 points in runs of 2 (a few runs per worker): every second one lost.
    assert line.startswith("trainstack launch: sweep points 0..11: 6 prepared for 12, missing 6: ")
    assert "1 (trainer.lr=0.0001 trainer.max_steps=20), 3 (" in line and "11 (" in line, line
    assert files_under(workdir) == []


def test_every_point_comes_back_in_process_or_the_sweep_fails(cli, workdir, monkeypatch):
    """One process prepares a small batch: a point that comes back as another's is caught
    before anything is written, and a result missing after the run is named."""
    sweep = ["trainer.lr=1e-4,2e-4,3e-4", *P4D]
    whole = cli("launch", "-m", *sweep, "sweep_id=whole")
    assert whole.code == 0, whole.err
    assert summary_indices(workdir, "whole") == [0, 1, 2]
    before = files_under(workdir)

    prepare = BatchPreparation.prepare

    def repeating_the_second(self, index, overrides):
        return prepare(self, 1, overrides) if index == 2 else prepare(self, index, overrides)

    with monkeypatch.context() as patched:
        patched.setattr(BatchPreparation, "prepare", repeating_the_second)
        line = lost_line(cli("launch", "-m", *sweep))
    assert line.endswith(
        "sweep points 0..2: 3 prepared for 3, missing 1: 2 (trainer.lr=0.0003); repeated: 1; "
        "nothing was written or run"
    ), line
    assert files_under(workdir) == before

    # The class Hydra instantiates: its plugin scan loads hydra_plugins apart from sys.modules.
    from hydra.core.plugins import Plugins

    launcher = Plugins.instance().class_name_to_class[
        "hydra_plugins.trainstack_launcher.launcher.TrainstackLauncher"
    ]
    monkeypatch.setattr(launcher, "finish", lambda self, points, returns: returns[:-1])
    line = lost_line(cli("launch", "-m", *sweep))
    assert line.endswith(
        "2 results for 3, missing 1: 2 (trainer.lr=0.0003); its results are incomplete"
    )
