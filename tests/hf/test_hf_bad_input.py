"""Bad Hugging Face inputs: one line naming the problem, exit 2, nothing written — for
model.init_from (the trainer) and `trainstack export`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from testing_support.hf_models import build_llama, word_corpus, write_tokenizer
from tests.hf.test_hf_finetune_export import finetune_args
from tests.trainer.harness import committed_steps


@pytest.fixture(scope="module")
def good_source(tmp_path_factory) -> Path:
    return build_llama(tmp_path_factory.mktemp("good") / "hf", tied=False)


def edit_config(source: Path, **changes) -> None:
    config = json.loads((source / "config.json").read_text())
    config.update(changes)
    (source / "config.json").write_text(json.dumps(config))


def first_shard(source: Path) -> Path:
    return sorted(source.glob("model-*.safetensors"))[0]


def rewrite_first_shard(source: Path, change) -> None:
    shard = first_shard(source)
    tensors = load_file(str(shard))
    change(tensors)
    save_file(tensors, str(shard), metadata={"format": "pt"})


def drop_tensor(source: Path) -> None:
    def change(tensors):
        name = sorted(tensors)[0]
        del tensors[name]
        index = json.loads((source / "model.safetensors.index.json").read_text())
        del index["weight_map"][name]
        (source / "model.safetensors.index.json").write_text(json.dumps(index))

    rewrite_first_shard(source, change)


def reshape_tensor(source: Path) -> None:
    def change(tensors):
        name = sorted(tensors)[0]
        tensors[name] = tensors[name][:-1].clone()

    rewrite_first_shard(source, change)


def truncate_header(source: Path) -> None:
    shard = first_shard(source)
    shard.write_bytes(shard.read_bytes()[:20])


def corrupt_header(source: Path) -> None:
    shard = first_shard(source)
    data = bytearray(shard.read_bytes())
    data[8:20] = b"not json!!!!"
    shard.write_bytes(bytes(data))


CASES = {
    "no config.json": (lambda s: (s / "config.json").unlink(), [], "no config.json"),
    "unsupported model_type": (
        lambda s: edit_config(s, model_type="gemma2"),
        [],
        "model_type 'gemma2' (supported: llama, qwen2, qwen3, mistral); train it with runner=hf",
    ),
    "biases": (lambda s: edit_config(s, attention_bias=True), [], "attention_bias=true"),
    "mixture of experts": (lambda s: edit_config(s, num_local_experts=8), [], "experts"),
    "qwen sliding window": (
        lambda s: edit_config(
            s, model_type="qwen2", architectures=["Qwen2ForCausalLM"], use_sliding_window=True
        ),
        [],
        "use_sliding_window=true",
    ),
    "truncated header": (truncate_header, [], "not a readable safetensors file"),
    "corrupt header": (corrupt_header, [], "not a readable safetensors file"),
    "missing tensor": (drop_tensor, [], "lacks tensor 'model."),
    "shape mismatch": (reshape_tensor, [], "has shape"),
    "tokenizer larger than the vocabulary": (
        lambda s: write_tokenizer(s, 400),
        [],
        "has 400 tokens but the model's vocabulary",
    ),
    "contradicting model key": (lambda s: None, ["model.dim=128"], "model.dim: 128 contradicts"),
    "preset of another shape": (lambda s: None, ["model.name=tiny"], "model.name: preset 'tiny'"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_init_from_is_one_line_exit_2_nothing_written(
    tmp_path: Path, good_source: Path, run_trainer, case: str
):
    spoil, extra, expected = CASES[case]
    source = tmp_path / "hf"
    shutil.copytree(good_source, source)
    spoil(source)
    corpus = word_corpus(tmp_path / "words.jsonl", docs=20)
    result = run_trainer(0, [*finetune_args(str(source), corpus), *extra], small=False)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not Path(result.run_dir).exists()


def trainstack(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    from jobs.cli import main

    code = main(list(args))
    return code, capsys.readouterr().err


def test_export_bad_input_is_one_line_exit_2_nothing_written(tmp_path: Path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("run_dir: x\n")
    target = tmp_path / "out"
    for args, expected in [
        ([str(run_dir), "--to", str(target)], "--step:"),
        ([str(run_dir), "--to", str(target), "--step", "5"], "--step:"),
        ([str(run_dir), "--to", str(target), "--dtype", "fp8"], "--dtype: 'fp8'"),
    ]:
        code, err = trainstack(capsys, "export", *args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err
        assert not target.exists() and committed_steps(run_dir) == []
