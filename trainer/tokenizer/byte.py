"""The built-in tokenizer: token = byte value, 256 ends a document. Nothing to download.

An export writes it as a Hugging Face `tokenizer.json` (`hf_files`), so that transformers,
lm-evaluation-harness and vLLM load a byte-tokenizer run like any other model.
"""

from __future__ import annotations

import json

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

EOS_TOKEN = "<|endoftext|>"
"""Token 256's text in the exported tokenizer (GPT-2's name for end-of-text)."""


class ByteTokenizer:
    vocab_size = 257
    bos_id = None
    eos_id = 256
    pad_id = None
    prefix_ids: list[int] = []  # noqa: RUF012 (read-only class constant)
    chat_template = None
    special_tokens: dict[str, str] = {}  # noqa: RUF012 (read-only class constant)
    fingerprint = "byte-v1"
    """What a prepared dataset records to prove it was tokenized by this tokenizer."""

    def encode(self, text: str) -> torch.Tensor:
        data = bytearray(text.encode("utf-8"))
        if not data:
            return torch.empty(0, dtype=torch.int64)
        return torch.frombuffer(data, dtype=torch.uint8).to(torch.int64)

    def encode_document(self, text: str) -> torch.Tensor:
        data = bytearray(text.encode("utf-8"))
        out = torch.empty(len(data) + 1, dtype=torch.int64)
        if data:
            out[:-1] = torch.frombuffer(data, dtype=torch.uint8)
        out[-1] = self.eos_id
        return out

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        ids, offsets = [], []
        for index, char in enumerate(text):
            for byte in char.encode("utf-8"):
                ids.append(byte)
                offsets.append((index, index + 1))
        return ids, offsets


def _byte_chars() -> list[str]:
    """The printable character standing for each byte value in a byte-level BPE vocabulary:
    the mapping the `tokenizers` ByteLevel pre-tokenizer applies (GPT-2's `bytes_to_unicode`,
    openai/gpt-2 encoder.py): printable Latin-1 bytes stand for themselves, the rest are
    shifted to 256 and up."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars, shift = {}, 0
    for byte in range(256):
        if byte in kept:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + shift)
            shift += 1
    return [chars[byte] for byte in range(256)]


def hf_files(max_length: int) -> dict[str, str]:
    """`tokenizer.json` and `tokenizer_config.json` giving exactly ByteTokenizer's ids: a
    byte-level BPE without merges (id = byte value) and `<|endoftext|>` as 256."""
    vocab = {char: byte for byte, char in enumerate(_byte_chars())}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([EOS_TOKEN])
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS_TOKEN,
        "bos_token": None,
        "unk_token": None,
        "pad_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
    }
    return {
        "tokenizer.json": tokenizer.to_str(pretty=True) + "\n",
        "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
    }
