"""The Pulumi CLI built from its Go module (localcluster's cached build) runs an inline
program through the Automation API the way localcluster/engine.py drives it: a file backend,
secrets under the passphrase, nothing in the user's home; `preview` after `up` changes
nothing; `destroy` removes the stack."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pulumi
import pytest

from localcluster import build
from localcluster.engine import Engine, changes
from localcluster.versions import PULUMI

SECRET = "not-in-the-state-in-clear"


def _user_pulumi_files() -> set[Path]:
    """What the user's ~/.pulumi holds; the CLI finds the home from the passwd entry, not
    $HOME, so a moved HOME would not show a write there."""
    folder = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".pulumi"
    return set(folder.rglob("*")) | {folder} if folder.exists() else set()


@pytest.fixture(autouse=True)
def _user_home_untouched():
    before = _user_pulumi_files()
    yield
    assert _user_pulumi_files() == before, "the engine wrote into the user's ~/.pulumi"


def _program() -> None:
    pulumi.export("greeting", "hello")
    pulumi.export("token", pulumi.Output.secret(SECRET))


def test_built_cli_reports_its_version(tmp_path):
    """Stamped at build time: unstamped, the Automation API's version check would refuse it."""
    assert build.is_built(PULUMI)
    command = Engine(tmp_path)._command()
    assert str(command.version) == PULUMI.version.removeprefix("v")


def test_up_preview_destroy_with_a_file_backend(tmp_path):
    engine = Engine(tmp_path / "pulumi")
    done = engine.up(_program)
    assert done.summary.resource_changes == {"create": 1}
    assert done.outputs["greeting"].value == "hello"
    assert done.outputs["token"].secret
    state = (engine.backend / ".pulumi" / "stacks" / "trainstack-local" / "local.json").read_text()
    assert SECRET not in state
    assert json.loads(state)["checkpoint"]["latest"]["secrets_providers"]["type"] == "passphrase"
    assert changes(engine.preview(_program).change_summary) == {}
    engine.destroy()
    assert not engine.has_state()
