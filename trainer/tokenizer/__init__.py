"""Tokenizers: UTF-8 bytes (built in) or a Hugging Face tokenizer directory.

Every tokenizer frames a document the way its model was trained to see one: the special tokens
its own files put before it (Llama 3: `<|begin_of_text|>`), then the text, then its end-of-text
token. Which tokens those are is read from the tokenizer's files, never guessed from the
vocabulary size.
"""

from __future__ import annotations

from typing import Protocol

import torch

from trainer.errors import ConfigError
from trainer.tokenizer.byte import ByteTokenizer
from trainer.tokenizer.hugging_face import HuggingFaceTokenizer


class Tokenizer(Protocol):
    vocab_size: int
    bos_id: int | None
    """Beginning-of-sequence token, if the tokenizer has one."""
    eos_id: int
    """End-of-text token: closes every document."""
    pad_id: int | None
    """Padding token from the tokenizer config, if any (packing itself never pads)."""
    prefix_ids: list[int]
    """Special tokens that open a document (what the tokenizer's post-processor adds)."""
    chat_template: str | None
    """The tokenizer's own Jinja chat template, if it ships one."""
    special_tokens: dict[str, str]
    """`bos_token`, `eos_token`, ... as text: the names chat templates refer to."""
    fingerprint: str
    """Identifies the ids this tokenizer produces (a hash of its files): a prepared dataset
    records it, and a run refuses shards written by another tokenizer."""

    def encode(self, text: str) -> torch.Tensor:
        """Token ids of `text` alone, no special tokens added (int64)."""
        ...

    def encode_document(self, text: str) -> torch.Tensor:
        """Token ids of one whole document: prefix, text, end-of-text (int64)."""
        ...

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids of `text` (no special tokens added) and each token's character span."""
        ...


def build_tokenizer(name: str, model_vocab_size: int, eos_token: str | None = None) -> Tokenizer:
    if name == "byte":
        tokenizer: Tokenizer = ByteTokenizer()
        if eos_token is not None:
            raise ConfigError(
                "data.eos_token: the byte tokenizer's end-of-text is its token 256; "
                "allowed: null with data.tokenizer=byte"
            )
    else:
        tokenizer = HuggingFaceTokenizer(name, eos_token=eos_token)
    if tokenizer.vocab_size > model_vocab_size:
        raise ConfigError(
            f"data.tokenizer: {name!r} has {tokenizer.vocab_size} tokens but the model's "
            f"vocabulary holds {model_vocab_size}; set model.vocab_size >= {tokenizer.vocab_size}"
        )
    return tokenizer


__all__ = ["ByteTokenizer", "Tokenizer", "build_tokenizer"]
