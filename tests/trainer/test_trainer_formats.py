"""data.format: which tokens a record becomes and which of them are trained on.

A chat sample's targets are exactly its assistant turns (the reply and the template's
end-of-turn token), a prompt_completion sample's exactly the completion and its end-of-text;
packing marks each token's document and position and never trains a target across documents;
malformed records count against data.max_bad_fraction with one line naming the first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from contract.config import DataConfig
from tests.trainer.hf_tokenizers import llama3_style, mistral_style
from trainer.data import IGNORE_INDEX, Document, PackedSequences, TokenStream, read_documents
from trainer.errors import ConfigError
from trainer.tokenizer import build_tokenizer

CONVERSATION = [
    {"role": "system", "content": "You answer in verse."},
    {"role": "user", "content": "Who made the light?"},
    {"role": "assistant", "content": "  And God said, Let there be light.  "},
    {"role": "user", "content": "And then?"},
    {"role": "assistant", "content": "And there was light."},
]


@pytest.fixture(scope="module")
def llama3_dir(tmp_path_factory) -> Path:
    return llama3_style(tmp_path_factory.mktemp("llama3") / "tok")


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory) -> Path:
    return mistral_style(tmp_path_factory.mktemp("mistral") / "tok")


def write_jsonl(path: Path, records: list) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


def target_runs(document: Document) -> list[list[int]]:
    """The token ids of each maximal run of training targets."""
    runs, current = [], []
    for token, trained in zip(document.tokens.tolist(), document.loss_mask.tolist(), strict=True):
        if trained:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    return [*runs, current] if current else runs


def decode(tok_dir: Path, ids: list[int]) -> str:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tok_dir / "tokenizer.json")).decode(
        ids, skip_special_tokens=False
    )


def test_chat_targets_are_exactly_the_assistant_turns_llama3(tmp_path, llama3_dir):
    cfg = DataConfig(
        path=write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATION}]),
        format="chat",
        tokenizer=str(llama3_dir),
    )
    [document], bad = read_documents(cfg, build_tokenizer(cfg.tokenizer, 512))
    assert bad == 0
    replies = [decode(llama3_dir, run) for run in target_runs(document)]
    # The template trims the content and closes the turn with <|eot_id|>: both are the reply.
    assert replies == [
        "And God said, Let there be light.<|eot_id|>",
        "And there was light.<|eot_id|>",
    ]
    untrained = decode(llama3_dir, document.tokens[~document.loss_mask].tolist())
    assert untrained.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>")
    assert "Who made the light?" in untrained and "And then?" in untrained
    assert untrained.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_chat_targets_are_exactly_the_assistant_turns_mistral(tmp_path, mistral_dir):
    cfg = DataConfig(
        path=write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATION[1:]}]),
        format="chat",
        tokenizer=str(mistral_dir),
    )
    [document], _ = read_documents(cfg, build_tokenizer(cfg.tokenizer, 512))
    replies = [decode(mistral_dir, run) for run in target_runs(document)]
    # No trimming in this template: the reply as written, closed by </s>. (The decoder drops
    # the leading space metaspace tokens carry.)
    assert [r.strip() for r in replies] == [
        "And God said, Let there be light.  </s>",
        "And there was light.</s>",
    ]
    assert document.tokens[0] == build_tokenizer(str(mistral_dir), 512).bos_id


def test_prompt_completion_targets_are_the_completion_and_end_of_text(tmp_path, llama3_dir):
    records = [{"question": "In the beginning", "answer": " God created the heaven."}]
    cfg = DataConfig(
        path=write_jsonl(tmp_path / "pc.jsonl", records),
        format="prompt_completion",
        prompt_field="question",
        completion_field="answer",
        tokenizer=str(llama3_dir),
    )
    tokenizer = build_tokenizer(cfg.tokenizer, 512)
    [document], _ = read_documents(cfg, tokenizer)
    assert document.tokens[0] == tokenizer.bos_id  # <|begin_of_text|> opens it
    [completion] = target_runs(document)
    assert decode(llama3_dir, completion) == " God created the heaven.<|eot_id|>"
    untrained = decode(llama3_dir, document.tokens[~document.loss_mask].tolist())
    assert untrained == "<|begin_of_text|>In the beginning"


def test_byte_tokenizer_prompt_completion(tmp_path):
    cfg = DataConfig(
        path=write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "ab", "completion": "cd"}]),
        format="prompt_completion",
    )
    [document], _ = read_documents(cfg, build_tokenizer("byte", 257))
    assert document.tokens.tolist() == [97, 98, 99, 100, 256]
    assert document.loss_mask.tolist() == [False, False, True, True, True]


def test_packing_isolates_documents():
    # Two documents of 5 and 6 tokens; the second's first two tokens are its prompt.
    tokens = torch.arange(100, 111)
    mask = torch.tensor([False, True, True, True, True, False, False, True, True, True, True])
    stream = TokenStream(tokens, mask, torch.tensor([0, 5]), isolate_documents=True)
    batch = PackedSequences(stream, seq_len=4).batch(torch.tensor([0, 1]))
    assert batch.inputs.tolist() == [[100, 101, 102, 103], [104, 105, 106, 107]]
    x = IGNORE_INDEX
    # Row 1: 104 (doc A's last) -> 105 is doc B's first token: never a target across documents.
    assert batch.labels.tolist() == [[101, 102, 103, 104], [x, x, 107, 108]]
    assert batch.documents.tolist() == [[0, 0, 0, 0], [0, 1, 1, 1]]
    # Positions restart per document, and at the window for a document it cuts.
    assert batch.positions.tolist() == [[0, 1, 2, 3], [0, 0, 1, 2]]


def test_text_format_batches_stay_plain():
    stream = TokenStream(torch.arange(9), None, torch.tensor([0, 4]), isolate_documents=False)
    batch = PackedSequences(stream, seq_len=4).batch(torch.tensor([0, 1]))
    assert batch.labels.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert batch.positions is None and batch.documents is None and batch.every_label


BAD_CHAT = [
    "not json",
    {"messages": "hello"},
    {"messages": [{"role": "user", "content": 3}]},
    {"messages": [{"role": "user", "content": "only a question"}]},
]


def test_malformed_chat_records_count_against_the_limit(tmp_path, mistral_dir):
    good = {"messages": CONVERSATION[1:3]}
    # Mistral's template refuses a system turn: its raise_exception makes the record malformed.
    refused = {"messages": CONVERSATION[:3]}
    path = write_jsonl(tmp_path / "chat.jsonl", [good] * 15 + [refused, *BAD_CHAT])
    tokenizer = build_tokenizer(str(mistral_dir), 512)
    cfg = DataConfig(path=path, format="chat", tokenizer=str(mistral_dir), max_bad_fraction=0.25)
    documents, bad = read_documents(cfg, tokenizer)
    assert (len(documents), bad) == (15, 5)
    cfg.max_bad_fraction = 0.2
    with pytest.raises(ConfigError) as error:
        read_documents(cfg, tokenizer)
    message = str(error.value)
    assert message.startswith("data.path: 5 of 20 lines (25.0%) of ")
    assert (
        "(first: line 16: the chat template refused it: Conversation roles must alternate"
        in message
    )
    assert message.endswith("data.max_bad_fraction allows 0.2") and "\n" not in message


def test_malformed_prompt_completion_records(tmp_path):
    records = [{"prompt": "a", "completion": "b"}] * 3 + [{"prompt": "a"}, {"completion": "b"}]
    cfg = DataConfig(path=write_jsonl(tmp_path / "pc.jsonl", records), format="prompt_completion")
    with pytest.raises(ConfigError, match=r"2 of 5 lines .* string 'prompt' and 'completion' "):
        read_documents(cfg, build_tokenizer("byte", 257))


def test_chat_needs_a_tokenizer_with_a_template(tmp_path):
    cfg = DataConfig(path=write_jsonl(tmp_path / "c.jsonl", [{"messages": []}]), format="chat")
    with pytest.raises(ConfigError, match=r"^data.format: chat renders .* data.tokenizer='byte'"):
        read_documents(cfg, build_tokenizer("byte", 257))
