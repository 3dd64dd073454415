"""`trainstack launch` is a Hydra app: Hydra's flags, user config dirs, sweep syntax and a
third-party sweeper (Optuna's, from PyPI, unchanged)."""

from __future__ import annotations

import logging.config

import pytest
import yaml

from jobs.compose import CONF_DIR
from tests.jobs.conftest import CLUSTER, files_under

GPU = ["compute=g5.12xlarge", "compute.step_time_s=1.0", *CLUSTER]


@pytest.fixture(autouse=True)
def hydra_logging_reset():
    """`--hydra-help` and the Optuna sweeper let Hydra configure logging with a handler on the
    test's captured stderr; in one process, later tests would log into that closed stream."""
    yield
    logging.config.dictConfig(
        {"version": 1, "disable_existing_loggers": False, "root": {"handlers": []}}
    )
    for name in list(logging.root.manager.loggerDict):
        logger = logging.getLogger(name)
        if name.split(".")[0] in ("hydra", "optuna"):
            logger.handlers.clear()


def test_cfg_job_prints_the_composed_config_and_writes_nothing(cli, workdir):
    result = cli("launch", "--cfg", "job", "model=llama3_1b", "--wait")
    assert result.code == 0, result.err
    cfg = yaml.safe_load(result.out)
    assert cfg["model"]["name"] == "llama3_1b" and cfg["backend"]["wait"] is True
    assert "hydra" not in cfg
    package = cli("launch", "--cfg", "job", "--package", "trainer", "--resolve")
    assert package.code == 0 and package.out.startswith("# @package trainer")
    assert "max_steps: 150" in package.out and "model:" not in package.out
    assert files_under(workdir) == []


def test_help_lists_groups_options_and_trainstacks_flags(cli):
    result = cli("launch", "--help")
    assert result.code == 0
    for text in ("--dryrun", "--wait", "--skip-preflight", "--cfg,-c", "model: ", "llama3_8b"):
        assert text in result.out, text
    groups = result.out.split("== Configuration groups ==")[1].split("== Config ==")[0]
    names = [line.split(":")[0] for line in groups.splitlines() if ": " in line]
    # Only the shipped groups: none of the app package's code folders (`api`, `backends`, ...).
    shipped = CONF_DIR
    assert sorted(names) == sorted(
        d.name for d in shipped.iterdir() if d.is_dir() and not d.name.startswith("__")
    )
    hydra_help = cli("launch", "--hydra-help")
    assert hydra_help.code == 0 and "hydra/launcher: " in hydra_help.out


def test_info_and_shell_completion(cli):
    info = cli("launch", "--info", "searchpath")
    assert info.code == 0 and "pkg://conf" in info.out
    for shell, marker in (("bash", "hydra_bash_completion"), ("fish", "hydra_fish_completion")):
        result = cli("launch", "--shell-completion", f"install={shell}")
        assert result.code == 0 and marker in result.out


def test_bad_override_is_one_line_exit_2(tmp_path):
    """In a fresh process (in-process, an earlier test's captured stream stays in logging)."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "jobs.launch", "--cfg", "job", "trainer.maxsteps=3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "trainer.maxsteps: unknown key" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_user_config_dirs_override_and_extend_the_shipped_tree(cli, workdir, monkeypatch):
    mine = workdir.parent / "user-conf"
    (mine / "experiment").mkdir(parents=True)
    (mine / "experiment" / "mine.yaml").write_text("# @package _global_\ntrainer:\n  lr: 0.0042\n")
    (mine / "model").mkdir()
    (mine / "model" / "tiny.yaml").write_text("name: tiny\nn_layers: 3\n")  # replaces shipped
    monkeypatch.setenv("TRAINSTACK_CONFIG_PATH", str(mine))
    result = cli("launch", "--cfg", "job", "experiment=mine")
    assert result.code == 0, result.err
    cfg = yaml.safe_load(result.out)
    assert cfg["trainer"]["lr"] == 0.0042 and cfg["model"]["n_layers"] == 3
    # --config-dir adds options too (searched after the shipped tree, as in any Hydra app).
    extra = workdir.parent / "extra-conf" / "experiment"
    extra.mkdir(parents=True)
    (extra / "other.yaml").write_text("# @package _global_\ntrainer:\n  max_steps: 7\n")
    result = cli("launch", "-cd", str(extra.parent), "--cfg", "job", "experiment=other")
    assert result.code == 0 and yaml.safe_load(result.out)["trainer"]["max_steps"] == 7


def test_sweep_syntax_glob_and_range_on_render(cli, workdir):
    result = cli(
        "launch", "-m", "model=glob(llama3_1*)", "trainer.max_steps=range(100,300,100)", *GPU
    )
    assert result.code == 0, result.err
    (summary,) = workdir.glob("runs/sweeps/*/summary.yaml")
    runs = yaml.safe_load(summary.read_text())["runs"]
    # glob() expands over the shipped model options (llama3_1b, llama3_1_8b, ...), range() stops
    # before 300.
    options = sorted(p.stem for p in (CONF_DIR / "model").glob("llama3_1*.yaml"))
    assert len(options) >= 2
    assert sorted(tuple(r["overrides"][:2]) for r in runs) == sorted(
        (f"model={o}", f"trainer.max_steps={n}") for o in options for n in (100, 200)
    )


def test_optuna_sweeper_runs_unchanged(cli, workdir):
    """A third-party sweeper: Optuna proposes points (interval()), trainstack's launcher
    validates and renders them, and each point's objective is its estimated cost."""
    result = cli(
        "launch",
        "-m",
        "hydra/sweeper=optuna",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.n_jobs=1",
        "hydra.sweeper.sampler.seed=1",
        "trainer.max_steps=int(interval(100,400))",
        *GPU,
    )
    assert result.code == 0, result.err
    (summary,) = workdir.glob("runs/sweeps/*/summary.yaml")
    runs = yaml.safe_load(summary.read_text())["runs"]
    assert len(runs) == 3 and {r["state"] for r in runs} == {"rendered"}
    assert len(list(workdir.glob("runs/*/manifests.yaml"))) == 3


def test_tab_completion_queries_complete_launch_overrides(cli, monkeypatch):
    """What the installed bash script runs for `trainstack launch model=l<TAB>`."""
    monkeypatch.setenv("COMP_LINE", "trainstack launch model=l")
    result = cli("-sc", "query=bash")
    assert result.code == 0, result.err
    shipped = sorted(p.stem for p in (CONF_DIR / "model").glob("l*.yaml"))
    assert len(shipped) >= 3
    assert sorted(result.out.split()) == [f"model={name}" for name in shipped]


def test_plus_tilde_and_force_add_overrides(cli):
    forced = cli("launch", "--cfg", "job", "++trainer.lr=0.5", "+notes.owner=me", "~notes.owner")
    assert forced.code == 0, forced.err
    cfg = yaml.safe_load(forced.out)
    assert cfg["trainer"]["lr"] == 0.5 and cfg["notes"] == {}
    added = cli("launch", "--cfg", "job", "+trainer.lr=0.1")  # exists: `+` refuses
    assert added.code == 2 and "trainer.lr" in added.err
