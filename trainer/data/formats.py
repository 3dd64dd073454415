"""`data.format`: how one JSONL record becomes one tokenized document and which of its tokens
are training targets.

- `text`: `{text_field: str}`; every token is a target (pre-training, today's behaviour).
- `prompt_completion`: `{prompt_field: str, completion_field: str}`; only the completion and
  its end-of-text token are targets.
- `chat`: `{messages_field: [{role, content}, ...]}` rendered with the tokenizer's chat
  template; only the assistant turns (reply + the template's end-of-turn token) are targets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from contract.config import DataConfig
from trainer.data.records import BadRecord, string_field
from trainer.errors import ConfigError
from trainer.tokenizer import Tokenizer
from trainer.tokenizer.chat_template import ChatTemplateError, render_with_assistant_spans

FORMATS = ("text", "prompt_completion", "chat")


@dataclass
class Document:
    tokens: torch.Tensor
    """int64 token ids, the tokenizer's framing (BOS, end-of-text) included."""
    loss_mask: torch.Tensor | None
    """bool, True where the token is a training target; None: every token is."""


@dataclass
class Format:
    extract: Callable[[Any], Document | None]
    """Record -> document; None skips it (an empty text); `BadRecord` marks it malformed."""
    expected: str
    """What a good line is, for the error when too many are not."""
    isolate_documents: bool
    """Packed documents may not attend to each other (instruction data); `text` keeps
    pre-training's plain causal attention across the packed stream."""


def build_format(cfg: DataConfig, tokenizer: Tokenizer) -> Format:
    if cfg.format == "text":
        return Format(
            lambda record: _text(record, cfg.text_field, tokenizer),
            f"JSON objects with a string {cfg.text_field!r} field",
            isolate_documents=False,
        )
    if cfg.format == "prompt_completion":
        return Format(
            lambda record: _prompt_completion(record, cfg, tokenizer),
            f"JSON objects with string {cfg.prompt_field!r} and {cfg.completion_field!r} fields",
            isolate_documents=True,
        )
    if tokenizer.chat_template is None:
        raise ConfigError(
            f"data.format: chat renders conversations with the tokenizer's chat template, and "
            f"data.tokenizer={cfg.tokenizer or 'byte'!r} has none (no chat_template in its "
            "tokenizer_config.json, no chat_template.jinja); allowed: a tokenizer with one, or "
            "data.format=text|prompt_completion"
        )
    return Format(
        lambda record: _chat(record, cfg.messages_field, tokenizer),
        f"JSON objects with a {cfg.messages_field!r} list of {{role, content}} strings the "
        "chat template renders, holding an assistant turn",
        isolate_documents=True,
    )


def _text(record: Any, field: str, tokenizer: Tokenizer) -> Document | None:
    text = string_field(record, field)
    return Document(tokenizer.encode_document(text), None) if text else None


def _prompt_completion(record: Any, cfg: DataConfig, tokenizer: Tokenizer) -> Document:
    prompt = tokenizer.encode(string_field(record, cfg.prompt_field))
    # The completion framed as a document: the opening special tokens, then prompt goes in.
    framed = tokenizer.encode_document(string_field(record, cfg.completion_field))
    opening = len(tokenizer.prefix_ids)
    tokens = torch.cat((framed[:opening], prompt, framed[opening:]))
    loss_mask = torch.ones(len(tokens), dtype=torch.bool)
    loss_mask[: opening + len(prompt)] = False
    return Document(tokens, loss_mask)


def _chat(record: Any, field: str, tokenizer: Tokenizer) -> Document:
    if not isinstance(record, dict):
        raise BadRecord("not a JSON object")
    messages = record.get(field)
    if not isinstance(messages, list) or not messages:
        raise BadRecord(f"no non-empty {field!r} list")
    for message in messages:
        if not (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            raise BadRecord(f"a message of {field!r} is not a {{role, content}} of strings")
    if not any(message["role"] == "assistant" for message in messages):
        raise BadRecord("no assistant turn (nothing to train on)")
    assert tokenizer.chat_template is not None  # checked by build_format
    try:
        text, spans = render_with_assistant_spans(
            tokenizer.chat_template, messages, tokenizer.special_tokens
        )
    except ChatTemplateError as exc:
        raise BadRecord(str(exc)) from None
    ids, offsets = tokenizer.encode_with_offsets(text)
    starts = torch.tensor([start for start, _ in offsets], dtype=torch.int64)
    loss_mask = torch.zeros(len(ids), dtype=torch.bool)
    for begin, end in spans:
        loss_mask |= (starts >= begin) & (starts < end)
    if not loss_mask.any():
        raise BadRecord("the assistant turns render to no tokens")
    return Document(torch.tensor(ids, dtype=torch.int64), loss_mask)
