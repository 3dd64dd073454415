"""A relaunch of a run of your own code (runner=command with runner.workdir, runner=hf): the
identical launch line and `run_id=X` alone both resume with the recorded code and
runner.args; a changed workdir is refused in one line naming the files; the workdir's pack
leaves out where runs are kept, so unchanged files give the same hash launch after launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import jobs.workdir
from jobs.compose import compose
from jobs.errors import JobConfigError
from jobs.relaunch import relaunch_config
from jobs.workdir import list_files

SCRIPT = (
    'import argparse\np = argparse.ArgumentParser()\np.add_argument("--lr")\np.parse_args()\n'
    'print("trained", flush=True)\n'
)


def own_code_line(project: Path, *extra: str) -> list[str]:
    return [
        "runner=command",
        "runner.command=[python,train.py]",
        "runner.torchrun=false",
        f"runner.workdir={project}",
        "+runner.args.lr=0.1",
        "run_id=mine",
        *extra,
    ]


def project_in(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(SCRIPT)
    (root / "helper.py").write_text("X = 1\n")
    return root


def test_the_identical_line_and_run_id_alone_relaunch_the_recorded_code(cli, workdir):
    project = project_in(workdir / "project")
    line = own_code_line(project)
    first = cli("launch", *line)
    assert first.code == 0, first.err + first.out[-2000:]
    launched = OmegaConf.load(workdir / "runs/mine/job/launch.yaml").runner.code
    for again in (line, ["run_id=mine"], ["run_id=mine", "trainer.max_steps=9"]):
        result = cli("launch", *again)
        assert result.code == 0, (again, result.err, result.out[-2000:])
        assert "its recorded config" in result.out
        assert result.out.count("trained") == 1  # this attempt's output, not the ones before
        record = OmegaConf.load(workdir / "runs/mine/job/launch.yaml")
        assert (record.runner.code, record.runner.args.lr) == (launched, 0.1)
    assert [p.name for p in (workdir / "runs/mine/code").iterdir()] == [f"{launched}.tar.gz"]
    state = json.loads((workdir / "runs/mine/job/state.json").read_text())
    assert (state["attempt"], state["state"]) == (4, "succeeded")

    # A changed workdir: one line naming the files, nothing rewritten.
    before = (workdir / "runs/mine/job/launch.yaml").read_bytes()
    (project / "helper.py").write_text("X = 2\n")
    (project / "extra.py").write_text("")
    for again in (line, ["run_id=mine"]):
        jobs.workdir._packed.clear()  # packed once per process: each launch is a new one
        refused = cli("launch", *again)
        assert refused.code == 2, refused.out[-2000:]
        assert refused.err.count("\n") == 1, refused.err
        assert "runner.workdir:" in refused.err and "changed since run mine" in refused.err
        assert "extra.py (new), helper.py (changed)" in refused.err
    assert (workdir / "runs/mine/job/launch.yaml").read_bytes() == before

    # runner.args is the run's: a new or changed one is refused, naming it.
    (project / "helper.py").write_text("X = 1\n")
    (project / "extra.py").unlink()
    jobs.workdir._packed.clear()
    refused = cli("launch", *line, "+runner.args.wd=0.1")
    assert refused.code == 2 and refused.err.startswith(
        "trainstack launch: runner.args.wd: run mine was launched without it"
    ), refused.err
    refused = cli("launch", *own_code_line(project, "runner.args.lr=0.2"))
    assert refused.code == 2 and "runner.args.lr: run mine was launched with 0.1" in refused.err


def test_an_hf_run_relaunches_with_its_recorded_runner(workdir):
    line = [
        "runner=hf",
        "model=hf",
        "model.init_from=s3://b/models/x",
        "runner.peft.r=4",
        "+runner.env.MY_FLAG=1",
        "run_id=tuned",
    ]
    state = workdir / "runs" / "tuned" / "job"
    state.mkdir(parents=True)
    record = compose(line)
    (state / "launch.yaml").write_text(OmegaConf.to_yaml(record))
    for typed in (line, ["run_id=tuned"], ["run_id=tuned", "trainer.max_steps=7"]):
        cfg, where = relaunch_config(compose(typed), typed)
        assert where == "runs/tuned/job/launch.yaml"
        assert OmegaConf.to_container(cfg.runner) == OmegaConf.to_container(record.runner)
        assert cfg.model.init_from == "s3://b/models/x"
    with pytest.raises(JobConfigError, match=r"^runner\.env\.OTHER: run tuned was launched with"):
        typed = ["run_id=tuned", "+runner.env.OTHER=2"]
        relaunch_config(compose(typed), typed)


def test_a_plain_directory_workdir_never_packs_the_runs_kept_in_it(workdir):
    """`runner.workdir=.` outside git, with runs/ (and a storage root elsewhere in it), a
    venv and caches beside the code: only the code is packed, the same hash every time."""
    from datetime import UTC, datetime

    from jobs.materialize import materialize

    project = project_in(workdir)

    def packed(root: str) -> tuple[str, int]:
        jobs.workdir._packed.clear()  # each launch is a new process
        line = [*own_code_line(Path("."))[:-1], f"storage.root={root}"]  # a new run each time
        job = materialize(compose(line), now=datetime.now(UTC), git_sha=None)
        return job.cfg.runner.code, job.code.files

    first = packed("store")
    assert first[1] == 2
    for junk in ("runs/old/code/a.tar.gz", "store/r1/checkpoints/last.pt", ".venv/bin/python"):
        (project / junk).parent.mkdir(parents=True, exist_ok=True)
        (project / junk).write_bytes(b"x" * 100)
    for cache in (".cache/huggingface/x", "pkg.egg-info/PKG-INFO", "wandb/run-1/log"):
        (project / cache).parent.mkdir(parents=True, exist_ok=True)
        (project / cache).write_text("x")
    # runs/ holds the local state of s3:// runs too; store/ is this launch's storage root.
    assert packed("store") == first
    (project / "store").rename(project / "elsewhere")
    assert packed("s3://bucket/runs")[1] == 3  # elsewhere/r1/checkpoints/last.pt: not a root
    names, source = list_files(project, frozenset({(project / "store").resolve()}))
    assert source == "directory" and not any(n.startswith("store/") for n in names)


CONTRACT_SCRIPT = """
import os, sys
from pathlib import Path
# Opens every contract path straight away, making no directory of its own.
with open(os.environ["TRAINSTACK_METRICS"], "a") as f:
    f.write('{"step": 1, "loss": 1.0}\\n')
