"""Instruction formats through the real trainer (2 torchrun ranks): a run resumed from a
checkpoint repeats the uninterrupted run's losses bit for bit, and 2 ranks hand over to 1 —
with loss masks, document isolation and the step-wide target count in play."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from tests.trainer.harness import SAMPLE, SMALL_CORPUS_DOCS, launch_trainer, losses_by_step
from tests.trainer.hf_tokenizers import llama3_style

pytestmark = pytest.mark.slow

CHECKPOINT_EVERY_2 = ["trainer.checkpoint.interval=2", "trainer.checkpoint.keep=4"]


def verses() -> list[str]:
    texts = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()]
    return [v.strip() for text in texts[:SMALL_CORPUS_DOCS] for v in text.split("\n") if v.strip()]


def prompt_completion_data(path: Path) -> Path:
    lines = verses()
    records = [{"prompt": a, "completion": " " + b} for a, b in itertools.pairwise(lines)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records[:1500]))
    return path


def chat_data(path: Path) -> Path:
    lines = verses()
    records = [
        {
            "messages": [
                {"role": "system", "content": "Continue the scripture."},
                {"role": "user", "content": lines[i]},
                {"role": "assistant", "content": lines[i + 1]},
                {"role": "user", "content": "And then?"},
                {"role": "assistant", "content": lines[i + 2]},
            ]
        }
        for i in range(0, 1500, 3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def run(work: Path, nproc: int, overrides: list[str], run_dir: Path) -> dict[int, float]:
    result = launch_trainer(work, nproc, overrides, run_dir=str(run_dir)).finish()
    assert result.returncode == 0, result.stderr[-3000:]
    return losses_by_step(str(run_dir))


@pytest.fixture(scope="module")
def formats(tmp_path_factory) -> dict[str, list[str]]:
    work = tmp_path_factory.mktemp("data")
    tokenizer = llama3_style(work / "tok")
    return {
        "prompt_completion": [
            f"data.path={prompt_completion_data(work / 'pc.jsonl')}",
            "data.format=prompt_completion",
        ],
        "chat": [
            f"data.path={chat_data(work / 'chat.jsonl')}",
            "data.format=chat",
            f"data.tokenizer={tokenizer}",
            "model.vocab_size=512",
        ],
    }


@pytest.mark.parametrize("form", ["prompt_completion", "chat"])
def test_instruction_formats_resume_exactly_and_hand_over_to_one_rank(
    tmp_path: Path, formats, form: str
):
    data = [*formats[form], *CHECKPOINT_EVERY_2]
    reference = run(tmp_path, 2, data, tmp_path / "reference")
    assert sorted(reference) == list(range(1, 9))
    assert all(0 < loss < 20 for loss in reference.values())  # finite: no empty-target NaN

    resumed_dir = tmp_path / "resumed"
    source = tmp_path / "reference/checkpoints/step-00000004"
    shutil.copytree(source, resumed_dir / "checkpoints/step-00000004")
    resumed = run(tmp_path, 2, data, resumed_dir)
    assert sorted(resumed) == [5, 6, 7, 8]
    assert resumed == {step: reference[step] for step in resumed}  # bit for bit

    if form == "prompt_completion":  # one hand-over is enough to show the count is global
        one_dir = tmp_path / "one"
        shutil.copytree(source, one_dir / "checkpoints/step-00000004")
        one = run(tmp_path, 0, [*data, "trainer.global_batch_size=4"], one_dir)
        assert sorted(one) == [5, 6, 7, 8]
        for step, loss in one.items():
            assert loss == pytest.approx(reference[step], rel=1e-4)
