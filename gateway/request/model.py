"""Client request parsing: the one place that turns body bytes into a validated request.

We validate only what the gateway itself relies on (types of the fields it reads) and
keep the decoded body as a plain dict, so every field we do not know is passed to the
engine unchanged. Errors are precise 400s naming the offending ``param``.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from gateway.checks.base import RequestFacts
from gateway.errors import InvalidField, InvalidJSON
from gateway.request.fields import (
    bad_type,
    check_sampling,
    check_stream_options,
    check_tool_choice,
    content_part_text,
    json_type,
    missing,
)
from gateway.request.prefix import PromptKey, chat_key, text_key

Kind = Literal["chat", "completions"]
_ROLES = frozenset({"system", "user", "assistant", "tool", "developer", "function"})
_FORMATS = frozenset({"text", "json_object", "json_schema"})


@dataclass(slots=True, kw_only=True)
class ClientRequest:
    kind: Kind
    body: dict[str, Any]  # decoded client body; forwarded with only ``model`` replaced
    model: str
    stream: bool
    facts: RequestFacts  # what the quality checks need to know
    cue_text: str  # the text the classifier searches for cues (last user turn / prompt)
    prompt_chars: int  # size of the whole prompt, for the token estimate
    affinity: int = 0  # hash of the prompt's head: same head -> same replica (prefix cache)
    key: PromptKey | None = None  # the prompt's prefixes, made on first use: routing_key()
    prompt: Sequence[tuple[str, str]] | str = ()  # what the key is made of: (role, text)s
    max_tokens: int | None = None  # max_tokens / max_completion_tokens, when the client set one
    # the client's own Responses API body (``body`` is its chat translation): sent as it is
    # to tiers whose engines serve the Responses API
    native: dict[str, Any] | None = None

    def routing_key(self) -> PromptKey:
        """The prompt's routing key (:mod:`gateway.request.prefix`), made when first asked:
        only a pool of several replicas asks, so one replica costs no hashing of the prompt."""
        if self.key is None:
            p = self.prompt
            if isinstance(p, str):
                self.key = text_key(p)
            else:
                self.key = chat_key(p) if p else PromptKey.of_hash(self.affinity)
        return self.key

    @property
    def prompt_tokens(self) -> int:
        return self.prompt_chars // 4  # ~4 chars per token for English; an estimate only


def _affinity(head: str) -> int:
    # stable across processes (unlike hash()), so every gateway replica picks the same engine
    return zlib.crc32(head.encode("utf-8", "surrogatepass"))


_MAX_DEPTH = 255  # the first nesting depth orjson cannot write back (the body is forwarded)


def _decode(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise InvalidJSON("The request body is empty; expected a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InvalidJSON(f"The request body is not valid JSON: {e}.") from None
    if not isinstance(body, dict):
        raise InvalidJSON(f"The request body must be a JSON object, not {json_type(body)}.")
    if raw.count(b"[") + raw.count(b"{") >= _MAX_DEPTH:  # cheap: only then the real test
        try:
            orjson.dumps(body)  # orjson reads 1,024 levels but writes only 254
        except orjson.JSONEncodeError:
            raise InvalidJSON(
                f"The request body is nested too deeply (at most {_MAX_DEPTH - 1} levels)."
            ) from None
    return body


def decode_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a precise 400."""
    return _decode(raw)


def require_str(body: dict[str, Any], param: str) -> str:
    """``body[param]`` when it is a string; a 400 naming ``param`` when missing or not."""
    v = body.get(param)
    if v is None:
        raise missing(param)
    if not isinstance(v, str):
        raise bad_type(param, "a string", v)
    return v


def _common(body: dict[str, Any], chat: bool) -> tuple[str, bool, int | None]:
    model = body.get("model")
    if model is None:
        raise missing("model")
    if not isinstance(model, str):
        raise bad_type("model", "a string", model)
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise bad_type("stream", "a boolean", stream)
    max_tokens: int | None = None
    for p in ("max_tokens", "max_completion_tokens"):
        v = body.get(p)
        if v is not None:
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidField(
                    f"Invalid '{p}': expected an integer >= 1.", param=p, code="invalid_value"
                )
            max_tokens = v if max_tokens is None else min(max_tokens, v)
    check_sampling(body, chat)
    check_stream_options(body, stream is True)
    return model, bool(stream), max_tokens


