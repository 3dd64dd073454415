"""The GPU check (benchmarks/gpu) in its CPU form, so that it is ready whenever a GPU is lent:
every case runs at tiny sizes with only the GPU machine's packages (plus the wheels the check
carries), and a failing or hanging case is recorded without stopping the others."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.gpu import fixtures
from benchmarks.gpu.cases import (
    FAMILY_PRESETS,
    FAULT_ENV,
    Context,
    family_args,
    init_from_overrides,
    lora_overrides,
    resume_overrides,
    row_overrides,
)
from benchmarks.gpu.check import NOT_ON_DEVICE, WHEELS, child_env
from benchmarks.gpu.plan import CASES, GPU, TRAIN_ROWS
from contract.plan import make_plan
from trainer.hf.config import read_hf_config
from trainer.run_config import load_config
from trainer.runners.hf.settings import check_supported, training_arguments

REPO = Path(__file__).resolve().parents[2]


def run_check(out: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 560):
    command = [sys.executable, "-m", "benchmarks.gpu.check", "--smoke", "--device-packages"]
    proc = subprocess.run(
        [*command, "--out", str(out), *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    report = json.loads((out / "gpu_check.json").read_text())
    return proc, report


@pytest.mark.slow
def test_the_cpu_form_runs_every_case_on_the_gpu_machines_packages(tmp_path):
    proc, report = run_check(tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = report["cases"]
    assert list(cases) == [c.name for c in CASES]
    for case in CASES:
        expected = "skipped" if case.gpu_only else "ok"
        assert cases[case.name]["status"] == expected, (case.name, cases[case.name])
    results = {name: entry.get("result") for name, entry in cases.items()}
    plain = results["train_1b/eager/ac_none"]
    assert plain["tokens_per_s"] > 0 and plain["steps_logged"] == 6
    assert plain["mfu_peak_source"] == "cpu" and plain["mfu_percent"] is None  # no CPU peak
    assert results["resume"]["bit_for_bit_after_resume"] is True, results["resume"]["verdict"]
    assert results["resume"]["fresh_runs_equal_before_checkpoint"] is True
    assert results["lora"]["tokens_per_s"] > 0
    assert results["hf_runner"]["runner_hf"]["steps_logged"] == 4
    assert results["hf_runner"]["built_in"]["steps_logged"] == 4
    for family in ("family/qwen3", "family/mistral"):
        assert results[family]["within_bf16_tolerance"] is True, results[family]
        assert results[family]["step_1_loss"] is not None
        assert results[family]["ours_vs_fp32"] > 1e-4  # it did compute in bf16
    ratios = report["comparisons"]
    assert set(ratios) == {
        "train_1b/eager/ac_selective_op vs train_1b/eager/ac_none",
        "lora vs train_1b/eager/ac_none",
    }
    assert "train_1b/eager/ac_none" in proc.stdout  # the table
    assert (tmp_path / "out/logs/resume.txt").is_file()


def test_a_failing_case_and_a_hung_one_are_recorded_and_ended(tmp_path):
    faults = "train_1b/eager/ac_none=fail,train_1b/eager/ac_selective_op=hang"
    proc, report = run_check(
        tmp_path / "out",
        *("--only", "train_1b/eager/ac_none", "--only", "train_1b/eager/ac_selective_op"),
        *("--only", "resume", "--budget-s", "30", "--keep-work"),
        env={FAULT_ENV: faults},
        timeout=120,
    )
    assert proc.returncode == 1
    cases = report["cases"]
    assert list(cases) == [
        "environment",
        "train_1b/eager/ac_none",
        "train_1b/eager/ac_selective_op",
        "resume",
    ]
    assert cases["environment"]["status"] == "ok"
    failed = cases["train_1b/eager/ac_none"]
    assert failed["status"] == "failed"
    assert "Traceback" in failed["error"] and "planted failure" in failed["error"]
    assert cases["train_1b/eager/ac_selective_op"]["status"] == "timeout"
    assert cases["resume"]["status"] == "skipped"
    assert cases["resume"]["reason"].startswith("budget")
    hung = int((Path(report["work"]) / "hung-child.pid").read_text())
    assert not Path(f"/proc/{hung}").exists() or _zombie(hung)
    assert "planted failure" in proc.stdout  # the table names the cause


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_the_gpu_machines_packages_are_emulated_with_the_wheels_on_the_path():
    probe = (
        "import importlib.util, omegaconf, yaml\n"
        "print(omegaconf.__file__)\n"
        "print(importlib.util.find_spec('rich'), importlib.util.find_spec('yaml') is not None)\n"
        "try:\n    import boto3\n"
        "except ModuleNotFoundError as exc:\n    print('missing', exc.name)\n"
        "import trainer.train, trainer.runners.hf.train, trainer.launch\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env=child_env(emulate_device=True),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    omegaconf_file, spec_line, missing = proc.stdout.splitlines()
    assert any(omegaconf_file.startswith(str(wheel)) for wheel in WHEELS)
    assert spec_line == "None True"
    assert missing == "missing boto3"
    assert {"omegaconf", "rich", "boto3", "s3torchconnector", "zstandard"} <= set(NOT_ON_DEVICE)


def test_the_wheels_are_the_pinned_versions_pure_python_small_and_unchanged():
    """A bump of omegaconf or antlr4 in constraints.txt fails here until the wheels follow
    (benchmarks/gpu/README.md says how to fetch them); SHA256SUMS is what was committed."""
    lines = (REPO / "constraints.txt").read_text().splitlines()
    pins = {name: version.strip() for name, eq, version in (x.partition("==") for x in lines) if eq}
    expected = {
        f"antlr4_python3_runtime-{pins['antlr4-python3-runtime']}-py3-none-any.whl",
        f"omegaconf-{pins['omegaconf']}-py3-none-any.whl",
    }
    assert {w.name for w in WHEELS} == expected
    assert sum(w.stat().st_size for w in WHEELS) < 2**20
    sums = dict(
        reversed(line.split("  "))
        for line in (WHEELS[0].parent / "SHA256SUMS").read_text().split("\n")
        if line
    )
    for wheel in WHEELS:
        assert hashlib.sha256(wheel.read_bytes()).hexdigest() == sums[wheel.name], wheel.name


def test_the_gpu_form_stops_at_once_without_a_gpu(tmp_path):
    """Here (no GPU) the GPU form would train the 1B model on the CPU: it stops after the
    environment row and says why."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the GPU form would run")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu.check", "--out", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    report = json.loads((tmp_path / "out/gpu_check.json").read_text())
    assert list(report["cases"]) == ["environment"]
    assert report["cases"]["environment"]["status"] == "failed"
    assert "no CUDA device" in proc.stdout


