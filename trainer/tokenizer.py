"""Tokenizers: UTF-8 bytes (built in) or a Hugging Face `tokenizer.json` from a local path."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch

from trainer.errors import ConfigError


class Tokenizer(Protocol):
    vocab_size: int
    eos_id: int

    def encode(self, text: str) -> torch.Tensor: ...


class ByteTokenizer:
    """Token = byte value; 256 is end-of-document. No vocabulary file, nothing to download."""

    vocab_size = 257
    eos_id = 256

    def encode(self, text: str) -> torch.Tensor:
        data = bytearray(text.encode("utf-8"))
        if not data:
            return torch.empty(0, dtype=torch.int64)
        return torch.frombuffer(data, dtype=torch.uint8).to(torch.int64)


class HuggingFaceTokenizer:
    def __init__(self, path: str):
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError:
            raise ConfigError(
                f"data.tokenizer: {path!r} needs the `tokenizers` package; install it or use "
                "data.tokenizer=byte"
            ) from None
        file = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
        if not file.is_file():
            raise ConfigError(
                f"data.tokenizer: {path!r} is neither 'byte' nor a directory holding "
                "tokenizer.json (or the file itself)"
            )
        self._tok = HFTokenizer.from_file(str(file))
        self.vocab_size = self._tok.get_vocab_size()
        eos = next(
            (
                t
                for t in ("<|end_of_text|>", "</s>", "<|endoftext|>")
                if self._tok.token_to_id(t) is not None
            ),
            None,
        )
        self.eos_id = self._tok.token_to_id(eos) if eos else self.vocab_size - 1

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor(self._tok.encode(text, add_special_tokens=False).ids, dtype=torch.int64)


def build_tokenizer(name: str, model_vocab_size: int) -> Tokenizer:
    tokenizer = ByteTokenizer() if name == "byte" else HuggingFaceTokenizer(name)
    if tokenizer.vocab_size > model_vocab_size:
        raise ConfigError(
            f"data.tokenizer: {name!r} has {tokenizer.vocab_size} tokens but the model's "
            f"vocabulary holds {model_vocab_size}; set model.vocab_size >= {tokenizer.vocab_size}"
        )
    return tokenizer
