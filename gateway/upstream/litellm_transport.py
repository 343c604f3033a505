"""Hosted tiers through LiteLLM: another :class:`~gateway.upstream.transport.Transport`.

A tier with ``provider: litellm`` and ``litellm_params`` (written as in a LiteLLM config:
``model: anthropic/...``, ``api_base``, ``api_key: os.environ/NAME`` ...) is served by
:class:`LiteLLMTransport`. It takes the OpenAI request body the dispatcher built, calls
``litellm.acompletion`` (``atext_completion`` for text completions), stream or not, and
hands back OpenAI SSE events (or JSON), so dispatch, checks, hedging, continuation and
fallback work on it unchanged.

LiteLLM's exceptions become the same failure types (:mod:`gateway.upstream.failures`)
as an engine's HTTP answers: 429, 408, 5xx, timeouts and connection errors move on to
the next tier; the request's own faults (400, 413, 422) are relayed to the client as
OpenAI error envelopes. A 401, 403 or 404 is the tier's configuration, not the request
(:class:`TierRefused`): the next tier is tried.

LiteLLM is imported only when a tier uses it (an import takes seconds), with its model
price map read from the copy it ships (no download). Client fields pass through an
allow-list: connection settings (``api_base``, ``api_key`` ...) come from the rules only,
never from a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator
from types import MappingProxyType
from typing import Any

import orjson

from gateway.settings import env_reference, litellm_offline
from gateway.upstream.failures import (
    AnswerTimeout,
    AttemptFailed,
    ClientRejected,
    ProviderError,
    Stall,
    StreamCut,
    TierMisconfigured,
    TierRefused,
    status_error,
)
from gateway.upstream.transport import MAX_ERROR_BODY, Timeouts, UpstreamStream, short

log = logging.getLogger("gateway.upstream.litellm")

_ENV_PREFIX = "os.environ/"
# OpenAI request fields a hosted call takes from the client; everything else is dropped
_CLIENT_FIELDS = frozenset(
    (
        "messages",
        "prompt",
        "suffix",
        "echo",
        "temperature",
        "top_p",
        "n",
        "stop",
        "max_tokens",
        "max_completion_tokens",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "user",
        "response_format",
        "seed",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "stream_options",
        "reasoning_effort",
    )
)
_TOP = ("id", "object", "created", "model", "system_fingerprint")
_MESSAGE = ("role", "content", "tool_calls", "reasoning_content", "refusal")
_USAGE = ("prompt_tokens", "completion_tokens", "total_tokens")
_TIER_FAULT = frozenset((401, 403, 404))  # the tier's key or model is wrong, not the request
_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
_RELAYED_TYPE = MappingProxyType({413: "request_too_large"})


def load_litellm() -> Any:
    """The litellm module, imported on first use, offline, and quiet: no help banner on
    stdout for every exception, no INFO line of its own for every call (its log handler
    writing to stderr beside ours tripled its added latency), no tokenizer downloads."""
    litellm_offline()
    mod: Any = importlib.import_module("litellm")
    mod.suppress_debug_info = True
    mod.disable_hf_tokenizer_download = True
    for name in _LITELLM_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return mod


def resolve_params(params: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``os.environ/NAME`` values replaced by the variable's value; the names not set."""
    out: dict[str, Any] = {}
    missing: list[str] = []
    for key, value in params.items():
        if isinstance(value, str) and value.startswith(_ENV_PREFIX):
            name = value[len(_ENV_PREFIX) :]
            value = env_reference(name)
            if value is None:
                missing.append(name)
                continue
        out[key] = value
    return out, missing


