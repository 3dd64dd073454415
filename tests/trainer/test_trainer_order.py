"""The order needs no permutation in memory: a seeded bijection per index, a mixture schedule
that is a pure function of the sample index, and per-source token counts as a formula."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.data import PackedSequences, TokenStream, TrainBatches
from trainer.data.bijection import Bijection, _mix
from trainer.data.mixture import MixtureSchedule


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 97, 256, 1000, 1024, 4099, 65536, 100_003])
def test_the_order_is_a_bijection_of_every_size(n: int):
    order = Bijection(n, seed=11, epoch=2)(np.arange(n))
    assert np.array_equal(np.sort(order), np.arange(n))
    if n > 16:
        assert not np.array_equal(order, np.arange(n))  # it does shuffle
        assert not np.array_equal(order, Bijection(n, seed=12, epoch=2)(np.arange(n)))
        assert not np.array_equal(order, Bijection(n, seed=11, epoch=3)(np.arange(n)))


def test_an_index_maps_the_same_alone_or_in_a_batch_and_in_another_process_state():
    full = Bijection(10**10, seed=3)(np.arange(50_000, 50_100))
    alone = [int(Bijection(10**10, seed=3)(np.array([i]))[0]) for i in range(50_000, 50_100)]
    assert full.tolist() == alone
    assert full.max() < 10**10
    with pytest.raises(IndexError):
        Bijection(10, seed=0)(np.array([10]))


def test_the_mixture_follows_the_weights_in_every_stretch_and_locates_by_formula():
    schedule = MixtureSchedule([3.0, 1.0, 0.5])
    source, local = schedule.locate(np.arange(90_000))
    counts = np.bincount(source[:9_000], minlength=3)
    assert np.allclose(counts / 9_000, [3 / 4.5, 1 / 4.5, 0.5 / 4.5], atol=2e-3)
    for k in range(3):  # each source's samples are 0, 1, 2, ... in order, nothing skipped
        assert np.array_equal(local[source == k], np.arange((source == k).sum()))
    for n in (0, 1, 17, 9_999, 10_000, 54_321):
        assert schedule.samples_before(n) == np.bincount(source[:n], minlength=3).tolist()


def first_tokens(batches) -> list[int]:
    return [int(row[0]) // 4 for batch in batches for row in batch.inputs]


def stream(sequences: int, offset: int) -> PackedSequences:
    tokens = torch.arange(sequences * 4 + 1) + offset
    return PackedSequences(TokenStream(tokens, None, torch.tensor([0]), False), 4)


def test_a_mixture_hands_over_from_two_ranks_to_one_and_resumes_anywhere():
    sources = [stream(10, 0), stream(7, 1000)]  # the second repeats: its own epochs
    make = lambda rank, size: TrainBatches(  # noqa: E731
        sources, seed=5, dp_rank=rank, dp_size=size, weights=[1.0, 2.0]
    )
    one = make(0, 1)
    two = [make(r, 2) for r in range(2)]
    for step in range(12):
        start = step * 4
        both = first_tokens(two[0].micro_batches(start, 2, 1)) + first_tokens(
            two[1].micro_batches(start, 2, 1)
        )
        assert both == first_tokens(make(0, 1).micro_batches(start, 2, 2))
        assert both == first_tokens(one.micro_batches(start, 2, 2))
    seen = first_tokens(one.micro_batches(0, 48, 1))
    assert sum(t >= 250 for t in seen) == 32  # 2/3 of the samples from the second source
    assert one.tokens_by_source(48, 4) == [16 * 4, 32 * 4]


class Recording(PackedSequences):
    """Remembers every row it was told to prefetch."""

    def __init__(self, *args):
        super().__init__(*args)
        self.hinted: list[int] = []

    def prefetch(self, indices: torch.Tensor) -> None:
        self.hinted += indices.tolist()


def rank1_rows(step: int) -> list[int]:
    """Rank 1 of 2, micro 2 x accumulation 2: its global rows of `step`."""
    return [r for m in range(2) for r in range(step * 8 + m * 4 + 2, step * 8 + m * 4 + 4)]


def test_each_step_hints_the_rows_of_the_next_steps_once():
    from trainer.data.order import PREFETCH_STEPS

    source = Recording(TokenStream(torch.arange(4001), None, torch.tensor([0]), False), 4)
    reader = TrainBatches(source, seed=3, dp_rank=1, dp_size=2)
    resumed = TrainBatches(source, seed=3, dp_rank=1, dp_size=2)
    for step in range(5):
        reader.micro_batches(step * 8, 2, 2)
    hinted, source.hinted = source.hinted, []
    expected = [r for s in range(1, 5 + PREFETCH_STEPS) for r in rank1_rows(s)]
    assert hinted == reader.sequence_ids(torch.tensor(expected)).tolist()
    resumed.micro_batches(3 * 8, 2, 2)  # a new process starting mid-run hints its whole window
    expected = [r for s in range(4, 4 + PREFETCH_STEPS) for r in rank1_rows(s)]
    assert source.hinted == reader.sequence_ids(torch.tensor(expected)).tolist()


def _inverse_feistel(order: Bijection, y: np.ndarray) -> np.ndarray:
    """One backward pass of the network: each round (L, R) -> (R, L ^ F(R)) undone."""
    bits = np.uint64(order.half_bits)
    left, right = y >> bits, y & order.mask
    for key in order.keys[::-1]:
        left, right = right ^ _mix(left, key, order.mask), left
    return (left << bits) | right


def _walk_back(order: Bijection, value: int) -> int | None:
    """The index in [0, n) whose forward walk passes through `value`, or None if its cycle has
    none (a cycle wholly outside [0, n) is never entered)."""
    y = np.array([value], dtype=np.uint64)
    for _ in range(1 << (2 * order.half_bits)):
        y = _inverse_feistel(order, y)
        if int(y[0]) < order.n:
            return int(y[0])
        if int(y[0]) == value:
            return None
    raise AssertionError(f"no cycle closed from {value}")


@pytest.mark.parametrize("seed", [0, 1, 11, 2**31 + 5])
def test_every_size_from_1_to_64_is_a_bijection(seed: int):
    for n in range(1, 65):
        for epoch in (0, 3):
            order = Bijection(n, seed=seed, epoch=epoch)(np.arange(n))
            counts = np.bincount(order, minlength=n)
            assert counts.size == n and (counts == 1).all(), (n, seed, epoch, order.tolist())


def test_large_sampled_sizes_are_bijections():
    sizes = np.random.default_rng(28).integers(65, 300_000, size=6)
    for n in (*sizes.tolist(), 4**9 + 1, 4**9 - 1):
        order = Bijection(n, seed=n % 97)(np.arange(n))
        assert (np.bincount(order, minlength=n) == 1).all(), n


@pytest.mark.parametrize("n", [10**10 + 7, 2**40 + 1, 4**17 - 3])
def test_huge_sizes_are_bijections_without_materializing(n: int):
    """No array of n: distinct samples map to distinct positions in [0, n), each undone by the
    inverse network; and every index whose walk passes through n and just above it (where an
    off-by-one in the walk would stop) lands inside [0, n)."""
    for seed in (5, 6, 7):
        order = Bijection(n, seed=seed)
        samples = np.unique(np.random.default_rng(seed).integers(0, n, size=4096))
        positions = order(samples)
        assert positions.min() >= 0 and positions.max() < n
        assert np.unique(positions).size == samples.size
        assert [_walk_back(order, int(p)) for p in positions[:64]] == samples[:64].tolist()
        top = min(n + 64, 1 << (2 * order.half_bits))
        walkers = {_walk_back(order, v) for v in range(n, top)} - {None}
        assert walkers, "no index walks through n: the check below would be empty"
        for index in walkers:
            position = int(order(np.array([index]))[0])
            assert position < n and _walk_back(order, position) == index, (seed, index, position)
