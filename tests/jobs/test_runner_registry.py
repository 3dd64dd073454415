"""The runner registry (jobs/runners/): one module per runner, every list of runner names
derived from it, a key of another runner refused at compose time, and a runner name nobody
registered refused in one line wherever a runner is asked for (never another's branch)."""

from __future__ import annotations

import typing

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from jobs.api.models import RunRequest
from jobs.compose import compose
from jobs.config_path import SHIPPED_CONF_DIR
from jobs.errors import JobConfigError, one_line
from jobs.runners import names, registry
from jobs.spec import to_job_spec
from tests.jobs.conftest import GIT_SHA

SCRIPT = ["runner=command", "runner.command=[python,-u,train.py]"]


def test_every_runner_has_its_option_file_and_every_name_list_is_the_registry():
    assert {"trainstack", "command", "hf"} <= set(names())
    assert names() == ("trainstack", *sorted(set(names()) - {"trainstack"}))  # default first
    shipped = sorted(p.stem for p in (SHIPPED_CONF_DIR / "runner").glob("*.yaml"))
    assert shipped == sorted(names())
    runner_field = RunRequest.model_fields["runner"].annotation
    literal = next(a for a in typing.get_args(runner_field) if a is not type(None))
    assert typing.get_args(literal) == names()
    for name, runner in registry().items():
        cfg = compose([f"runner={name}"])
        assert OmegaConf.get_type(cfg.runner) is runner.options


def test_a_key_of_another_runner_fails_at_compose_time_naming_the_runner():
    with pytest.raises(ConfigCompositionException) as caught:
        compose(["runner.command=[python,x.py]"])
    assert one_line(caught.value) == (
        "runner.command: is not a key of runner=trainstack; allowed: name"
    )


def test_an_unknown_runner_name_is_refused_where_the_pod_program_is_built():
    """Past validation (a caller that skips it), `runner.name=spark` on command's options
    used to build command's program: a runner nobody registered is named, in one line."""
    cfg = compose([*SCRIPT, "runner.name=spark", "storage.root=/tmp/runs"])
    with pytest.raises(JobConfigError) as caught:
        to_job_spec(cfg, run_id="r1", sweep_id=None, git_sha=GIT_SHA)
    allowed = ", ".join(names())
    assert str(caught.value) == f"runner.name: unknown runner 'spark'; allowed: {allowed}"


def test_a_relaunch_takes_the_recorded_runner_and_reads_a_record_of_every_runners_keys():
    """`run_id=X` alone composes the default runner; the record names the run's own. A record
    written when `runner` held every runner's keys keeps only its runner's."""
    from jobs.runners import recorded_runner
    from jobs.runners.command import CommandOptions

    cfg = compose([])
    OmegaConf.set_readonly(cfg, False)
    old = {"name": "command", "command": ["python", "x.py"], "code": None, "peft": {"r": 0}}
    record = recorded_runner(cfg, {"seed": 1, "runner": old})
    assert OmegaConf.get_type(cfg.runner) is CommandOptions
    assert record == {"seed": 1, "runner": {k: v for k, v in old.items() if k != "peft"}}
    merged = OmegaConf.merge(cfg, record)
    assert list(merged.runner.command) == ["python", "x.py"]


def test_a_key_added_to_another_runners_options_is_refused_not_ignored():
    """`+runner.command=` adds a key the trainstack options lack: compose lets it in,
    validation names it."""
    from jobs.runners import check_runner

    cfg = compose(["+runner.command=[python,x.py]"])
    with pytest.raises(JobConfigError) as caught:
        check_runner(cfg)
    assert str(caught.value) == "runner.command: is not a key of runner=trainstack; allowed: name"
