"""Render runs: the launch says where the manifests went, `runs`/`status` list them as
rendered, and the same config renders byte-identical files."""

from __future__ import annotations

from tests.jobs.conftest import CLUSTER

P5X2 = ["compute=p5.48xlarge", "compute.nodes=2", *CLUSTER]


def test_a_render_says_where_and_is_listed_as_rendered(cli, workdir):
    result = cli("launch", *P5X2, "run_id=p5x2")
    assert result.code == 0, result.err
    assert "rendered to runs/p5x2/manifests.yaml" in result.out
    assert "scheduled" not in result.out
    assert (workdir / "runs" / "p5x2" / "manifests.yaml").is_file()

    status = cli("status", "p5x2")
    assert status.code == 0, status.err
    assert "state      rendered" in status.out and "backend    render" in status.out

    runs = cli("runs")
    assert runs.code == 0, runs.err
    row = next(line for line in runs.out.splitlines() if line.split()[:1] == ["p5x2"])
    assert row.split()[2:4] == ["render", "rendered"]
    assert cli("runs", "--state", "rendered").out.count("p5x2") == 1

    cancel = cli("cancel", "p5x2")
    assert cancel.code == 0 and "nothing to cancel" in cancel.out


def test_runs_sweep_counts_rendered_points(cli, workdir):
    result = cli("launch", "-m", "trainer.lr=1e-4,3e-4", *P5X2, "sweep_id=lrsweep")
    assert result.code == 0, result.err
    runs = cli("runs", "--sweep", "lrsweep")
    assert runs.code == 0, runs.err
    assert "sweep lrsweep: 0/2 finished, 2 rendered (written, not run)" in runs.out


def test_the_same_config_renders_byte_identical_files(cli, workdir, monkeypatch):
    """No clock in a render; an ECR tag that cannot be resolved from here (no credentials in
    the suite) is kept, and the render says so in one line."""
    from jobs.backends.render import backend as render

    monkeypatch.setattr(render, "_PINNED", {})
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    path = workdir / "runs" / "same" / "manifests.yaml"
    first = cli("launch", *P5X2, "run_id=same")
    assert first.code == 0, first.err
    assert first.out.count("kept as its tag, not pinned to a digest") == 1, first.out
    assert first.err == ""
    rendered = path.read_bytes()
    assert b"created-at" not in rendered and b"trainer:v1" in rendered
    monkeypatch.setattr(render, "_PINNED", {})
    again = cli("launch", *P5X2, "run_id=same")
    assert again.code == 0, again.err
    assert path.read_bytes() == rendered
