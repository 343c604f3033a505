"""The sampling fields' types and ranges, checked as OpenAI checks them (a cheap pass).

Each field is looked up once in the decoded body; a field the client did not send costs a
dict miss. A bad value is OpenAI's 400: ``invalid_request_error`` with the ``param`` named
and OpenAI's ``code`` (``invalid_type``, ``decimal_above_max_value``,
``integer_below_min_value``...), so the engine never sees it.

So are fields that contradict each other or that no engine could act on (each a 400 that
an engine would answer, after the body crossed the network and waited for a slot): a
``tool_choice`` that requires or names a tool when there are no tools (or names one that is
not among them), ``stream_options`` without ``stream``, an empty content array, a content
part of a type no chat engine takes, an ``image_url`` part without its URL.
"""

from __future__ import annotations

from collections.abc import Collection
from types import MappingProxyType
from typing import Any

from gateway.errors import InvalidField

# name -> (lowest, highest): numbers (ints or floats; never booleans)
_DECIMALS = MappingProxyType(
    {
        "temperature": (0.0, 2.0),
        "top_p": (0.0, 1.0),
        "presence_penalty": (-2.0, 2.0),
        "frequency_penalty": (-2.0, 2.0),
    }
)
# name -> (lowest, highest or None): integers
_INTEGERS = MappingProxyType({"n": (1, 128), "top_logprobs": (0, 20), "seed": (None, None)})
_BOOLEANS = ("parallel_tool_calls", "store")
_TOOL_CHOICES = frozenset({"none", "auto", "required"})
# content part types: OpenAI's, and the engines' own (vLLM's and SGLang's video and audio)
_PART_TYPES = ("text", "image_url", "input_audio", "file", "refusal", "audio")
_ENGINE_PART_TYPES = frozenset(("video_url", "audio_url"))
_NO_TOOLS = (
    "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
)
_MAX_STOPS = 4
_MAX_TEXT_LOGPROBS = 5


def json_type(v: object) -> str:
    """How OpenAI's errors name a JSON value's type: ``a string``, ``an array``, ``null``..."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def bad_type(param: str, expected: str, value: object) -> InvalidField:
    return InvalidField(
        f"Invalid type for '{param}': expected {expected}, but got {json_type(value)} instead.",
        param=param,
        code="invalid_type",
    )


def missing(param: str) -> InvalidField:
    return InvalidField(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def _bound(param: str, kind: str, side: str, limit: float, got: object) -> InvalidField:
    op = ">=" if side == "below" else "<="
    return InvalidField(
        f"Invalid '{param}': {kind} {side} {'minimum' if side == 'below' else 'maximum'} "
        f"value. Expected a value {op} {limit:g}, but got {got} instead.",
        param=param,
        code=f"{kind}_{side}_{'min' if side == 'below' else 'max'}_value",
    )


def check_sampling(body: dict[str, Any], chat: bool) -> None:
    """A 400 for the first sampling field of the wrong type or out of range; else nothing.
    ``chat``: ``logprobs`` is a boolean (chat) or an integer 0-5 (text completions)."""
    for p, (lo, hi) in _DECIMALS.items():
        v = body.get(p)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise bad_type(p, "a decimal", v)
        if v < lo:
            raise _bound(p, "decimal", "below", lo, v)
        if v > hi:
            raise _bound(p, "decimal", "above", hi, v)
    for p, (ilo, ihi) in _INTEGERS.items():
        v = body.get(p)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise bad_type(p, "an integer", v)
        if ilo is not None and v < ilo:
            raise _bound(p, "integer", "below", ilo, v)
        if ihi is not None and v > ihi:
            raise _bound(p, "integer", "above", ihi, v)
    for p in _BOOLEANS:
        v = body.get(p)
        if v is not None and not isinstance(v, bool):
            raise bad_type(p, "a boolean", v)
    _logprobs(body.get("logprobs"), chat)
    _stop(body.get("stop"))
    _tool_choice(body.get("tool_choice"))
    _stream_options(body.get("stream_options"))


def _logprobs(v: object, chat: bool) -> None:
    if v is None:
        return
    if chat:
        if not isinstance(v, bool):
            raise bad_type("logprobs", "a boolean", v)
        return
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad_type("logprobs", "an integer", v)
    if v < 0:
        raise _bound("logprobs", "integer", "below", 0, v)
    if v > _MAX_TEXT_LOGPROBS:
        raise _bound("logprobs", "integer", "above", _MAX_TEXT_LOGPROBS, v)


def _stop(v: object) -> None:
    if v is None or isinstance(v, str):
        return
    if not isinstance(v, list):
        raise bad_type("stop", "a string or an array of strings", v)
    if len(v) > _MAX_STOPS:
        raise InvalidField(
            f"Invalid 'stop': array too long. Expected an array with maximum length "
            f"{_MAX_STOPS}, but got an array with length {len(v)} instead.",
            param="stop",
            code="array_above_max_length",
        )
    for i, s in enumerate(v):
        if not isinstance(s, str):
            raise bad_type(f"stop[{i}]", "a string", s)


def _tool_choice(v: object) -> None:
    if v is None:
        return
    if isinstance(v, str):
        if v not in _TOOL_CHOICES:
            raise InvalidField(
                f"Invalid 'tool_choice': '{v}'. "
                "Supported values are: 'none', 'auto', and 'required'.",
                param="tool_choice",
                code="invalid_value",
            )
        return
    if not isinstance(v, dict):
        raise bad_type("tool_choice", "one of a string or an object", v)
    if not isinstance(v.get("type"), str):
        raise missing("tool_choice.type")


def _stream_options(v: object) -> None:
    if v is None:
        return
    if not isinstance(v, dict):
        raise bad_type("stream_options", "an object", v)
    inc = v.get("include_usage")
    if inc is not None and not isinstance(inc, bool):
        raise bad_type("stream_options.include_usage", "a boolean", inc)


def check_stream_options(body: dict[str, Any], stream: bool) -> None:
    """OpenAI's 400 for ``stream_options`` on a request that does not stream."""
    if body.get("stream_options") is not None and not stream:
        raise InvalidField(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
            code="invalid_value",
        )


