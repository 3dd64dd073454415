"""Issue 26 item 4: with model.init_from set, its tokenizer is data.tokenizer's default for
every data option (the README's promise), `data=jsonl` included; a tokenizer given still wins."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from contract.plan import tokenizer_source
from jobs.validate import JobConfigError
from testing_support.hf_models import build_llama, word_corpus
from tests.jobs.conftest import build
from trainer.run_config import load_config
from trainer.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    return build_llama(tmp_path_factory.mktemp("hf") / "tiny-llama", tied=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    corpus = word_corpus(tmp_path_factory.mktemp("data") / "words.jsonl", docs=40)
    (corpus.parent / "prepared").mkdir()  # validation checks the mixture's path exists
    return corpus


def data_option(option: str, corpus: Path) -> list[str]:
    return {
        "sample": ["data=sample"],
        "jsonl": ["data=jsonl", f"data.path={corpus}"],
        "mixture": ["data=mixture", f"data.mixture=[{{path: {corpus.parent}/prepared}}]"],
    }[option]


@pytest.mark.parametrize("option", ["sample", "jsonl", "mixture"])
def test_every_data_option_defaults_to_the_checkpoints_tokenizer(
    option: str, hf_dir: Path, corpus: Path, tmp_path: Path
):
    job = build(["model=hf", f"model.init_from={hf_dir}", *data_option(option, corpus)])
    assert job.spec.trainer_config["data"]["tokenizer"] is None
    record = tmp_path / "config.yaml"
    record.write_text(yaml.safe_dump(job.spec.trainer_config))
    trainer_cfg = load_config(str(record), [])
    assert tokenizer_source(trainer_cfg) == str(hf_dir)
    assert build_tokenizer(tokenizer_source(trainer_cfg), 300).vocab_size == 260


def test_a_given_tokenizer_still_wins_and_none_without_init_from_is_named(corpus: Path, hf_dir):
    job = build(["model=hf", f"model.init_from={hf_dir}", "data=jsonl", f"data.path={corpus}",
                 "data.tokenizer=byte"])  # fmt: skip
    assert job.spec.trainer_config["data"]["tokenizer"] == "byte"
    with pytest.raises(JobConfigError, match=r"^data\.tokenizer: Missing mandatory value"):
        build(["data=jsonl", f"data.path={corpus}"])


@pytest.mark.slow
def test_the_readme_command_trains(hf_dir: Path, corpus: Path, cli, exec_in_process):
    result = cli("launch", "model=hf", f"model.init_from={hf_dir}", "data=jsonl",
                 f"data.path={corpus}", "data.seq_len=32", "trainer.max_steps=2",
                 "trainer.eval_interval=0", "trainer.micro_batch_size=2")  # fmt: skip
    assert result.code == 0, result.err[-2000:]
    assert f"initialized from {hf_dir}" in result.out + result.err
