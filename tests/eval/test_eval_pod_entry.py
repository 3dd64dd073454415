"""The eval Job's pod entry point (`python -m trainer.evaluation.job`, in the trainer image):
bad input is exit 2 (the Job's podFailurePolicy fails it at once, no retry), a storage error
exit 1 (retried), each a `[eval]` line; the scoring itself is `trainstack eval`'s
(tests/eval/test_eval.py)."""

from __future__ import annotations

import json

import pytest

from trainer.evaluation import job
from trainer.storage import StorageError

GOOD = json.dumps({"tasks": ["arc_easy"]})


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ("{}", "eval.tasks: name at least one task"),
        ('{"tasks": ["x"], "limit": 0}', "eval.limit: 0 is not allowed"),
        ('{"tasks": ["x"], "colour": 1}', "unexpected keyword argument 'colour'"),
        ("not json", "--settings:"),
    ],
)
def test_bad_settings_are_exit_2(tmp_path, capsys, settings, said):
    argv = ["--run-dir", str(tmp_path), "--step", "4", "--settings", settings]
    assert job.main(argv) == 2
    out = capsys.readouterr().out
    assert out.startswith("[eval] not evaluated: --settings:") and said in out, out


def test_an_image_without_lm_eval_is_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(job.importlib.util, "find_spec", lambda name: None)
    assert job.main(["--run-dir", str(tmp_path), "--step", "4", "--settings", GOOD]) == 2
    assert "this image has no lm-evaluation-harness" in capsys.readouterr().out


def test_a_step_not_committed_is_exit_2_and_a_storage_error_exit_1(tmp_path, capsys, monkeypatch):
    from trainer.evaluation import harness

    (tmp_path / "config.yaml").write_text("seed: 0\n")
    assert job.main(["--run-dir", str(tmp_path), "--step", "4", "--settings", GOOD]) == 2
    assert "no committed checkpoint" in capsys.readouterr().out

    def unreachable(*_, **__):
        raise StorageError("s3://b/runs/r: throttled")

    monkeypatch.setattr(harness, "evaluate_run", unreachable)
    assert job.main(["--run-dir", "s3://b/runs/r", "--step", "4", "--settings", GOOD]) == 1
    assert "[eval] step 4 failed: s3://b/runs/r: throttled" in capsys.readouterr().out