(Path(os.environ["TRAINSTACK_CHECKPOINT_DIR"]) / "probe").write_text("x")
(Path(os.environ["TRAINSTACK_RUN_DIR"]) / "probe").write_text("x")
sys.exit(int(os.environ["RANK"] == "0" and os.environ.get("FAIL", "0")))
"""


def test_every_contract_path_exists_at_start_and_status_counts_the_restarts(cli, workdir):
    (workdir / "project").mkdir()
    (workdir / "project" / "probe.py").write_text(CONTRACT_SCRIPT)
    line = [
        "runner=command",
        "runner.command=[python,probe.py]",
        f"runner.workdir={workdir / 'project'}",
        "compute.procs_per_node=1",
        "job.max_restarts=2",
    ]
    done = cli("launch", *line, "run_id=opens")
    assert done.code == 0, done.err + done.out[-3000:]
    shown = cli("status", "opens")
    assert "restarts   0" in shown.out and "last step  1" in shown.out, shown.out

    failing = cli("launch", *line, "+runner.env.FAIL=1", "run_id=fails")
    assert failing.code != 0
    shown = cli("status", "fails")
    assert "state      failed" in shown.out and "restarts   2" in shown.out, shown.out


def test_a_local_launch_of_several_processes_sets_omp_threads_itself(monkeypatch):
    """torchrun sets OMP_NUM_THREADS=1 for several processes, printing four lines each time
    unless it is set already; one the user exported is left alone."""
    from jobs.backends.local.backend import LocalBackend
    from tests.jobs.conftest import build

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = LocalBackend().dryrun(build([], run_id="omp")).request.env
    assert env["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert "OMP_NUM_THREADS" not in LocalBackend().dryrun(build([], run_id="omp")).request.env


def test_a_refused_relaunch_names_the_ignore_file_with_a_pattern_that_keeps_a_log_out(cli, workdir):
    """`trainstack launch ... > train.log` writes a log into the project (issue 50): the
    relaunch's refusal names .trainstackignore and a pattern that keeps the log out, and the
    pattern does: a run launched with it relaunches however much the log grows."""
    project = project_in(workdir / "project")
    line = own_code_line(project)
    first = cli("launch", *line)
    assert first.code == 0, first.err + first.out[-2000:]
    (project / "train.log").write_text("trained\n")
    jobs.workdir._packed.clear()  # each launch is a new process
    refused = cli("launch", *line)
    assert refused.code == 2 and refused.err.count("\n") == 1, refused.err
    assert "train.log (new); a relaunch runs the same code" in refused.err
    ignore_file = project / ".trainstackignore"
    assert f"belong in {ignore_file}, one pattern a line: `*.log` keeps train.log out" in (
        refused.err
    )

    ignore_file.write_text("*.log\n")
    kept_out = [*line[:-1], "run_id=mine-2"]
    jobs.workdir._packed.clear()
    assert cli("launch", *kept_out).code == 0
    (project / "train.log").write_text("trained\ntrained again\n")
    jobs.workdir._packed.clear()
    again = cli("launch", *kept_out)
    assert again.code == 0, again.err


@pytest.mark.parametrize(
    ("found", "hint"),
    [
        ([("nohup.out", "new"), ("helper.py", "changed")], "`*.out` keeps nohup.out out"),
        ([("notes", "changed"), ("outputs/m.bin", "new")], "`outputs` keeps outputs/m.bin out"),
        ([("notes", "changed")], "`notes` keeps notes out"),
        ([("helper.py", "changed"), ("conf/a.yaml", "new"), ("old.log", "removed")], None),
    ],
)
def test_the_ignore_hint_offers_a_pattern_for_what_a_run_wrote_never_for_code(found, hint):
    said = jobs.workdir.ignore_hint(".", found)
    if hint is None:
        assert said == ""
    else:
        assert said.startswith("; files a run or a tool writes there (logs, outputs) belong in ")
        assert "./.trainstackignore" in said and hint in said, said
