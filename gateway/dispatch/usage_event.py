"""The usage-only event of a stream: the gateway asks every engine for it (a stream is
charged for its tokens) and takes it out again where the client did not ask for it."""

from __future__ import annotations

import orjson

from gateway.upstream.framing import data_payloads

__all__ = ("drop_usage",)


def drop_usage(events: bytes) -> bytes:
    """Complete SSE events without the usage-only event (``"choices": []``) that the
    gateway asked the engine for on the client's behalf."""
    at = events.rfind(b'"usage"')  # the usage event is the last before [DONE] (and some
    if at < 0:  # engines send "usage": null in every event): only the last one is looked at
        return events
    before = events.rfind(b"\n\n", 0, at)
    start = 0 if before < 0 else before + 2
    end = events.find(b"\n\n", at)
    end = len(events) if end < 0 else end + 2
    if not _usage_only(events[start:end]):
        return events
    return events[:start] + events[end:]


def _usage_only(event: bytes) -> bool:
    for payload in data_payloads(event):
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return False
        return isinstance(obj, dict) and bool(obj.get("usage")) and not obj.get("choices")
    return False
