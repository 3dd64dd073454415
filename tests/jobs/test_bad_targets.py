"""Issue 13 section 4 through the real CLI: bad data, image, cluster names, estimate inputs,
output root and sweep id each end in one line naming the key and what is allowed, exit 2, and
nothing written (in the working directory, nor under the output root given)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.references import image_reference_problem
from tests.jobs.conftest import CLUSTER, files_under

G5 = ["compute=g5.12xlarge", *CLUSTER]
DIGEST = "sha256:" + "0123456789abcdef" * 4

BAD_INPUTS = {
    "jsonl without a path": (["data=jsonl", "data.tokenizer=byte"], "data.path", "JSONL"),
    "digest too short": (
        [*G5, "job.image=repo:latest@sha256:abc"],
        "job.image",
        "@sha256:<64 lower-case hex digits>",
    ),
    "digest of another algorithm": (
        [*G5, "job.image=repo/trainer@md5:0123456789abcdef0123456789abcdef"],
        "job.image",
        "@sha256:",
    ),
    "whitespace in the image": ([*G5, "job.image='repo/trainer:v1 '"], "job.image", "whitespace"),
    "upper case repository": ([*G5, "job.image=Repo/Trainer:v1"], "job.image", "REPOSITORY"),
    "tagged image repository": (
        [*G5, "job.image=null", "job.image_repository=repo/trainer:v1"],
        "job.image_repository",
        "no tag",
    ),
    "namespace not DNS-1123": (
        [*G5, "cluster.namespace=Training_NS"],
        "cluster.namespace",
        "DNS-1123 label",
    ),
    "namespace too long": (
        [*G5, "cluster.namespace=" + "n" * 64],
        "cluster.namespace",
        "at most 63",
    ),
    "service account not DNS-1123": (
        [*G5, "cluster.service_account=my_trainer"],
        "cluster.service_account",
        "DNS-1123 subdomain",
    ),
    "negative hourly price": ([*G5, "compute.hourly_usd=-0.42"], "compute.hourly_usd", ">= 0"),
    "negative step time": ([*G5, "compute.step_time_s=-2"], "compute.step_time_s", "> 0"),
    "zero step time": ([*G5, "compute.step_time_s=0"], "compute.step_time_s", "> 0"),
    "bad sweep id on a single run": (["sweep_id=Bad_Sweep"], "sweep_id", "DNS-1035"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_nothing_written(cli, workdir, case):
    overrides, key, allowed = BAD_INPUTS[case]
    result = cli("launch", *overrides)
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith(f"trainstack launch: {key}: "), lines[0]
    assert allowed in lines[0], lines[0]
    assert result.out == ""
    assert files_under(workdir) == []


def test_an_output_root_under_a_file_is_refused_before_rendering(cli, workdir):
    (workdir / "notes.txt").write_text("a file, not a directory\n")
    result = cli("launch", *G5, "backend.output_root=notes.txt/rendered")
    assert result.code == 2, result
    [line] = result.err.strip().splitlines()
    assert line.startswith("trainstack launch: backend.output_root: 'notes.txt/rendered' ")
    assert "not a directory" in line and "allowed: a directory" in line
    assert files_under(workdir) == ["notes.txt"]


def test_an_output_root_the_disk_refuses_is_one_line_not_a_traceback(cli, workdir):
    # /proc takes no new directories even from root (for whom os.access says writable), so
    # whichever check catches it, the user sees one line and exit 2.
    result = cli("launch", *G5, "backend.output_root=/proc/trainstack-renders")
    assert result.code == 2, result
    [line] = result.err.strip().splitlines()
    assert line.startswith("trainstack launch: backend.output_root: ")
    assert "Traceback" not in result.err and "Traceback" not in result.out
    assert not Path("/proc/trainstack-renders").exists()
    assert files_under(workdir) == []


def test_a_bad_sweep_id_is_blamed_on_sweep_id_not_a_run_id(cli, workdir):
    result = cli("launch", "-m", *G5, "sweep_id=Bad_Sweep", "trainer.lr=1e-4,3e-4")
    assert result.code == 2, result
    [line] = result.err.strip().splitlines()
    assert "sweep_id: 'Bad_Sweep' is not allowed; allowed: " in line and "DNS-1035" in line
    assert "run_id" not in line and "Bad_Sweep-0" not in line
    assert files_under(workdir) == []


def test_a_sweep_id_leaves_room_for_its_point_numbers(cli, workdir):
    result = cli("launch", "-m", *G5, "sweep_id=" + "s" * 50, "trainer.lr=1e-4,3e-4")
    assert result.code == 2, result
    assert "sweep_id: " in result.err and "point run ids add '-<point>'" in result.err
    assert files_under(workdir) == []


@pytest.mark.parametrize(
    "image",
    [
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack/trainer:v1",
        f"123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack/trainer@{DIGEST}",
        f"localhost:5000/trainer:api-0123abc@{DIGEST}",
        "ghcr.io/org/trainer_image:2026.11.1",
    ],
)
def test_good_image_references_pass(image):
    assert image_reference_problem(image) is None


def test_good_names_render(cli, workdir):
    result = cli(
        "launch",
        *G5,
        f"job.image=repo/trainer@{DIGEST}",
        "cluster.namespace=team-a",
        "cluster.service_account=trainer.team-a",
        "compute.hourly_usd=0",
        "compute.step_time_s=1.5",
        "backend.output_root=out/rendered",
        "run_id=good",
    )
    assert result.code == 0, result.err
    assert files_under(workdir / "out" / "rendered" / "good") == [
        "job",
        "job/state.json",
        "manifests.yaml",
    ]