def _content_text(content: object, param: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        if not content:
            raise InvalidField(
                f"Invalid '{param}': empty array. Expected an array with minimum length 1, "
                "but got an empty array instead.",
                param=param,
                code="empty_array",
            )
        parts = (content_part_text(part, f"{param}[{j}]") for j, part in enumerate(content))
        return "\n".join(t for t in parts if t is not None)
    raise bad_type(param, "a string or an array of content parts", content)


def _tools(body: dict[str, Any]) -> tuple[dict[str, dict[str, Any] | None], frozenset[str]]:
    """Function tools (name -> parameters schema) and the types of the other tools."""
    tools = body.get("tools")
    if tools is None:
        return {}, frozenset()
    if not isinstance(tools, list):
        raise bad_type("tools", "an array", tools)
    out: dict[str, dict[str, Any] | None] = {}
    other: set[str] = set()
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise bad_type(f"tools[{i}]", "an object", t)
        kind = t.get("type", "function")
        if kind != "function":
            other.add(str(kind))  # "custom", a hosted tool: passed through, the engine's to judge
            continue
        fn = t.get("function")
        if not isinstance(fn, dict):
            raise missing(f"tools[{i}].function")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise missing(f"tools[{i}].function.name")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise bad_type(f"tools[{i}].function.parameters", "an object", params)
        out[name] = params
    return out, frozenset(other)


def _response_format(body: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
    rf = body.get("response_format")
    if rf is None:
        return False, None
    if not isinstance(rf, dict):
        raise bad_type("response_format", "an object", rf)
    typ = rf.get("type")
    if typ not in _FORMATS:
        raise InvalidField(
            f"Invalid 'response_format.type': {typ!r}; expected one of "
            "'text', 'json_object', 'json_schema'.",
            param="response_format.type",
            code="invalid_value",
        )
    if typ == "text":
        return False, None
    schema = None
    if typ == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict):
            raise missing("response_format.json_schema")
        s = js.get("schema")
        if s is not None and not isinstance(s, dict):
            raise bad_type("response_format.json_schema.schema", "an object", s)
        schema = s
    return True, schema


def parse_chat(raw: bytes) -> ClientRequest:
    body = _decode(raw)
    model, stream, max_tokens = _common(body, chat=True)
    max_set = max_tokens is not None
    messages = body.get("messages")
    if messages is None:
        raise missing("messages")
    if not isinstance(messages, list):
        raise bad_type("messages", "an array", messages)
    if not messages:
        raise InvalidField(
            "'messages' must contain at least one message.", param="messages", code="invalid_value"
        )
    chars = 0
    last_user = ""
    head = ""
    said: list[tuple[str, str]] = []  # (role, text): the prompt's routing key
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_type(f"messages[{i}]", "an object", m)
        role = m.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise InvalidField(
                f"Invalid 'messages[{i}].role': {role!r}.",
                param=f"messages[{i}].role",
                code="invalid_value",
            )
        content = m.get("content")
        if content is None and not (  # OpenAI: only an assistant's tool call may omit it
            role == "assistant" and (m.get("tool_calls") or m.get("function_call"))
        ):
            raise missing(f"messages[{i}].content")
        text = _content_text(content, f"messages[{i}].content")
        chars += len(text)
        said.append((role, text))
        if i == 0:
            head = text[:256]
        if role == "user":
            last_user = text
    tools, other_tools = _tools(body)
    check_tool_choice(body.get("tool_choice"), tools, bool(tools or other_tools))
    json_mode, schema = _response_format(body)
    facts = RequestFacts(max_set, json_mode, schema, tools, other_tools, last_user)
    return ClientRequest(
        kind="chat",
        body=body,
        model=model,
        stream=stream,
        facts=facts,
        cue_text=last_user,
        prompt_chars=chars,
        affinity=_affinity(head),
        prompt=said,
        max_tokens=max_tokens,
    )


def parse_completion(raw: bytes) -> ClientRequest:
    body = _decode(raw)
    model, stream, max_tokens = _common(body, chat=False)
    max_set = max_tokens is not None
    prompt = body.get("prompt")
    if prompt is None:
        raise missing("prompt")
    if isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        text = "\n".join(prompt)
    elif isinstance(prompt, list) and all(isinstance(p, int) for p in prompt):
        text = ""  # token ids: nothing to search, size counted by ids
        chars = len(prompt) * 4
        facts = RequestFacts(max_tokens_set=max_set, json_mode=False, json_schema=None, tools={})
        return ClientRequest(
            kind="completions",
            body=body,
            model=model,
            stream=stream,
            facts=facts,
            cue_text=text,
            prompt_chars=chars,
            max_tokens=max_tokens,
        )
    else:
        raise bad_type("prompt", "a string, an array of strings or an array of token ids", prompt)
    facts = RequestFacts(
        max_tokens_set=max_set, json_mode=False, json_schema=None, tools={}, last_user=text
    )
    affinity = _affinity(text[:256])
    return ClientRequest(
        kind="completions",
        body=body,
        model=model,
        stream=stream,
        facts=facts,
        cue_text=text,
        prompt_chars=len(text),
        affinity=affinity,
        prompt=text,
        max_tokens=max_tokens,
    )
