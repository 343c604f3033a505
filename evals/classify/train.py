"""Training of the task classifier's linear model (``python -m evals classify --train``).

Multinomial logistic regression with L2, full-batch gradient descent (Adam) on the
``train`` rows of ``evals/data/classify_set.jsonl`` only, over the exact features the
gateway computes at run time (:func:`gateway.routing.textmodel.features`). numpy is used
here, at training time only; the gateway reads the weights in pure Python. The run is
deterministic: weights start at zero, the data order is fixed by ``--seed``.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from gateway.routing.textmodel import FeatureSpec, TextModel

LABELS = ("chat", "code", "extraction", "reasoning", "summarization")


def _matrix(
    texts: Sequence[str], vocab: dict[str, int], spec: FeatureSpec
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for i, t in enumerate(texts):
        feats = spec.of(t)
        inv = 1.0 / np.sqrt(max(len(feats), 1))
        for f in feats:
            j = vocab.get(f)
            if j is not None:
                rows.append(i)
                cols.append(j)
                vals.append(inv)
    return np.array(rows), np.array(cols), np.array(vals)


def train(
    rows: Sequence[dict[str, Any]],
    seed: int = 14,
    epochs: int = 150,
    l2: float = 0.0,
    spec: FeatureSpec | None = None,
    min_count: int = 1,
    balance: float = 1.0,
) -> TextModel:
    """A :class:`TextModel` fitted on ``rows`` (``text`` and ``task`` in ``LABELS``)."""
    spec = spec or FeatureSpec()
    data = [r for r in rows if r["task"] in LABELS]
    random.Random(seed).shuffle(data)
    texts = [r["text"] for r in data]
    y = np.array([LABELS.index(r["task"]) for r in data])
    counts: Counter[str] = Counter()
    for t in texts:
        counts.update(spec.of(t))
    names = sorted(f for f, c in counts.items() if c >= min_count)
    vocab = {f: j for j, f in enumerate(names)}
    r, c, v = _matrix(texts, vocab, spec)
    n, d, k = len(texts), len(names), len(LABELS)
    onehot = np.eye(k)[y]
    # each class weighs the same in the loss, however many prompts it has: no class wins
    # an unfamiliar prompt just by being the most common one in the corpus
    share = np.bincount(y, minlength=k) / n
    sample_w = ((1.0 / (k * share)) ** balance)[y][:, None]
    w, b = np.zeros((d, k)), np.zeros(k)
    mw, vw, mb, vb = np.zeros((d, k)), np.zeros((d, k)), np.zeros(k), np.zeros(k)
    lr, b1, b2, eps = 0.05, 0.9, 0.999, 1e-8
    for step in range(1, epochs + 1):
        z = np.zeros((n, k))
        for j in range(k):
            z[:, j] = np.bincount(r, weights=v * w[c, j], minlength=n)
        z += b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        g = (p - onehot) * sample_w / n
        gw = np.zeros((d, k))
        for j in range(k):
            gw[:, j] = np.bincount(c, weights=v * g[r, j], minlength=d)
        gw += l2 * w
        gb = g.sum(axis=0)
        for param, grad, m, s in ((w, gw, mw, vw), (b, gb, mb, vb)):
            m *= b1
            m += (1 - b1) * grad
            s *= b2
            s += (1 - b2) * grad * grad
            param -= lr * (m / (1 - b1**step)) / (np.sqrt(s / (1 - b2**step)) + eps)
    return _prune(names, w, b, spec)


def _prune(names: list[str], w: np.ndarray, b: np.ndarray, spec: FeatureSpec) -> TextModel:
    """Rounded weights; features whose weights are all tiny are dropped (a smaller file)."""
    keep = np.abs(w).max(axis=1) >= 0.02
    weights = {f: tuple(round(float(x), 2) for x in w[j]) for j, f in enumerate(names) if keep[j]}
    return TextModel(LABELS, tuple(round(float(x), 4) for x in b), weights, spec)
