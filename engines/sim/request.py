"""An OpenAI request body (chat or text completion) to the :class:`SimRequest` the
simulator answers, or :class:`BadRequest` (HTTP 400)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from engines.sim.config import Json


class BadRequest(Exception):
    """The request is invalid: answered with HTTP 400."""


@dataclass
class SimRequest:
    """What the simulator needs from an OpenAI request."""

    chat: bool
    prompt_tokens: list[str]
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    stop: list[str] = field(default_factory=list)
    json_schema: Json | None = None
    tool: Json | None = None
    continue_text: str | None = None
    model: str = ""
    digest: str = ""
    base_digest: str = ""  # a chat continuation: the digest of the request it continues


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") == "text":
                parts.append(str(p.get("text", "")))
            elif isinstance(p, dict):
                parts.append("<image>")
        return " ".join(parts)
    raise BadRequest("message content must be a string, a list of parts or null")


def _render_message(m: Json) -> str:
    text = _text_of(m.get("content"))
    if m.get("tool_calls"):
        text += " " + json.dumps(m["tool_calls"])
    return f"<|im_start|> {m['role']}\n{text} <|im_end|>\n"


def _check_messages(messages: Any) -> list[Json]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest("each message must be an object with a 'role'")
    return messages


def _pick_tool(body: Json, messages: list[Json]) -> Json | None:
    tools = body.get("tools")
    if not tools:
        return None
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) and t["function"].get("name")
        for t in tools
    ):
        raise BadRequest("'tools' must be a list of {type: function, function: {name, ...}}")
    choice = body.get("tool_choice")
    if choice == "none" or messages[-1]["role"] == "tool":
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        for t in tools:
            if t["function"]["name"] == name:
                return dict(t["function"])
        raise BadRequest(f"tool_choice names an unknown function {name!r}")
    return dict(tools[0]["function"])


def _json_schema(body: Json) -> Json | None:
    rf = body.get("response_format")
    if not isinstance(rf, dict):
        return None
    if rf.get("type") == "json_object":
        return {}
    if rf.get("type") == "json_schema":
        js = rf.get("json_schema") or {}
        schema = js.get("schema") if isinstance(js, dict) else None
        return schema if isinstance(schema, dict) else {"type": "object"}
    return None


def _limits(body: Json) -> tuple[int | None, int]:
    raw = body.get("max_completion_tokens", body.get("max_tokens"))
    if raw is not None and (not isinstance(raw, int) or isinstance(raw, bool) or raw < 1):
        raise BadRequest("'max_tokens' must be a positive integer")
    min_tokens = body.get("min_tokens") or 0
    if not isinstance(min_tokens, int) or min_tokens < 0:
        raise BadRequest("'min_tokens' must be a non-negative integer")
    return raw, min_tokens


def _stops(body: Json) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise BadRequest("'stop' must be a string or a list of strings")
    return [s for s in stops if s]


def _digest(body: Json, chat: bool) -> str:
    # max_tokens and stop only cut the same text short, min_tokens only makes it go on:
    # they are not part of the digest
    keys = ("messages", "prompt", "tools", "tool_choice", "response_format", "ignore_eos",
            "continue_final_message")  # fmt: skip
    canon = {k: body.get(k) for k in keys}
    canon["continue_final_message"] = body.get("continue_final_message") or None  # false: unset
    canon["ignore_eos"] = body.get("ignore_eos") or None  # false is the default (a router's
    # re-serialised body says so): the same request, the same text
    canon["chat"] = chat
    raw = orjson.dumps(canon, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(raw).hexdigest()


def _common(body: Json, chat: bool, tokens: list[str]) -> SimRequest:
    max_tokens, min_tokens = _limits(body)
    opts = body.get("stream_options")
    return SimRequest(
        chat=chat,
        prompt_tokens=tokens,
        stream=bool(body.get("stream")),
        include_usage=isinstance(opts, dict) and bool(opts.get("include_usage")),
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=bool(body.get("ignore_eos")),
        stop=_stops(body),
        json_schema=_json_schema(body),
        model=str(body.get("model") or ""),
        digest=_digest(body, chat),
    )


def parse_chat(body: Json) -> SimRequest:
    messages = _check_messages(body.get("messages"))
    continuing = bool(body.get("continue_final_message")) and messages[-1]["role"] == "assistant"
    head = messages[:-1] if continuing else messages
    tool = _pick_tool(body, head or messages)  # a continued text answer stays text
    prompt = "".join(_render_message(m) for m in head)
    if body.get("tools"):
        prompt = f"<|im_start|> tools\n{json.dumps(body['tools'])} <|im_end|>\n" + prompt
    continue_text = _text_of(messages[-1].get("content")) if continuing else None
    prompt += "<|im_start|> assistant\n" + (continue_text or "")
    req = _common(body, True, re.findall(r"\S+", prompt))
    req.tool = tool
    req.continue_text = continue_text
    if continuing:
        req.base_digest = _digest({**body, "messages": head, "continue_final_message": None}, True)
    return req


def parse_completion(body: Json) -> SimRequest:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        tokens = re.findall(r"\S+", prompt)
        text = prompt
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        text = "\n".join(prompt)
        tokens = re.findall(r"\S+", text)
    elif isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        tokens, text = [str(p) for p in prompt], ""
    else:
        raise BadRequest("'prompt' must be a string, a list of strings or a list of token ids")
    req = _common(body, False, tokens or [""])
    req.continue_text = text
    return req
