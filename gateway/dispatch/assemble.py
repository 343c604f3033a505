"""A non-streamed answer assembled from an upstream stream's events.

The gateway asks engines for a stream even when the client did not, so that time to
first token, stalls and loops are seen while tokens are generated. The client still gets
the one JSON object it asked for: every choice, the message's fields (content, tool
calls, reasoning, refusal, anything else the engine sent), log-probabilities, the finish
reason, usage, the id/model/created/system_fingerprint of the engine's events, and the
engine's own fields of an event or a choice (SGLang's ``matched_stop``, vLLM's
``stop_reason``, ``prompt_logprobs`` ...; the last value sent, when not null), as the
streamed chunks carry them.
"""

from __future__ import annotations

from typing import Any

from gateway.checks.base import Output
from gateway.upstream.sse import PLAIN_TOP, TOP_KEYS, StreamState

_TOP = TOP_KEYS
_OWN_CHOICE = frozenset(("index", "delta", "text", "message", "finish_reason", "logprobs"))


def assembled(kind: str, state: StreamState) -> dict[str, Any]:
    """The answer of a stream that kept its events: from the state for a plain one, from
    the events for any other."""
    if state.plain:
        return assemble_state(state)
    return assemble(kind, state.parsed_events())


def assemble(kind: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    chat = kind == "chat"
    out: dict[str, Any] = {"object": "chat.completion" if chat else "text_completion"}
    choices: dict[int, dict[str, Any]] = {}
    usage = None
    extra: dict[str, Any] = {}
    for ev in events:
        for key in _TOP:
            if key not in out and ev.get(key) is not None:
                out[key] = ev[key]
        for key, value in ev.items():
            if value is not None and key not in PLAIN_TOP:
                extra[key] = value
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices") or ():
            if isinstance(ch, dict):
                _merge_choice(choices, ch, chat)
    out["choices"] = [_finish(choices[i], chat) for i in sorted(choices)]
    if usage is not None:
        out["usage"] = usage
    out.update(extra)
    return out


def assemble_state(state: StreamState) -> dict[str, Any]:
    """The answer of a plain stream (one choice; text, tool calls, finish reason, usage),
    straight from what :class:`StreamState` tracked: no second pass over the events."""
    first = state.first
    out: dict[str, Any] = {"object": "chat.completion" if state.chat else "text_completion"}
    for key in _TOP:
        if first.get(key) is not None:
            out[key] = first[key]
    choice: dict[str, Any] = {"index": 0}
    if state.chat:
        msg: dict[str, Any] = {"role": "assistant", "content": state.text() or None}
        if state.tool_calls:
            msg["tool_calls"] = [state.tool_calls[i] for i in sorted(state.tool_calls)]
        choice["message"] = msg
    else:
        choice["text"] = state.text()
    choice["logprobs"] = None
    choice["finish_reason"] = state.finish_reason
    if state.stops is not None:
        choice.update((k, v) for k, v in state.stops.items() if v is not None)
    out["choices"] = [choice]
    if state.usage is not None:
        out["usage"] = state.usage
    if state.extra:
        out.update(state.extra)
    return out


def outputs(kind: str, answer: dict[str, Any]) -> list[Output]:
    """What the checks look at, per choice of an assembled answer."""
    outs = []
    for ch in answer["choices"]:
        if kind == "chat":
            msg = ch["message"]
            outs.append(
                Output(msg.get("content") or "", ch["finish_reason"], msg.get("tool_calls") or [])
            )
        else:
            outs.append(Output(ch.get("text") or "", ch["finish_reason"], []))
    return outs


def _merge_choice(choices: dict[int, dict[str, Any]], ch: dict[str, Any], chat: bool) -> None:
    idx = ch.get("index", 0)
    idx = idx if isinstance(idx, int) else 0
    c = choices.get(idx)
    if c is None:
        c = choices[idx] = {"index": idx, "finish_reason": None, "logprobs": None}
        if chat:
            c["message"] = {"role": "assistant", "content": None}
        else:
            c["text"] = ""
    if chat:
        delta = ch.get("delta")
        if isinstance(delta, dict):
            _merge_delta(c["message"], delta)
    elif isinstance(ch.get("text"), str):
        c["text"] += ch["text"]
    if ch.get("finish_reason"):
        c["finish_reason"] = ch["finish_reason"]
    if ch.get("logprobs"):
        c["logprobs"] = _merge_logprobs(c["logprobs"], ch["logprobs"])
    for key, value in ch.items():  # the engine's own: SGLang's matched_stop, vLLM's stop_reason
        if value is not None and key not in _OWN_CHOICE:
            c[key] = value


def _merge_delta(msg: dict[str, Any], delta: dict[str, Any]) -> None:
    for key, value in delta.items():
        if key == "tool_calls" and isinstance(value, list):
            _merge_tool_calls(msg.setdefault("tool_calls", []), value)
        elif key == "role":
            msg["role"] = value or msg["role"]
        elif isinstance(value, str):
            msg[key] = (msg.get(key) or "") + value
        elif value is not None:
            msg[key] = value


def _merge_tool_calls(calls: list[dict[str, Any]], deltas: list[Any]) -> None:
    for d in deltas:
        if not isinstance(d, dict):
            continue
        i = d.get("index", len(calls))
        i = i if isinstance(i, int) and 0 <= i <= len(calls) else len(calls)
        if i == len(calls):
            calls.append(
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
        slot = calls[i]
        if d.get("id"):
            slot["id"] = d["id"]
        if d.get("type"):
            slot["type"] = d["type"]
        fn = d.get("function")
        if isinstance(fn, dict):
            for part in ("name", "arguments"):
                if isinstance(fn.get(part), str):
                    slot["function"][part] += fn[part]


def _merge_logprobs(acc: Any, new: Any) -> Any:
    if not isinstance(new, dict):
        return acc or new
    if not isinstance(acc, dict):
        acc = {}
    for key, value in new.items():
        if isinstance(value, list):
            acc[key] = [*(acc.get(key) or []), *value]
        else:
            acc[key] = value
    return acc


def _finish(c: dict[str, Any], chat: bool) -> dict[str, Any]:
    if chat and not c["message"].get("tool_calls"):
        c["message"].pop("tool_calls", None)
    return c
