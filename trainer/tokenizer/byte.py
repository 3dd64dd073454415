"""The built-in tokenizer: token = byte value, 256 ends a document. Nothing to download."""

from __future__ import annotations

import torch


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
