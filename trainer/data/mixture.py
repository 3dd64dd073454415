"""Which source global sample g comes from, as a pure function of g.

The weights become whole counts per period of `PERIOD` samples (largest remainder, every
source at least one), laid out by smooth weighted round-robin, so any stretch of samples holds
each source close to its weight. Sample g is pattern[g % P] of source k, and its index within
k is (g // P) * count_k + (how often k came earlier in the pattern): no state, so resume and
N -> M hand-over are exact, and the samples (hence tokens) each source has given before any
point are a formula, not a counter.
"""

from __future__ import annotations

import numpy as np

PERIOD = 10_000


class MixtureSchedule:
    def __init__(self, weights: list[float]):
        total = float(sum(weights))
        period = 1 if len(weights) == 1 else PERIOD
        exact = [w / total * period for w in weights]
        counts = [max(1, int(x)) for x in exact]
        by_remainder = sorted(range(len(weights)), key=lambda k: int(exact[k]) - exact[k])
        for k in by_remainder[: max(0, period - sum(counts))]:
            counts[k] += 1
        self.counts = np.array(counts, dtype=np.int64)
        self.period = int(self.counts.sum())
        pattern, current = [], np.zeros(len(counts), dtype=np.int64)
        for _ in range(self.period):
            current += self.counts
            pick = int(np.argmax(current))
            current[pick] -= self.period
            pattern.append(pick)
        self.pattern = np.array(pattern, dtype=np.int64)
        # before[k, p]: samples of source k among pattern[:p]
        hits = self.pattern[None, :] == np.arange(len(counts))[:, None]
        self.before = np.concatenate(
            [np.zeros((len(counts), 1), dtype=np.int64), hits.cumsum(1)], axis=1
        )

    def locate(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, index within the source) of global samples."""
        cycle, phase = np.divmod(np.asarray(samples, dtype=np.int64), self.period)
        source = self.pattern[phase]
        return source, cycle * self.counts[source] + self.before[source, phase]

    def samples_before(self, n: int) -> list[int]:
        """Samples each source gave to global samples [0, n)."""
        cycle, phase = divmod(n, self.period)
        return (cycle * self.counts + self.before[:, phase]).tolist()