def test_the_gpu_sizes_are_valid_trainer_configs(tmp_path):
    """The GPU form's configurations (which no CPU run uses) planned as the trainer plans
    them: a bad key or size would otherwise cost the GPU run it is found in."""
    ctx = Context(tmp_path, GPU, smoke=False)
    config = tmp_path / "config.yaml"
    config.write_text(f"run_dir: {tmp_path / 'run'}\nseed: 0\n")

    def plan(overrides: list[str], source: Path | None = None):
        cfg = load_config(str(config), overrides)
        return cfg, make_plan(cfg, 1, read_hf_config(str(source)) if source else None)

    def checkpoint(label: str, args) -> Path:
        folder = tmp_path / label
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(fixtures.hf_config(args)))
        return folder

    big = fixtures.args_from_overrides(GPU.big)
    for name in TRAIN_ROWS:
        _, rows = plan(row_overrides(ctx, name))
        assert rows.model == big and 1.2e9 < big.num_params() < 1.3e9
        assert (rows.seq_len, rows.tokens_per_step) == (2048, 8192)
    _, resumed = plan(resume_overrides(ctx))
    assert resumed.model == fixtures.model_args(GPU.small_llama, GPU.small_overrides)
    _, lora = plan(lora_overrides(ctx, checkpoint("llama_1b", big)), tmp_path / "llama_1b")
    assert lora.model == big
    small = fixtures.model_args(GPU.small_llama, GPU.small_overrides)
    cfg, hf = plan(init_from_overrides(ctx, checkpoint("small", small), 10), tmp_path / "small")
    assert hf.model == small
    check_supported(cfg)
    settings = training_arguments(cfg, output_dir=str(tmp_path / "out"), world=1, cuda=True)
    assert settings["bf16"] and settings["max_steps"] == 10
    for name in FAMILY_PRESETS:
        _, _, args = family_args(ctx, name)
        _, family = plan(init_from_overrides(ctx, checkpoint(name, args), 1), tmp_path / name)
        assert family.model == args
    assert family.model.sliding_window == GPU.sliding_window < GPU.seq_len  # the window acts
