"""The statistics a rollout is judged by: pure functions of counts.

* :func:`z_test` — is the canary's rate of an event (a fallback, a check failure) higher
  than the baseline's? One-sided pooled two-proportion z-test: ``z = (p_c - p_b) / se``,
  ``se = sqrt(p (1 - p) (1/n_b + 1/n_c))`` with ``p`` the pooled rate; the p-value is the
  normal tail above ``z``. Sound once each arm has some tens of requests (the analysis's
  ``min_samples`` is at least 10).
* :func:`fisher_test` — the same question answered exactly: the hypergeometric tail
  ``P(X >= x_c)`` of the canary's events given both arms' totals (one-sided Fisher).
* :func:`mann_whitney` — are the canary's latencies stochastically larger? One-sided
  Mann-Whitney U on two histograms over the same bins (:data:`BIN_EDGES`): a bin is a
  tie, counted half, with the ties' correction of the variance and a continuity
  correction; normal approximation.
* :func:`quantile` — a percentile of a histogram, interpolated geometrically in its bin
  (bins are :data:`BIN_RATIO` wide: 9 %).

A p-value of 1.0 means no evidence at all (no events on either arm, no spread).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

BIN_FIRST_S = 0.001  # bin 0 holds latencies under 1 ms
BIN_RATIO = 2 ** (1 / 8)  # each bin 9 % wider than the last
BINS = 160  # up to ~1,000 s; the last bin holds everything longer
BIN_EDGES: tuple[float, ...] = tuple(BIN_FIRST_S * BIN_RATIO**i for i in range(BINS - 1))
_LOG_RATIO = math.log(BIN_RATIO)


def normal_tail(z: float) -> float:
    """``P(Z >= z)`` for a standard normal ``Z``."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def z_test(x_b: int, n_b: int, x_c: int, n_c: int) -> float:
    """One-sided p-value that the canary's rate ``x_c/n_c`` exceeds the baseline's ``x_b/n_b``."""
    if n_b <= 0 or n_c <= 0:
        return 1.0
    pooled = (x_b + x_c) / (n_b + n_c)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_b + 1 / n_c))
    if se == 0:
        return 1.0  # no events on either arm, or nothing but events: no difference to see
    return normal_tail((x_c / n_c - x_b / n_b) / se)


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_test(x_b: int, n_b: int, x_c: int, n_c: int) -> float:
    """One-sided exact p-value of the same question as :func:`z_test`: the chance that the
    canary gets ``x_c`` or more of the ``x_b + x_c`` events when both arms are alike."""
    if n_b <= 0 or n_c <= 0:
        return 1.0
    n, events = n_b + n_c, x_b + x_c
    top = min(events, n_c)
    if events == 0 or events == n or x_c > top:
        return 1.0
    log_all = _log_choose(n, n_c)
    total, peak = 0.0, 0.0
    for k in range(x_c, top + 1):
        p = math.exp(_log_choose(events, k) + _log_choose(n - events, n_c - k) - log_all)
        total += p
        peak = max(peak, p)
        if p < peak * 1e-12:  # past the mode the terms only fall: the rest adds nothing
            break
    return min(1.0, total)


RATE_TESTS: Mapping[str, Callable[[int, int, int, int], float]] = MappingProxyType(
    {"two-proportion-z": z_test, "fisher-exact": fisher_test}
)


def latency_bin(seconds: float) -> int:
    """The histogram bin of a latency (see :data:`BIN_EDGES`)."""
    if seconds < BIN_FIRST_S:
        return 0
    return min(BINS - 1, int(math.log(seconds / BIN_FIRST_S) / _LOG_RATIO) + 1)


def quantile(bins: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a latency histogram, in seconds; None when it is empty."""
    n = sum(bins)
    if n == 0:
        return None
    rank = q * n
    seen = 0
    for i, count in enumerate(bins):
        if count and seen + count >= rank:
            low = BIN_FIRST_S / BIN_RATIO if i == 0 else BIN_EDGES[i - 1]
            frac = max(0.0, min(1.0, (rank - seen) / count))
            return float(low * BIN_RATIO**frac)
        seen += count
    return float(BIN_EDGES[-1])


def mann_whitney(base: Sequence[int], canary: Sequence[int]) -> float:
    """One-sided p-value that the canary's latencies are stochastically larger than the
    baseline's, from two histograms over the same bins."""
    n_b, n_c = sum(base), sum(canary)
    n = n_b + n_c
    if n_b == 0 or n_c == 0 or n < 2:
        return 1.0
    u = 0.0  # pairs (baseline, canary) where the canary is slower; a tie counts half
    below = 0
    ties = 0.0
    for b, c in zip(base, canary, strict=True):
        u += c * (below + 0.5 * b)
        below += b
        t = b + c
        ties += t**3 - t
    var = n_b * n_c / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0  # every latency in one bin: nothing to tell them apart
    mean = n_b * n_c / 2
    return normal_tail((u - mean - 0.5) / math.sqrt(var))
