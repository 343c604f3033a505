"""Anthropic's Messages API (``POST /v1/messages``) in terms of chat completions, both ways.

Written here, like the Responses API's (:mod:`gateway.server.responses_format`): a Messages
request becomes a chat request that takes the one request path (classification, routing,
checks, fallback, continuation), and the chat answer becomes a Messages ``message``; the
stream's events are made by :mod:`gateway.server.messages_stream`; an error leaves in
Anthropic's shape and types (:func:`error_from`), with the status its SDKs expect: the
gateway's "saturated" 429 is Anthropic's 529 ``overloaded_error``.

Request: ``system`` (a string or text blocks) -> a system message; ``messages`` (user,
assistant and system turns: strings, or ``text``, ``image``, ``tool_use``, ``tool_result``
blocks; ``thinking`` blocks dropped, ``cache_control`` ignored) -> chat messages, each
``tool_result`` a ``tool`` message;
``tools`` (``input_schema``) -> function tools, other tool types passed through;
``tool_choice`` (``auto``, ``any``, ``tool``, ``none``, ``disable_parallel_tool_use``);
``stop_sequences`` -> ``stop``; ``metadata.user_id`` -> ``user``; ``max_tokens``,
``temperature``, ``top_p``, ``top_k``, ``stream`` kept. Fields a chat engine has no use
for (``thinking``, ``service_tier``, ``container`` ...) are left out.
"""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import Any

import orjson

from gateway.errors import InvalidField
from gateway.request.fields import bad_type, missing

_KEPT = ("model", "max_tokens", "stream", "temperature", "top_p", "top_k")
_CHOICES = MappingProxyType({"auto": "auto", "any": "required", "none": "none"})
# Anthropic's error types by status (its SDKs pick the exception by the status)
_ERROR_TYPES = MappingProxyType(
    {
        400: "invalid_request_error",
        401: "authentication_error",
        402: "billing_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        504: "timeout_error",
        529: "overloaded_error",
    }
)


def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(12).hex()}"


def to_chat(body: dict[str, Any], need_max: bool = True) -> dict[str, Any]:
    """The chat completions request equivalent to a Messages request (400 if none is).
    ``need_max``: ``max_tokens`` is required (not for ``count_tokens``)."""
    if need_max and body.get("max_tokens") is None:
        raise missing("max_tokens")
    chat: dict[str, Any] = {k: body[k] for k in _KEPT if k in body}
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None:
        messages.append({"role": "system", "content": _text_of(system, "system")})
    msgs = body.get("messages")
    if msgs is None:
        raise missing("messages")
    if not isinstance(msgs, list):
        raise bad_type("messages", "an array", msgs)
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise bad_type(f"messages[{i}]", "an object", m)
        messages += _message(m, f"messages[{i}]")
    chat["messages"] = messages
    _extras(body, chat)
    if body.get("stream") is True:
        chat["stream_options"] = {"include_usage": True}
    return chat


def _extras(body: dict[str, Any], chat: dict[str, Any]) -> None:
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise bad_type("stop_sequences", "an array of strings", stops)
        if stops:
            chat["stop"] = stops
    meta = body.get("metadata")
    if isinstance(meta, dict):
        user = meta.get("user_id", meta.get("user"))
        if isinstance(user, str) and user:
            chat["user"] = user
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise bad_type("tools", "an array", tools)
        if tools:  # an empty list (Claude Code with no tools) is no tools to an engine
            chat["tools"] = [_tool(t, f"tools[{i}]") for i, t in enumerate(tools)]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "tool":
            chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        elif isinstance(kind, str) and kind in _CHOICES:
            chat["tool_choice"] = _CHOICES[kind]
        else:
            raise InvalidField(
                f"Invalid 'tool_choice.type': {kind!r}.", param="tool_choice", code="invalid_value"
            )
        if "tools" not in chat and chat["tool_choice"] in ("auto", "none"):
            del chat["tool_choice"]  # no tools: nothing to choose (engines refuse a choice)
        elif choice.get("disable_parallel_tool_use") is True and tools:
            chat["parallel_tool_calls"] = False


