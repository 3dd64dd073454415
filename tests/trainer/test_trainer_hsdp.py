"""HSDP (trainer.parallel.dp_replicate x dp_shard on a 2-D mesh) trains the same model as full
sharding: on 4 CPU ranks, 2 x 2 and 1 x 4 give the same losses within fp32 tolerance, and a
checkpoint saved under either layout resumes under the other."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.trainer.harness import TrainerResult, committed_steps, launch_trainer, losses_by_step

pytestmark = pytest.mark.slow

HSDP = ["trainer.parallel.dp_replicate=2", "trainer.parallel.dp_shard=2"]
COMMON = ["trainer.checkpoint.interval=4"]
STEPS = list(range(1, 9))


def _run(work: Path, overrides: list[str]) -> TrainerResult:
    result = launch_trainer(work, 4, [*COMMON, *overrides]).finish()
    assert result.returncode == 0, result.stderr
    assert sorted(losses_by_step(result.run_dir)) == STEPS
    assert committed_steps(Path(result.run_dir)) == [4, 8]
    return result


@pytest.fixture(scope="module")
def full_shard(tmp_path_factory: pytest.TempPathFactory) -> TrainerResult:
    return _run(tmp_path_factory.mktemp("full"), [])


@pytest.fixture(scope="module")
def hsdp(tmp_path_factory: pytest.TempPathFactory) -> TrainerResult:
    result = _run(tmp_path_factory.mktemp("hsdp"), HSDP)
    assert "replicate 2 x shard 2" in result.stdout
    return result


def _assert_close(losses: dict[int, float], expected: dict[int, float]) -> None:
    assert sorted(losses) == sorted(expected)
    for step, loss in expected.items():
        assert losses[step] == pytest.approx(loss, rel=1e-5, abs=1e-6), step


def test_hsdp_2x2_trains_like_full_sharding_1x4(full_shard, hsdp):
    _assert_close(losses_by_step(hsdp.run_dir), losses_by_step(full_shard.run_dir))


@pytest.mark.parametrize(
    ("saved_under", "resumed_with"),
    [("full_shard", HSDP), ("hsdp", [])],
    ids=["1x4->2x2", "2x2->1x4"],
)
def test_a_checkpoint_resumes_under_the_other_layout(
    request, tmp_path: Path, saved_under: str, resumed_with: list[str]
):
    saved: TrainerResult = request.getfixturevalue(saved_under)
    run_dir = tmp_path / "run"
    shutil.copytree(saved.run_dir, run_dir)
    shutil.rmtree(run_dir / "checkpoints/step-00000008")  # resume from step 4
    (run_dir / "logs/metrics.jsonl").unlink()
    resumed = launch_trainer(tmp_path, 4, [*COMMON, *resumed_with], run_dir=str(run_dir)).finish()
    assert resumed.returncode == 0, resumed.stderr
    assert "at step 4" in resumed.stdout
    expected = {s: v for s, v in losses_by_step(saved.run_dir).items() if s > 4}
    _assert_close(losses_by_step(str(run_dir)), expected)