def check_tool_choice(v: object, functions: Collection[str], any_tools: bool) -> None:
    """A 400 for a ``tool_choice`` the tools cannot satisfy: ``required`` or a named function
    without tools, or a function that is not among ``functions``."""
    if v == "required" and not any_tools:
        raise InvalidField(_NO_TOOLS, param="tool_choice", code="invalid_value")
    if not isinstance(v, dict) or v.get("type") != "function":
        return
    fn = v.get("function")
    if not isinstance(fn, dict):
        raise missing("tool_choice.function")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise missing("tool_choice.function.name")
    if not any_tools:
        raise InvalidField(_NO_TOOLS, param="tool_choice", code="invalid_value")
    if name not in functions:
        raise InvalidField(
            f"Invalid value for 'tool_choice': no function named '{name}' is in 'tools'.",
            param="tool_choice",
            code="invalid_value",
        )


def content_part_text(part: object, param: str) -> str | None:
    """A content part's text (None for a part without text: an image, audio); a 400 for a
    part that is not an object, of a type no engine takes, or without what its type needs."""
    if not isinstance(part, dict):
        raise bad_type(param, "an object", part)
    kind = part.get("type")
    text = part.get("text")
    if kind is None and isinstance(text, str):
        return text  # an untyped part with text: read as text, as the engines do
    if kind == "text" or (kind is None and text is not None):
        if not isinstance(text, str):
            raise bad_type(f"{param}.text", "a string", text)
        return text
    if kind is None:
        raise missing(f"{param}.type")
    if kind not in _PART_TYPES and kind not in _ENGINE_PART_TYPES:
        listed = ", ".join(f"'{t}'" for t in _PART_TYPES[:-1]) + f", and '{_PART_TYPES[-1]}'"
        raise InvalidField(
            f"Invalid value for '{param}.type': {str(kind)[:64]!r}. Supported values are: "
            f"{listed}.",
            param=f"{param}.type",
            code="invalid_value",
        )
    if kind == "image_url":
        _image_url(part.get("image_url"), f"{param}.image_url")
    return text if isinstance(text, str) else None


def _image_url(v: object, param: str) -> None:
    if v is None:
        raise missing(param)
    if isinstance(v, str):  # the short form some clients send: the URL itself
        url: object = v
    elif isinstance(v, dict):
        url = v.get("url")
    else:
        raise bad_type(param, "an object", v)
    if url is None or url == "":
        raise missing(f"{param}.url" if isinstance(v, dict) else param)
    if not isinstance(url, str):
        raise bad_type(f"{param}.url", "a string", url)
