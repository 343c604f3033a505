"""The learned part of the task classifier: a linear model over word n-grams, pure Python.

A prompt becomes a set of features (lower-cased words in any script, Chinese, Japanese
and Korean as characters and character pairs, single digits and punctuation marks;
optionally word stems, the length, pairs of neighbouring tokens; the first and last few
tokens marked as such; numbering and ids at the ends left out); each known feature carries
one weight per class, and the class scores are the
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
# ``unicode``: words in any script (Latin with its accents, Cyrillic, Greek ...); a run of
# Chinese, Japanese or Korean characters, which no spaces split into words, is read as
# its characters and their neighbouring pairs; digits and marks one by one
# the marks a real prompt carries at its ends that say nothing of its task: "Q3:", "1.",
# "(#2)", "[12]" before it; "(#1)", "#5", "[id: 4821]", "(ref 2024-117)" after it
_NOISE_HEAD = re.compile(
    r"^\W{0,2}(?:(?:q|task|question|prompt|item|no\.?|#)\s*\d{1,6}\s*[:.)\]-]|\(#?\d{1,6}\)"
    r"|\[\d{1,6}(?:/\d{1,6})?\]|\d{1,3}[.)](?=\s))\s*",
    re.IGNORECASE,
)
_NOISE_TAIL = re.compile(
    r"\s(?:\(#?\d{1,6}\)|#\d{1,6}|\[[\w :/#.-]{1,24}\]|\((?:ref|id|v)\b[\w .:#/-]{0,20}\)"
    r"|--? ?ticket \d{1,8})\W{0,3}$",
    re.IGNORECASE,
)
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_UTOKEN = re.compile(rf"[a-z\u00c0-\u024f]+|[{_CJK}]+|[^\W\d_{_CJK}]+|\S")


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """How a text becomes features; saved with the weights, used by trainer and gateway."""

    scan_chars: int = 2048  # a longer text is read as its first and last scan_chars/2
    bigrams: bool = True  # pairs of neighbouring tokens too
    edge: int = 0  # the first and last ``edge`` tokens also as ``^tok`` / ``$tok``
    unicode: bool = False  # words in every script, CJK as characters and pairs (_UTOKEN)
    prefix: int = 0  # a longer word also as its first ``prefix`` letters, ``~pref``: a stem
    denoise: bool = False  # leave out the numbering and ids at the text's ends (_NOISE_*)
    length: bool = False  # the text's length as a feature, ``#len:b`` (b: its bit length)

    def of(self, text: str) -> set[str]:
        """The features of ``text``. The edge marks say where the instruction usually is:
        before or after a pasted text."""
        scan = self.scan_chars
        size = len(text)
        if size > scan:
            text = text[: scan // 2] + "\n" + text[-scan // 2 :]
        if self.denoise:
            text = _denoise(text)
        low = text.lower()
        if self.unicode and not low.isascii():
            toks, out = self._unicode(low)
        else:  # ASCII: _TOKEN and _UTOKEN find the same tokens, _TOKEN faster
            toks = _TOKEN.findall(low)
            out = set(toks)
            pre = self.prefix
            if pre:
                out.update(["~" + t[:pre] for t in out if len(t) > pre])
        if self.length:
            out.add(f"#len:{min(size.bit_length(), 14)}")
        if self.bigrams and len(toks) > 1:
            out.update(map(" ".join, pairwise(toks)))
        edge = self.edge
        if edge and len(toks) > edge:
            out.update(["^" + t for t in toks[:edge]])
            out.update(["$" + t for t in toks[-edge:]])
        return out

    def _unicode(self, text: str) -> tuple[list[str], set[str]]:
        """Tokens and features of a lower-cased text with letters outside ASCII."""
        toks: list[str] = []
        extra: list[str] = []
        pre = self.prefix
        for t in _UTOKEN.findall(text):
            if len(t) > 1 and t[0] >= "\u3040" and _CJK_RUN.match(t):
                toks.extend(t)
                extra.extend(map("".join, pairwise(t)))
            else:
                toks.append(t)
                if pre and len(t) > pre:
                    extra.append("~" + t[:pre])
        out = set(toks)
        out.update(extra)
        return toks, out


_CJK_RUN = re.compile(rf"[{_CJK}]")
_NOISE_SPAN = 48  # the numbering and ids sit within this many characters of an end


def _denoise(text: str) -> str:
    """``text`` without the numbering before it and the id after it (_NOISE_HEAD/_TAIL)."""
    text = text.strip()
    m = _NOISE_HEAD.match(text[:_NOISE_SPAN])
    if m:
        text = text[m.end() :]
    tail = text[-_NOISE_SPAN:]
    m = _NOISE_TAIL.search(tail)
    if m:
        text = text[: len(text) - len(tail) + m.start()]
    return text


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
        """The model in ``path``; OSError if unreadable, ValueError if it is not a model."""
        raw = path.read_bytes()
        try:
            data = orjson.loads(raw)
            model = cls(
                tuple(data["labels"]),
                tuple(data["bias"]),
                {f: tuple(w) for f, w in data["weights"].items()},
                FeatureSpec(**data["spec"]),
            )
            _check_shape(model)
            model.predict("a trial prompt: the spec usable")
        except (ValueError, KeyError, TypeError, AttributeError, re.error) as e:
            what = "not a model `python -m evals classify --train` writes"
            raise ValueError(f"{what} ({e!r})") from e
        return model

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


def _check_shape(m: TextModel) -> None:
    """Unique text labels, and numbers wherever a weight is (a row is read only when its
    feature occurs, so one trial prompt does not see them all)."""
    if not m.labels or not all(isinstance(x, str) for x in m.labels):
        raise ValueError("labels must be a non-empty list of strings")
    if len(set(m.labels)) != len(m.labels):
        raise ValueError("labels must be unique")
    number = (int, float)
    rows = (m.bias, *m.weights.values())
    if not all(type(x) in number for row in rows for x in row):  # bool is not a weight
        raise ValueError("the bias and every weight must be numbers")


class ModelFiles:
    """Models read from their files, each read again only when its file changed (its mtime
    or size). Every rules change builds a classifier, and reading the weights takes ~20 ms:
    the gateway checks a new version's model in the rules' worker thread, so the event
    loop then finds it here."""

    def __init__(self) -> None:
        self._loaded: dict[Path, tuple[tuple[int, int], TextModel]] = {}

    def get(self, path: Path = MODEL_PATH) -> TextModel:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        hit = self._loaded.get(path)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        model = TextModel.load(path)
        if len(self._loaded) >= 4:  # the running model and the latest checked: a few paths
            del self._loaded[next(iter(self._loaded))]
        self._loaded[path] = (stamp, model)
        return model
