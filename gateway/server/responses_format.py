"""The Responses API (``POST /v1/responses``) in terms of chat completions, both ways.

Written here, not borrowed from LiteLLM: a Responses request becomes a chat request that
goes through the gateway's classification, routing, checks and fallback like any other,
and the chat answer becomes a Responses ``response`` object (the stream's events are
made by :mod:`gateway.server.responses_stream` with :func:`response_object` and the item
builders below). The gateway keeps no state: ``previous_response_id`` is a 400.

Request: ``instructions`` -> a system message; ``input`` (a string, or message,
``function_call``, ``function_call_output`` items; ``reasoning`` items are dropped) ->
``messages``; function tools -> chat function tools, other tool types (``custom``,
hosted tools) passed through unchanged; ``tool_choice``; ``text.format`` ->
``response_format``; ``max_output_tokens`` -> ``max_tokens``; sampling fields kept.
"""

from __future__ import annotations

import os
import time
from typing import Any

import orjson

from gateway.errors import InvalidField

_KEPT = ("model", "stream", "temperature", "top_p", "parallel_tool_calls", "user", "seed")
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})


def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(12).hex()}"


def _bad(param: str, msg: str, code: str = "invalid_value") -> InvalidField:
    return InvalidField(msg, param=param, code=code)


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat completions request equivalent to a Responses request (400 if none is)."""
    for param in ("previous_response_id", "conversation"):
        if body.get(param) is not None:
            raise _bad(
                param,
                f"'{param}' is not supported: this gateway keeps no conversation state; send "
                "the whole conversation in 'input'.",
                "unsupported_parameter",
            )
    if body.get("background"):
        raise _bad(
            "background", "'background' responses are not supported.", "unsupported_parameter"
        )
    chat: dict[str, Any] = {k: body[k] for k in _KEPT if k in body}
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad(
                "instructions",
                "Invalid type for 'instructions': expected a string.",
                "invalid_type",
            )
        messages.append({"role": "system", "content": instructions})
    if "input" not in body:
        raise _bad("input", "Missing required parameter: 'input'.", "missing_required_parameter")
    messages += _messages(body["input"])
    chat["messages"] = messages
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    fmt = _format(body.get("text"))
    if fmt is not None:
        chat["response_format"] = fmt
    if body.get("stream") is True:
        chat["stream_options"] = {"include_usage": True}
    return chat


def _messages(inp: object) -> list[dict[str, Any]]:
    if isinstance(inp, str):
        return [{"role": "user", "content": inp}]
    if not isinstance(inp, list):
        raise _bad(
            "input", "Invalid type for 'input': expected a string or an array.", "invalid_type"
        )
    out: list[dict[str, Any]] = []
    for i, item in enumerate(inp):
        if not isinstance(item, dict):
            raise _bad(
                f"input[{i}]", f"Invalid type for 'input[{i}]': expected an object.", "invalid_type"
            )
        _item(item, i, out)
    return out


def _item(item: dict[str, Any], i: int, out: list[dict[str, Any]]) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        content = _content(item.get("content"), f"input[{i}].content")
        out.append({"role": "system" if role == "developer" else role, "content": content})
    elif kind in ("function_call", "custom_tool_call"):
        if kind == "function_call":
            fn = {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}
            call: dict[str, Any] = {"id": item.get("call_id"), "type": "function", "function": fn}
        else:
            custom = {"name": item.get("name"), "input": item.get("input", "")}
            call = {"id": item.get("call_id"), "type": "custom", "custom": custom}
        if out and out[-1].get("role") == "assistant":
            out[-1].setdefault("tool_calls", []).append(call)
        else:
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        if not isinstance(output, str):
            output = _content(output, f"input[{i}].output")
        out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": output})
    elif kind != "reasoning":  # a model's reasoning is not sent back to a chat engine
        raise _bad(f"input[{i}].type", f"Input items of type {kind!r} are not supported here.")


def _content(content: object, param: str) -> Any:
    """Responses content parts -> chat content (a string when every part is text)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise _bad(
            param, f"Invalid type for '{param}': expected a string or an array.", "invalid_type"
        )
    parts: list[Any] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": part.get("text") or part.get("refusal") or ""})
        elif kind == "input_image":
            url = part.get("image_url") or part.get("file_id")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            parts.append(part)
    if all(isinstance(p, dict) and p.get("type") == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _tools(tools: object) -> list[Any]:
    if not isinstance(tools, list):
        raise _bad("tools", "Invalid type for 'tools': expected an array.", "invalid_type")
    out: list[Any] = []
    for t in tools:
        if isinstance(t, dict) and t.get("type") == "function":
            keys = ("name", "description", "parameters", "strict")
            out.append({"type": "function", "function": {k: t[k] for k in keys if k in t}})
        else:
            out.append(t)  # custom and hosted tools: the engine's to judge
    return out


def _tool_choice(choice: object) -> object:
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _format(text: object) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt.get("type") == "json_schema":
        keys = ("name", "schema", "strict", "description")
        return {"type": "json_schema", "json_schema": {k: fmt[k] for k in keys if k in fmt}}
    return {"type": fmt["type"]}


# -- answers ------------------------------------------------------------------------------------
def usage(chat_usage: object) -> dict[str, Any] | None:
    if not isinstance(chat_usage, dict):
        return None
    inp = int(chat_usage.get("prompt_tokens") or 0)
    out = int(chat_usage.get("completion_tokens") or 0)
    cached = (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(chat_usage.get("total_tokens") or inp + out),
    }


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [part] if status == "completed" else [],
    }


