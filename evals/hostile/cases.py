"""The hostile requests of ``python -m evals hostile``: raw HTTP bytes and what must come back.

Each case is sent on its own connection as raw bytes (so broken headers and chunking can
be sent too) with the tenant's key, and names the status and OpenAI error ``code`` a
correct gateway answers. ``envelope=False`` marks answers aiohttp's own parser gives
before the gateway sees the request (plain text): they are counted, not excused.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[str], bytes]  # the tenant key -> the raw request
    status: int
    code: str | None = None  # the error envelope's code (None: any, or a 200)
    envelope: bool = True


def http(
    body: bytes | None,
    key: str | None,
    *,
    path: str = "/v1/chat/completions",
    method: str = "POST",
    headers: tuple[tuple[str, str], ...] = (),
    length: int | None = None,
    content_type: str = "application/json",
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: gateway", "Connection: close"]
    if body is not None:
        lines += [f"Content-Type: {content_type}", f"Content-Length: {length or len(body)}"]
    if key is not None:
        lines.append(f"Authorization: Bearer {key}")
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def chat(**kw: Any) -> bytes:
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], **kw}
    return json.dumps(body).encode()


def nested(depth: int) -> bytes:
    return b'{"model": "auto", "messages": [{"role": "user", "content": "hi"}], "x": ' + (
        b"[" * depth + b"]" * depth + b"}"
    )


def _post(body: bytes, **kw: Any) -> Callable[[str], bytes]:
    return lambda key: http(body, key, **kw)


EVIL_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "evil",
        "schema": {
            "type": "object",
            "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}},
            "patternProperties": {"^(.*)(.*)(.*)(.*)(.*)!$": {}},
        },
    },
}
_BOMB = gzip.compress(b" " * (12 * 1024 * 1024))  # 12 MiB of spaces: over the 10 MiB limit
_CHUNKED_BAD = b"zz\r\nnot hex\r\n0\r\n\r\n"


def _raw(head: bytes, tail: bytes = b"") -> Callable[[str], bytes]:
    return lambda key: head.replace(b"KEY", key.encode()) + tail


CASES = (
    Case("malformed json", _post(b'{"model": "auto", "messages": ['), 400, "invalid_json"),
    Case("empty body", _post(b""), 400, "invalid_json"),
    Case("array body", _post(b"[1, 2]"), 400, "invalid_json"),
    Case("not utf-8", _post(b'{"model": "\xff\xfe"}'), 400, "invalid_json"),
    Case("missing messages", _post(b'{"model": "auto"}'), 400, "missing_required_parameter"),
    Case("messages a string", _post(chat(messages="hi")), 400, "invalid_type"),
    Case("empty messages", _post(chat(messages=[])), 400, "invalid_value"),
    Case("message not object", _post(chat(messages=[1])), 400, "invalid_type"),
    Case("model a number", _post(chat(model=5)), 400, "invalid_type"),
    # (an unknown model name is routed by the rules' "*" alias: not an error any more)
    Case("max_tokens over every cap", _post(chat(max_tokens=10**9)), 400, "invalid_value"),
    Case("stream a string", _post(chat(stream="yes")), 400, "invalid_type"),
    Case("max_tokens negative", _post(chat(max_tokens=-1)), 400, "invalid_value"),
    Case("tools not array", _post(chat(tools="x")), 400, "invalid_type"),
    Case("temperature a string", _post(chat(temperature="hot")), 400, "invalid_type"),
    Case("n of 1000", _post(chat(n=1000)), 400, "integer_above_max_value"),
    Case("n of 0", _post(chat(n=0)), 400, "integer_below_min_value"),
    Case("n a string", _post(chat(n="2")), 400, "invalid_type"),
    Case("seed a string", _post(chat(seed="x")), 400, "invalid_type"),
    Case("tool_choice a number", _post(chat(tool_choice=5)), 400, "invalid_type"),
    Case(
        "message without content",
        _post(chat(messages=[{"role": "user"}])),
        400,
        "missing_required_parameter",
    ),
    Case(
        "text part a number",
        _post(chat(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}])),
        400,
        "invalid_type",
    ),
    Case(
        "json as text/plain",
        _post(chat(), content_type="text/plain"),
        415,
        "unsupported_content_type",
    ),
    Case(
        "schema not object",
        _post(
            chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": 3}})
        ),
        400,
        "invalid_type",
    ),
    Case("nested 255", _post(nested(255)), 400, "invalid_json"),
    Case("nested 1000", _post(nested(1000)), 400, "invalid_json"),
    Case("nested 5000", _post(nested(5000)), 400, "invalid_json"),
    Case(
        "unknown hint header",
        _post(chat(), headers=(("x-gateway-turbo", "1"),)),
        400,
        "invalid_value",
    ),
    Case(
        "bad tier hint", _post(chat(), headers=(("x-gateway-tier", "turbo"),)), 400, "invalid_value"
    ),
    Case(
        "bad task hint",
        _post(chat(), headers=(("x-gateway-task", "poetry"),)),
        400,
        "invalid_value",
    ),
    Case("bad sla hint", _post(chat(), headers=(("x-gateway-sla", "asap"),)), 400, "invalid_value"),
    Case(
        "corrupt gzip",
        _post(b"\x1f\x8b\x08\x00junk", headers=(("Content-Encoding", "gzip"),)),
        400,
        "invalid_body",
    ),
    Case(
        "zstd body",
        _post(chat(), headers=(("Content-Encoding", "zstd"),)),
        415,
        "unsupported_content_encoding",
    ),
    Case(
        "gzip bomb", _post(_BOMB, headers=(("Content-Encoding", "gzip"),)), 413, "request_too_large"
    ),
    Case(
        "declared too large",
        lambda k: http(b"{}", k, length=64 * 1024 * 1024),
        413,
        "request_too_large",
    ),
    Case("body shorter than length", lambda k: http(b'{"mo', k, length=100), 408, "body_timeout"),
    Case("no key", lambda k: http(chat(), None), 401, "invalid_api_key"),
    Case("wrong key", lambda k: http(chat(), "gk-not-a-key"), 401, "invalid_api_key"),
    Case("GET completions", lambda k: http(None, k, method="GET"), 405, "method_not_allowed"),
    Case("unknown path", lambda k: http(None, k, method="GET", path="/v2/x"), 404, "not_found"),
    Case(
        "admin on data port",
        lambda k: http(None, k, method="GET", path="/admin/tenants"),
        404,
        "not_found",
    ),
    Case(
        "metrics without token",
        lambda k: http(None, None, method="GET", path="/metrics"),
        401,
        "invalid_api_key",
    ),
    Case("catastrophic regex", _post(chat(response_format=EVIL_SCHEMA)), 200),
    Case(
        "header without colon",
        _raw(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n"
            b"Connection: close\r\nno colon here\r\nContent-Length: 2\r\n\r\n{}"
        ),
        400,
        envelope=False,
    ),
    Case(
        "bad chunking",
        _raw(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nConnection: "
            b"close\r\nAuthorization: Bearer KEY\r\nTransfer-Encoding: chunked\r\n\r\n",
            _CHUNKED_BAD,
        ),
        400,
        envelope=False,
    ),
    Case(
        "header too long",
        _raw(
            b"GET /healthz HTTP/1.1\r\nHost: g\r\nConnection: close\r\n"
            b"X-Long: " + b"a" * 20000 + b"\r\n\r\n"
        ),
        400,
        envelope=False,
    ),
)
