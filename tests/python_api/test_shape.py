"""The public package's shape: `import trainstack` is light, its names are `__all__`, it is
typed, and its exceptions are the classes the CLI's exit codes and the API's statuses come
from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainstack
from jobs.api.service import ApiError
from jobs.errors import EXIT_BAD_INPUT, for_status

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "kubernetes", "kubeflow", "hydra", "jobs.inprocess", "pydantic", "httpx")


def test_import_trainstack_loads_no_torch_kubernetes_client_or_hydra(tmp_path):
    code = (
        "import json, sys, trainstack; "
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_the_public_names_are_all_and_typed():
    public = {"launch", "run", "runs", "sweep", "Client", "Run", "RunStatus", "Sweep"}
    errors = {"ConfigError", "SubmitError", "RunFailed", "RunNotFound", "WaitTimeout"}
    assert set(trainstack.__all__) == public | errors | {"TrainstackError"}
    for name in trainstack.__all__:
        assert getattr(trainstack, name) is not None, name
    assert (Path(trainstack.__file__).parent / "py.typed").is_file()
    assert errors <= set(trainstack.errors.__all__) <= set(trainstack.__all__)
    assert issubclass(trainstack.WaitTimeout, TimeoutError)
    for name in errors:
        assert issubclass(getattr(trainstack, name), trainstack.TrainstackError)


def test_the_cli_exits_and_prints_what_the_python_api_raises(tmp_path, monkeypatch):
    """The same one line, the exit code from the class."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "jobs.launch", "trainer.max_stepz=3"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(trainstack.ConfigError) as caught:
        trainstack.launch("trainer.max_stepz=3")
    assert done.returncode == trainstack.ConfigError.exit_code == EXIT_BAD_INPUT == 2
    assert done.stderr.strip() == f"trainstack launch: {caught.value}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (422, trainstack.ConfigError),
        (404, trainstack.RunNotFound),
        (504, trainstack.WaitTimeout),
        (409, trainstack.SubmitError),
        (403, trainstack.SubmitError),
        (503, trainstack.SubmitError),
    ],
)
def test_a_status_is_the_class_that_has_it(status, kind):
    assert for_status(status) is kind
    assert kind is trainstack.SubmitError or kind.http_status == status


def test_the_api_answers_a_bad_request_with_the_config_errors_status():
    from jobs.submission import BadInput

    assert issubclass(BadInput, trainstack.ConfigError)
    assert ApiError(BadInput.http_status, "x").status == 422


def test_a_config_error_parses_its_key_and_what_is_allowed():
    err = trainstack.ConfigError("model: no option 'x'; allowed: tiny, llama3_8b")
    assert (err.key, err.allowed) == ("model", "tiny, llama3_8b")
    plain = trainstack.ConfigError("overrides, axes: a sweep needs at least one")
    assert plain.key is None and plain.allowed is None
