"""The data order is a function of the seed and the global sample index only: ranks read
disjoint rows, every sequence once per epoch, and 2 ranks read what 1 rank with 2 micro batches
reads — which is what lets a checkpoint of N ranks continue on M."""

from __future__ import annotations

import torch

from trainer.data import PackedSequences, TokenStream, TrainBatches

SEQ_LEN = 4


def stream(sequences: int) -> PackedSequences:
    # Token i*SEQ_LEN is the first token of sequence i: rows identify their sequence.
    tokens = torch.arange(sequences * SEQ_LEN + 1)
    return PackedSequences(TokenStream(tokens, None, torch.tensor([0]), False), SEQ_LEN)


def first_tokens(batches) -> list[int]:
    return [int(row[0]) // SEQ_LEN for batch in batches for row in batch.inputs]


def test_packing_pairs_inputs_with_next_token_targets():
    batch = stream(5).batch(torch.tensor([0, 3]))
    assert batch.inputs.tolist() == [[0, 1, 2, 3], [12, 13, 14, 15]]
    assert batch.labels.tolist() == [[1, 2, 3, 4], [13, 14, 15, 16]]


def test_ranks_read_disjoint_rows_and_match_one_rank_with_accumulation():
    seqs = stream(40)
    two = [TrainBatches(seqs, seed=7, dp_rank=r, dp_size=2) for r in range(2)]
    one = TrainBatches(seqs, seed=7, dp_rank=0, dp_size=1)
    for step in range(5):
        start = step * 8  # global batch 8 = micro 4 x 2 ranks = micro 4 x accum 2
        per_rank = [first_tokens(b.micro_batches(start, 4, 1)) for b in two]
        assert not set(per_rank[0]) & set(per_rank[1])
        assert sorted(per_rank[0] + per_rank[1]) == sorted(
            first_tokens(one.micro_batches(start, 4, 2))
        )


def test_each_epoch_visits_every_sequence_once_in_a_seeded_order():
    seqs = stream(12)
    reader = TrainBatches(seqs, seed=1, dp_rank=0, dp_size=1)
    epoch0 = first_tokens(reader.micro_batches(0, 12, 1))
    epoch1 = first_tokens(reader.micro_batches(12, 12, 1))
    assert sorted(epoch0) == sorted(epoch1) == list(range(12))
    assert epoch0 != epoch1 and epoch0 != list(range(12))
    again = TrainBatches(seqs, seed=1, dp_rank=0, dp_size=1)  # a restarted process
    assert first_tokens(again.micro_batches(12, 12, 1)) == epoch1
    other_seed = TrainBatches(seqs, seed=2, dp_rank=0, dp_size=1)
    assert first_tokens(other_seed.micro_batches(0, 12, 1)) != epoch0