def call_item(item_id: str, call: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    """A chat tool call as a Responses output item (``function_call`` or ``custom_tool_call``)."""
    if call.get("type") == "custom":
        custom = call.get("custom") or {}
        return {
            "id": item_id,
            "type": "custom_tool_call",
            "status": status,
            "call_id": call.get("id") or item_id,
            "name": custom.get("name", ""),
            "input": custom.get("input", ""),
        }
    fn = call.get("function") or {}
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call.get("id") or item_id,
        "name": fn.get("name", ""),
        "arguments": fn.get("arguments", ""),
    }


def response_object(req: dict[str, Any], rid: str, model: object, **state: Any) -> dict[str, Any]:
    """A ``response`` object; ``state``: status, output, usage, finish (the chat finish
    reason), error."""
    status = state.get("status", "completed")
    incomplete = None
    if state.get("finish") == "length":
        status, incomplete = "incomplete", {"reason": "max_output_tokens"}
    text = req.get("text") if isinstance(req.get("text"), dict) else {"format": {"type": "text"}}
    return {
        "id": rid,
        "object": "response",
        "created_at": state.get("created_at") or int(time.time()),
        "status": status,
        "error": state.get("error"),
        "incomplete_details": incomplete,
        "instructions": req.get("instructions"),
        "max_output_tokens": req.get("max_output_tokens"),
        "model": model or req.get("model"),
        "output": state.get("output", []),
        "parallel_tool_calls": req.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": None,
        "store": False,
        "temperature": req.get("temperature"),
        "text": text,
        "tool_choice": req.get("tool_choice", "auto"),
        "tools": req.get("tools") or [],
        "top_p": req.get("top_p"),
        "truncation": "disabled",
        "usage": state.get("usage"),
        "metadata": req.get("metadata") or {},
    }


def to_response(chat_body: bytes, req: dict[str, Any]) -> bytes:
    """A chat completion answer as the Responses answer to ``req``."""
    chat = orjson.loads(chat_body)
    choices = chat.get("choices") or [{}]
    msg = choices[0].get("message") or {}
    output: list[dict[str, Any]] = []
    if msg.get("content"):
        output.append(message_item(new_id("msg"), msg["content"]))
    for call in msg.get("tool_calls") or []:
        output.append(call_item(new_id("fc"), call))
    obj = response_object(
        req,
        new_id("resp"),
        chat.get("model"),
        output=output,
        usage=usage(chat.get("usage")),
        finish=choices[0].get("finish_reason"),
        created_at=chat.get("created"),
    )
    return orjson.dumps(obj)
