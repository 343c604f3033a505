"""The sampling fields' types and ranges, checked as OpenAI checks them (a cheap pass).

Each field is looked up once in the decoded body; a field the client did not send costs a
dict miss. A bad value is OpenAI's 400: ``invalid_request_error`` with the ``param`` named
and OpenAI's ``code`` (``invalid_type``, ``decimal_above_max_value``,
``integer_below_min_value``...), so the engine never sees it.
"""

from __future__ import annotations

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