class LiteLLMTransport:
    """Calls a hosted model through LiteLLM's async API; never retries on its own."""

    def __init__(self, params: dict[str, Any]):
        self._litellm = load_litellm()
        self._params, self._missing = resolve_params(params)
        self._params.update(num_retries=0, max_retries=0)  # the dispatcher is the retry layer
        self.model = str(params["model"])
        if self._missing:
            log.warning("litellm tier %s: %s not set", self.model, ", ".join(self._missing))
        info = self._info()
        self.prefill = bool(info.get("supports_assistant_prefill"))
        cost_in, cost_out = info.get("input_cost_per_token"), info.get("output_cost_per_token")
        self.price: tuple[float, float] | None = None
        # LiteLLM answers a model it has not mapped with its provider's defaults, price 0
        if isinstance(cost_in, int | float) and isinstance(cost_out, int | float):
            self.price = (float(cost_in), float(cost_out)) if cost_in or cost_out else None
        window = info.get("max_input_tokens")  # the context window, where the map knows it
        self.window = window if isinstance(window, int) and window > 0 else None

    def _info(self) -> dict[str, Any]:
        """What LiteLLM's model map knows of this model (empty when it knows nothing)."""
        try:
            return dict(self._litellm.get_model_info(self.model))
        except Exception:  # LiteLLM raises a bare Exception for a model it has not mapped
            return {}

    async def open(
        self, url: str, body: bytes, limits: Timeouts, stream: bool = True
    ) -> UpstreamStream:
        if self._missing:
            raise TierMisconfigured(f"environment variable {self._missing[0]} is not set")
        req = orjson.loads(body)
        kwargs = {k: v for k, v in req.items() if k in _CLIENT_FIELDS}
        kwargs.update(self._params, stream=stream, timeout=limits.total)
        trimmed = _trim_prefill(kwargs)
        call = (
            self._litellm.atext_completion
            if url.endswith("/v1/completions")
            else self._litellm.acompletion
        )
        try:
            resp = await call(**kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise as_attempt_error(e) from None
        if not stream:
            return _Answer(orjson.dumps(clean(resp.model_dump())))
        return _HostedStream(resp, limits.read_gap, trimmed)

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        return 200, b""  # nothing to probe: the provider's health is its answers

    async def close(self) -> None:
        return None


def _trim_prefill(kwargs: dict[str, Any]) -> bool:
    """A trailing assistant message (a continuation's prefill) without its trailing
    whitespace, which providers refuse (Anthropic: 400) and LiteLLM strips anyway. True
    when some was cut: the model then starts its continuation with it, once too many."""
    msgs = kwargs.get("messages")
    if not isinstance(msgs, list) or not msgs or not isinstance(msgs[-1], dict):
        return False
    last = msgs[-1]
    text = last.get("content")
    if last.get("role") != "assistant" or not isinstance(text, str) or text == text.rstrip():
        return False
    kwargs["messages"] = [*msgs[:-1], {**last, "content": text.rstrip()}]
    return True


def as_attempt_error(e: Exception) -> AttemptFailed:
    """A LiteLLM exception as its type of :mod:`gateway.upstream.failures`."""
    status = getattr(e, "status_code", None)
    name = type(e).__name__
    # bounded as an engine's error body is (a provider's message may quote the prompt)
    message = str(getattr(e, "message", "") or e)[:MAX_ERROR_BODY]
    if name == "Timeout" or isinstance(e, TimeoutError):
        return AnswerTimeout(short(e))
    if name == "APIConnectionError" or not isinstance(status, int):
        return ProviderError(f"{name}: {message}"[:160])
    if status in _TIER_FAULT:
        return TierRefused(status, f"{name}: {message}"[:160])
    err = status_error(status, _envelope(status, message))
    if not isinstance(err, ClientRejected):  # (a client error keeps its short detail)
        err.detail = f"{name}: {message}"[:160]
    return err


def _envelope(status: int, message: str) -> bytes:
    kind = _RELAYED_TYPE.get(status, "invalid_request_error")
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}})


def clean(obj: dict[str, Any]) -> dict[str, Any]:
    """A LiteLLM response or chunk as OpenAI's wire format: LiteLLM's own extras (None
    fields, provider-specific fields, its cost) left out."""
    out = {k: obj[k] for k in _TOP if obj.get(k) is not None}
    choices = []
    for ch in obj.get("choices") or []:
        c: dict[str, Any] = {"index": ch.get("index", 0)}
        for part in ("delta", "message"):
            if isinstance(ch.get(part), dict):
                c[part] = {k: ch[part][k] for k in _MESSAGE if ch[part].get(k) is not None}
        if "text" in ch:
            c["text"] = ch["text"] or ""
        c["finish_reason"] = ch.get("finish_reason")
        if ch.get("logprobs") is not None:
            c["logprobs"] = ch["logprobs"]
        choices.append(c)
    out["choices"] = choices
    usage = obj.get("usage")
    if isinstance(usage, dict):
        out["usage"] = {k: usage[k] for k in _USAGE if usage.get(k) is not None}
    return out


def _lstrip_text(event: dict[str, Any]) -> bool:
    """The first text of a continuation without its leading whitespace; True once the
    event carried text (the trim is done)."""
    for ch in event["choices"]:
        delta = ch.get("delta") or {}
        if isinstance(delta.get("content"), str) and delta["content"]:
            delta["content"] = delta["content"].lstrip()
            return True
    return False


class _Answer:
    """A whole JSON answer, read once."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes):
        self._data = data

    async def read(self) -> bytes:
        data, self._data = self._data, b""
        return data

    def close(self) -> None:
        pass

    def release(self) -> None:
        pass


class _HostedStream:
    """LiteLLM's chunks as OpenAI SSE events; ``data: [DONE]`` at the end."""

    __slots__ = ("_closing", "_done", "_gap", "_it", "_resp", "_trimmed")

    def __init__(self, resp: Any, gap: float | None, trimmed: bool = False):
        self._resp = resp
        self._it: AsyncIterator[Any] = resp.__aiter__()
        self._gap = gap
        self._done = False
        self._closing: asyncio.Task[Any] | None = None
        self._trimmed = trimmed  # the prefill's trailing whitespace: the client has it

    async def read(self) -> bytes:
        if self._done:
            return b""
        try:
            async with asyncio.timeout(self._gap):
                chunk = await anext(self._it)
        except StopAsyncIteration:
            self._done = True
            return b"data: [DONE]\n\n"
        except TimeoutError:
            raise Stall("no data within the stall limit") from None
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise StreamCut(as_attempt_error(e).detail) from None
        event = clean(chunk.model_dump())
        if self._trimmed:
            self._trimmed = not _lstrip_text(event)
        return b"data: " + orjson.dumps(event) + b"\n\n"

    def close(self) -> None:
        """Stop the provider's stream (its HTTP connection closes in the background)."""
        self._done = True
        if self._closing is None:
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to close
                self._closing = asyncio.get_running_loop().create_task(self._resp.aclose())

    def release(self) -> None:
        self._done = True