def _tool(t: object, param: str) -> Any:
    if not isinstance(t, dict):
        raise bad_type(param, "an object", t)
    if t.get("type") not in (None, "custom"):
        return t  # a hosted (server) tool: the engine's to judge
    name = t.get("name")
    if not isinstance(name, str) or not name:
        raise missing(f"{param}.name")
    fn: dict[str, Any] = {"name": name, "parameters": t.get("input_schema") or {"type": "object"}}
    if isinstance(t.get("description"), str):
        fn["description"] = t["description"]
    return {"type": "function", "function": fn}


def _text_of(content: object, param: str) -> str:
    """A string, or the text of text blocks (a system prompt, a tool result)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_type(param, "a string or an array of content blocks", content)
    texts = []
    for j, b in enumerate(content):
        if not isinstance(b, dict):
            raise bad_type(f"{param}[{j}]", "an object", b)
        if b.get("type") == "text":
            text = b.get("text")
            if not isinstance(text, str):
                raise bad_type(f"{param}[{j}].text", "a string", text)
            texts.append(text)
    return "\n".join(texts)


def _message(m: dict[str, Any], param: str) -> list[dict[str, Any]]:
    role, content = m.get("role"), m.get("content")
    if role not in ("user", "assistant", "system"):
        raise InvalidField(
            f"Invalid '{param}.role': {role!r}; expected 'user', 'assistant' or 'system'.",
            param=f"{param}.role",
            code="invalid_value",
        )
    if content is None:
        raise missing(f"{param}.content")
    if role == "system":  # a system turn between the others (Claude Code sends them)
        return [{"role": "system", "content": _text_of(content, f"{param}.content")}]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad_type(f"{param}.content", "a string or an array of content blocks", content)
    if role == "assistant":
        return [_assistant(content, f"{param}.content")]
    return _user(content, f"{param}.content")


def _assistant(blocks: list[Any], param: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            texts.append(str(b.get("text") or ""))
        elif kind == "tool_use":
            args = orjson.dumps(b.get("input") or {}).decode()
            fn = {"name": b.get("name"), "arguments": args}
            calls.append({"id": b.get("id"), "type": "function", "function": fn})
        elif kind not in ("thinking", "redacted_thinking"):  # a chat engine has no use for them
            raise _unsupported(f"{param}[{j}]", kind)
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        out["tool_calls"] = calls
    elif out["content"] is None:
        out["content"] = ""
    return out


def _user(blocks: list[Any], param: str) -> list[dict[str, Any]]:
    """Tool results first (each a ``tool`` message, right after the assistant's calls), then
    the rest of the turn as one user message."""
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "tool_result":
            text = _result_text(b.get("content"), f"{param}[{j}].content")
            if b.get("is_error") is True:
                text = f"Error: {text}"
            tools.append({"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": text})
        elif kind == "text":
            parts.append({"type": "text", "text": str(b.get("text") or "")})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(b, param, j)}})
        elif kind == "document" and (b.get("source") or {}).get("type") == "text":
            parts.append({"type": "text", "text": str(b["source"].get("data") or "")})
        else:
            raise _unsupported(f"{param}[{j}]", kind)
    if not parts:
        return tools
    if all(p["type"] == "text" for p in parts):
        return [*tools, {"role": "user", "content": "\n".join(p["text"] for p in parts)}]
    return [*tools, {"role": "user", "content": parts}]


def _result_text(content: object, param: str) -> str:
    if content is None:
        return ""
    return _text_of(content, param)


def _image_url(b: dict[str, Any], param: str, j: int) -> str:
    source = b.get("source")
    src: dict[str, Any] = source if isinstance(source, dict) else {}
    if src.get("type") == "base64":
        return f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
    if src.get("type") == "url" and isinstance(src.get("url"), str):
        return str(src["url"])
    raise _unsupported(f"{param}[{j}].source", src.get("type"))


def _unsupported(param: str, kind: object) -> InvalidField:
    return InvalidField(
        f"Content of type {kind!r} is not supported by this gateway.",
        param=param,
        code="invalid_value",
    )


# -- answers ------------------------------------------------------------------------------------
def stop_reason(
    finish: object, matched: object, stops: object, tools: bool
) -> tuple[str, str | None]:
    """A chat finish reason as Messages' ``stop_reason`` and ``stop_sequence``: ``matched`` is
    the stop string an engine says it stopped at (SGLang's ``matched_stop``, vLLM's
    ``stop_reason``)."""
    if finish == "length":
        return "max_tokens", None
    if finish in ("tool_calls", "function_call") or tools:
        return "tool_use", None
    if finish == "content_filter":
        return "refusal", None
    if isinstance(matched, str) and isinstance(stops, list) and matched in stops:
        return "stop_sequence", matched
    return "end_turn", None


def usage(chat_usage: object, output_estimate: int = 0) -> dict[str, int]:
    u = chat_usage if isinstance(chat_usage, dict) else {}
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": int(u.get("prompt_tokens") or 0),
        "output_tokens": int(u.get("completion_tokens") or output_estimate),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": int(cached),
    }


def tool_input(arguments: object) -> Any:
    """A tool call's arguments as the ``input`` object (``{}`` when they are not one)."""
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def message(msg_id: str, model: object, **fields: Any) -> dict[str, Any]:
    """A Messages ``message`` object; ``fields``: content, stop_reason, stop_sequence, usage."""
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": fields.get("content", []),
        "stop_reason": fields.get("stop_reason"),
        "stop_sequence": fields.get("stop_sequence"),
        "usage": fields.get("usage") or usage(None),
    }


