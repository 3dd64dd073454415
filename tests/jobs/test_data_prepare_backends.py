"""`trainstack data prepare` picks where it runs from the backend's traits (pods, submits),
never from the backend's name."""

from __future__ import annotations

import dataclasses

import jobs.commands.data
from jobs.backend_registry import traits_of
from jobs.cli import main

IMAGE = "registry.example.com/trainer:v1"


def prepare(to: str, *overrides: str) -> list[str]:
    return [
        "data",
        "prepare",
        "--to",
        to,
        "data.path=s3://bkt/in/",
        "data.tokenizer=byte",
        f"job.image={IMAGE}",
        *overrides,
    ]


def traits(monkeypatch, name: str, **changes) -> None:
    """The backend called `name` answers with `changes`; every other as it does."""
    changed = dataclasses.replace(traits_of(name), **changes)
    monkeypatch.setattr(
        jobs.commands.data, "traits_of", lambda n: changed if n == name else traits_of(n)
    )


def test_a_backend_with_pods_prepares_in_them_whatever_its_name(monkeypatch, tmp_path, capsys):
    traits(monkeypatch, "local", pods=True)
    code = main(prepare(str(tmp_path / "out"), "backend=local"))
    assert code == 2
    assert "is not on S3; backend=local pods read sources" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_backend_that_submits_pins_the_image_and_submits(monkeypatch, tmp_path, capsys):
    traits(monkeypatch, "render", submits=True)
    seen = []
    monkeypatch.setattr(jobs.commands.data, "resolve_digest", lambda image: f"{image}@sha256:0")
    monkeypatch.setattr(jobs.commands.data, "_submit", lambda cfg, job, wait: seen.append(job) or 0)
    out = f"backend.output_root={tmp_path / 'rendered'}"
    assert main(prepare("s3://bkt/ds", "backend=render", out)) == 0, capsys.readouterr().err
    (job,) = seen
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{IMAGE}@sha256:0"
    assert not (tmp_path / "rendered").exists()


def test_a_backend_that_only_writes_writes_the_job(tmp_path, capsys):
    out = f"backend.output_root={tmp_path / 'rendered'}"
    assert main(prepare("s3://bkt/ds", "backend=render", out)) == 0
    assert "wrote" in capsys.readouterr().out
    assert len(list((tmp_path / "rendered").glob("*/manifests.yaml"))) == 1
