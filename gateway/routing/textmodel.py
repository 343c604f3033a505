"""The learned part of the task classifier: a linear model over word n-grams, pure Python.

A prompt becomes a set of features (lower-cased words, single digits and punctuation
marks; optionally pairs of neighbouring tokens; the first and last few tokens marked as
such); each known feature carries one weight per class, and the class scores are the
bias plus the sum of the weights of the features present, divided by the square root
of the number of features (a binary, L2-normalised bag of words), then a softmax.
Unknown features cost one dict miss.

Only the head and the tail of a long text are read (``scan_chars``), so a 20 KB prompt
costs about what a 2 KB one does. The weights are a JSON file shipped in the package
(``textmodel.json``), written by ``python -m evals classify --train``; nothing is
fetched at run time. The feature function is the one the trainer uses, so the two
cannot drift apart.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path

import orjson

MODEL_PATH = Path(__file__).with_name("textmodel.json")
# lower-cased ASCII words; every other character (a digit, a mark, a letter outside
# ASCII) on its own: faster than Unicode word classes, and CJK text gets features too
_TOKEN = re.compile(r"[a-z]+|[^\sa-z]")


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """How a text becomes features; saved with the weights, used by trainer and gateway."""

    scan_chars: int = 2048  # a longer text is read as its first and last scan_chars/2
    bigrams: bool = True  # pairs of neighbouring tokens too
    edge: int = 0  # the first and last ``edge`` tokens also as ``^tok`` / ``$tok``

    def of(self, text: str) -> set[str]:
        """The features of ``text``. The edge marks say where the instruction usually is:
        before or after a pasted text."""
        scan = self.scan_chars
        if len(text) > scan:
            text = text[: scan // 2] + "\n" + text[-scan // 2 :]
        toks = _TOKEN.findall(text.lower())
        out = set(toks)
        if self.bigrams and len(toks) > 1:
            out.update(map(" ".join, pairwise(toks)))
        edge = self.edge
        if edge and len(toks) > edge:
            out.update(["^" + t for t in toks[:edge]])
            out.update(["$" + t for t in toks[-edge:]])
        return out


@dataclass(frozen=True, slots=True)
class Prediction:
    """Classes with their probabilities, most likely first."""

    ranked: tuple[tuple[str, float], ...]

    @property
    def label(self) -> str:
        return self.ranked[0][0]

    @property
    def confidence(self) -> float:
        return self.ranked[0][1]


class TextModel:
    """Weights of one trained model; :meth:`predict` is pure and allocation-light."""

    def __init__(
        self,
        labels: tuple[str, ...],
        bias: tuple[float, ...],
        weights: dict[str, tuple[float, ...]],
        spec: FeatureSpec = FeatureSpec(),
    ):
        if len(bias) != len(labels) or any(len(w) != len(labels) for w in weights.values()):
            raise ValueError("every weight row and the bias need one value per label")
        self.labels = labels
        self.bias = bias
        self.weights = weights
        self.spec = spec

    @classmethod
    def load(cls, path: Path = MODEL_PATH) -> TextModel:
        data = orjson.loads(path.read_bytes())
        return cls(
            tuple(data["labels"]),
            tuple(data["bias"]),
            {f: tuple(w) for f, w in data["weights"].items()},
            FeatureSpec(**data["spec"]),
        )

    def dump(self) -> bytes:
        return orjson.dumps(
            {
                "labels": self.labels,
                "bias": self.bias,
                "spec": asdict(self.spec),
                "weights": self.weights,
            },
            option=orjson.OPT_SORT_KEYS,
        )

    def logits(self, text: str) -> list[float]:
        feats = self.spec.of(text)
        rows = [*filter(None, map(self.weights.get, feats))]  # the known features' rows
        if not rows:
            return list(self.bias)
        inv = 1.0 / math.sqrt(len(feats))
        sums = map(sum, zip(*rows, strict=True))
        return [b + s * inv for b, s in zip(self.bias, sums, strict=True)]

    def predict(self, text: str) -> Prediction:
        z = self.logits(text)
        top = max(z)
        exps = [math.exp(v - top) for v in z]
        total = sum(exps)
        ranked = sorted(zip(exps, self.labels, strict=True), reverse=True)
        return Prediction(tuple([(label, e / total) for e, label in ranked]))
