"""A seeded permutation of [0, n) that is computed per index, never materialized.

A balanced Feistel network permutes [0, 4**k) for the smallest 4**k >= n (any round function
gives a bijection); cycle-walking (apply it again while the result is >= n) restricts it to
[0, n) and stays a bijection, with fewer than 4 walks per index on average. So the training
order of a 10-billion-sequence corpus costs no memory, and sample g's sequence depends only on
(seed, epoch, g): resume is exact and N ranks hand over to M.
"""

from __future__ import annotations

import numpy as np

ROUNDS = 6
_MIX = np.uint64(0x9E3779B97F4A7C15)


def _round_keys(seed: int, epoch: int) -> np.ndarray:
    generator = np.random.Generator(np.random.PCG64([seed & 0xFFFFFFFF, epoch, 0x7A11]))
    return generator.integers(0, 2**63, size=ROUNDS, dtype=np.uint64)


def _mix(half: np.ndarray, key: np.uint64, mask: np.uint64) -> np.ndarray:
    """A splitmix64-style finalizer of (half, key), cut to the half's bits."""
    with np.errstate(over="ignore"):
        z = (half + key) * _MIX
        z ^= z >> np.uint64(31)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(29)
    return z & mask


class Bijection:
    """`Bijection(n, seed, epoch)(indices)`: the permuted positions of `indices` in [0, n)."""

    def __init__(self, n: int, seed: int, epoch: int = 0):
        if n < 1:
            raise ValueError(f"a permutation of {n} elements")
        self.n = n
        self.half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
        self.mask = np.uint64((1 << self.half_bits) - 1)
        self.keys = _round_keys(seed, epoch)

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        bits = np.uint64(self.half_bits)
        left, right = x >> bits, x & self.mask
        for key in self.keys:
            left, right = right, left ^ _mix(right, key, self.mask)
        return (left << bits) | right

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        x = np.asarray(indices, dtype=np.uint64)
        if x.size and (int(x.max()) >= self.n):
            raise IndexError(f"index {int(x.max())} outside [0, {self.n})")
        out = self._feistel(x)
        walking = out >= np.uint64(self.n)
        while walking.any():
            out[walking] = self._feistel(out[walking])
            walking = out >= np.uint64(self.n)
        return out.astype(np.int64)
