"""Documents back to back in one token stream, cut into fixed-length training sequences.

A `TokenStream` is three arrays — tokens, which of them are training targets, where each
document starts — which is all a sequence needs; a reader of pre-tokenized shards can hand the
same three to `PackedSequences`. Window i covers tokens [i*L, i*L + L + 1): inputs and their
next-token targets. Where documents are isolated (instruction data), a window also carries each
token's document and its position within that document (restarting at the window's start for a
document cut by it), so attention stays inside a document and RoPE positions restart, and a
target that belongs to the next document is not trained.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.data.formats import Document

IGNORE_INDEX = -100
"""Label of a token that is not a training target (`F.cross_entropy`'s default ignore_index)."""


@dataclass
class TokenStream:
    tokens: torch.Tensor
    """int64 (N,): every document's tokens, back to back."""
    loss_mask: torch.Tensor | None
    """bool (N,): True where the token is a training target; None: every token is."""
    doc_starts: torch.Tensor
    """int64 (D,): offset of each document's first token, ascending."""
    isolate_documents: bool
    """Documents in one sequence may not attend to each other."""

    @classmethod
    def of(cls, documents: list[Document], *, isolate_documents: bool) -> TokenStream:
        lengths = torch.tensor([len(d.tokens) for d in documents], dtype=torch.int64)
        starts = torch.cumsum(lengths, 0) - lengths
        if not documents:
            return cls(torch.empty(0, dtype=torch.int64), None, starts, isolate_documents)
        tokens = torch.cat([d.tokens for d in documents])
        loss_mask = None
        if any(d.loss_mask is not None for d in documents):
            loss_mask = torch.cat(
                [
                    d.loss_mask
                    if d.loss_mask is not None
                    else torch.ones(len(d.tokens), dtype=bool)
                    for d in documents
                ]
            )
        return cls(tokens, loss_mask, starts, isolate_documents)


@dataclass
class Batch:
    """One micro batch: B sequences of L tokens."""

    inputs: torch.Tensor
    """int64 (B, L)."""
    labels: torch.Tensor
    """int64 (B, L): the next token, or IGNORE_INDEX where it is not a training target."""
    positions: torch.Tensor | None = None
    """int64 (B, L): RoPE position of each token within its document; None: 0..L-1."""
    documents: torch.Tensor | None = None
    """int64 (B, L): document of each token; attention stays within one. None: plain causal."""
    every_label: bool = True
    """No label is IGNORE_INDEX: the step's target count is known without counting."""

    def to(self, device: torch.device) -> Batch:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return Batch(
            self.inputs.to(device, non_blocking=True),
            self.labels.to(device, non_blocking=True),
            move(self.positions),
            move(self.documents),
            self.every_label,
        )


class PackedSequences:
    """Fixed-length windows over a token stream; window i covers tokens [i*L, i*L + L + 1).
    A `SequenceSource` held in memory (the small-JSONL path)."""

    def __init__(self, stream: TokenStream, seq_len: int):
        self.stream, self.seq_len = stream, seq_len
        self.count = max(0, (len(stream.tokens) - 1) // seq_len)

    def prefetch(self, indices: torch.Tensor) -> None:
        pass  # in memory already

    def batch(self, indices: torch.Tensor) -> Batch:
        stream = self.stream
        offsets = indices[:, None] * self.seq_len + torch.arange(self.seq_len + 1)
        window = stream.tokens[offsets]
        inputs, labels = window[:, :-1], window[:, 1:]
        if stream.loss_mask is None and not stream.isolate_documents:
            return Batch(inputs, labels)
        if stream.loss_mask is not None:
            labels = torch.where(stream.loss_mask[offsets[:, 1:]], labels, IGNORE_INDEX)
        if not stream.isolate_documents:
            return Batch(inputs, labels, every_label=False)
        document = torch.searchsorted(stream.doc_starts, offsets, right=True) - 1
        # The first token of the next document is not predicted from this one.
        labels = torch.where(document[:, 1:] == document[:, :-1], labels, IGNORE_INDEX)
        document = document[:, :-1]
        starts = torch.maximum(stream.doc_starts[document], offsets[:, :1])
        positions = offsets[:, :-1] - starts
        return Batch(inputs, labels, positions, document - document[:, :1], every_label=False)