def to_message(chat_body: bytes, req: dict[str, Any]) -> bytes:
    """A chat completion answer as the Messages answer to ``req``."""
    chat = orjson.loads(chat_body)
    choice = (chat.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if msg.get("content"):
        content.append({"type": "text", "text": msg["content"]})
    calls = msg.get("tool_calls") or []
    for call in calls:
        fn = call.get("function") or {}
        block = {
            "type": "tool_use",
            "id": call.get("id") or new_id("toolu"),
            "name": fn.get("name"),
        }
        content.append({**block, "input": tool_input(fn.get("arguments"))})
    matched = choice.get("matched_stop", choice.get("stop_reason"))
    reason, seq = stop_reason(
        choice.get("finish_reason"), matched, req.get("stop_sequences"), bool(calls)
    )
    out = message(
        new_id("msg"),
        chat.get("model") or req.get("model"),
        content=content,
        stop_reason=reason,
        stop_sequence=seq,
        usage=usage(chat.get("usage"), len(msg.get("content") or "") // 4),
    )
    return orjson.dumps(out)


# -- errors -------------------------------------------------------------------------------------
def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def error_from(status: int, openai_body: bytes, rid: str) -> tuple[int, bytes]:
    """An error the gateway wrote in OpenAI's envelope, as Anthropic's: its status (the
    gateway's "saturated" 429 becomes 529) and ``{"type": "error", "error": {...}}``."""
    try:
        err = orjson.loads(openai_body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        err = None
    err = err if isinstance(err, dict) else {}
    if status == 429 and err.get("code") == "overloaded":
        status = 529
    msg = str(err.get("message") or f"HTTP {status}")
    doc = {
        "type": "error",
        "error": {"type": error_type(status), "message": msg},
        "request_id": rid,
    }
    return status, orjson.dumps(doc)


def stream_error(err: object) -> dict[str, Any]:
    """The relay's error event (a stream broken after its first bytes) as Anthropic's."""
    e = err if isinstance(err, dict) else {"message": str(err)}
    kind = "overloaded_error" if e.get("code") == "overloaded" else "api_error"
    return {"type": "error", "error": {"type": kind, "message": str(e.get("message") or "")}}
