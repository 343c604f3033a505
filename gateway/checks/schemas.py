"""Compiled JSON-schema validators for the structured checks, and the parse of the last
text they share (:mod:`gateway.checks.structured`).

Client-supplied regular expressions (``pattern``, ``patternProperties``) never run on
Python's backtracking ``re``: they are compiled with RE2 (google-re2, linear time in the
input) and swapped into the compiled validator. A schema whose patterns RE2 refuses
(backreferences, lookaround, huge repetitions) or that is larger than ``SCHEMA_MAX_BYTES``
is not checked at all, like any schema that cannot be compiled: a 343-byte pattern with
catastrophic backtracking once froze the event loop, and every tenant with it, for seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import fastjsonschema
import orjson
import re2  # type: ignore[import-untyped]

__all__ = ("SCHEMA_CACHE_SIZE", "SCHEMA_MAX_BYTES", "JsonParseMemo", "SchemaValidators")

SCHEMA_CACHE_SIZE: Final = 256
"""Compiled JSON-schema validators kept per ``SchemaValidators`` (least recently used out)."""

SCHEMA_MAX_BYTES: Final = 64 * 1024
"""A larger schema is not compiled (generating and exec-ing its validator costs too much)."""

PATTERN_MAX_CHARS: Final = 4096
RE2_MAX_MEM: Final = 4 << 20
"""Bytes of automaton per client pattern; RE2 refuses a pattern that needs more."""
_VALUE_KEYWORDS: Final = frozenset({"enum", "const", "default", "examples"})


class _Unsupported(Exception):
    """A schema part the gateway will not run (a pattern RE2 refuses, say)."""


def _client_patterns(schema: Any) -> dict[str, Any]:
    """Every ``pattern`` and ``patternProperties`` regex in ``schema``, compiled with RE2.

    Raises ``_Unsupported`` when one is not a string, too long, or refused by RE2.
    """
    found: dict[str, Any] = {}
    for node in _schema_objects(schema):
        texts = list(node.get("patternProperties") or ())
        if isinstance(node.get("pattern"), str):
            texts.append(node["pattern"])
        for text in texts:
            if text not in found:
                found[text] = _re2(text)
    return found


def _schema_objects(schema: Any) -> Iterator[dict[str, Any]]:
    """Every object in a schema that may hold keywords (not inside ``const``, ``enum``
    and the like, whose values are data)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            yield node
            stack.extend(v for k, v in node.items() if k not in _VALUE_KEYWORDS)


def _re2(text: Any) -> Any:
    if not isinstance(text, str) or len(text) > PATTERN_MAX_CHARS:
        raise _Unsupported("pattern too long or not a string")
    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False  # a refused pattern is the client's text: not for our log
    try:
        return re2.compile(text, options)
    except re2.error as exc:
        raise _Unsupported(f"pattern {text[:40]!r}: {exc}") from None


def _defuse_required(schema: Any, patterns: dict[str, Any]) -> None:
    """Spare fastjsonschema's compile-time ``re.search`` of required names.

    With ``additionalProperties: false``, fastjsonschema tests each required name that is
    not in ``properties`` against every ``patternProperties`` regex with Python's ``re``
    while compiling. RE2 answers instead: a name no pattern matches makes the schema
    invalid; one that matches is listed in ``properties`` as ``{}`` (it was not
    "additional" anyway, and its pattern's subschema still applies).
    """
    for node in _schema_objects(schema):
        props, pprops, required = (
            node.get(k) for k in ("properties", "patternProperties", "required")
        )
        if node.get("additionalProperties", True) or not pprops or not isinstance(required, list):
            continue
        props = node.setdefault("properties", {})
        if not isinstance(props, dict):
            raise _Unsupported("properties is not an object")
        for name in required:
            if not isinstance(name, str) or name in props:
                continue
            if not any(patterns[p].search(name) for p in pprops):
                raise _Unsupported(f"required {name!r} is not allowed")
            props[name] = {}


def _refuse_remote_ref(uri: str) -> Any:
    raise fastjsonschema.JsonSchemaDefinitionException(f"remote $ref not allowed: {uri}")


class _RefuseEveryScheme(Mapping[str, Callable[[str], Any]]):
    """A fastjsonschema ``handlers`` mapping that claims every URI scheme and refuses it.

    fastjsonschema fetches a "$ref" it cannot find in the schema itself with urllib unless a
    handler claims the URI's scheme, and client schemas must never make the gateway do I/O
    (SSRF). Listing schemes is not enough: an unlisted one ("gopher:", "custom:") falls
    through to urllib, and even a "#..." ref goes remote under an "$id" with a fragment.
    """

    __slots__ = ()

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        return _refuse_remote_ref

    def __contains__(self, scheme: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


_NO_REMOTE_REFS: Final = _RefuseEveryScheme()


def _has_remote_ref(schema: Any) -> bool:
    """True when any "$ref" in the schema points outside the document (not "#...").

    Such schemas are not compiled at all (cheap early exit); ``_NO_REMOTE_REFS`` is what
    guarantees that compiling never fetches anything.
    """
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref is not None and not (isinstance(ref, str) and ref.startswith("#")):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


Validator = Callable[[Any], object]


class SchemaValidators:
    """Bounded cache of compiled JSON-schema validators, keyed by the sorted-keys JSON dump.

    Compiling (fastjsonschema generates and ``exec``s Python code) costs milliseconds, so each
    distinct schema is compiled once; at most ``max_entries`` are kept, least recently used
    out. A schema that cannot be compiled (invalid, unsupported, remote "$ref", not JSON
    serializable) is cached as None and every answer passes against it: a bad schema is the
    client's problem, not the model's, and retrying on another tier would not help.
    """

    __slots__ = ("_max_entries", "_validators")

    def __init__(self, max_entries: int = SCHEMA_CACHE_SIZE) -> None:
        self._max_entries = max(max_entries, 1)
        self._validators: dict[bytes, Validator | None] = {}

    def __len__(self) -> int:
        return len(self._validators)

    def get(self, schema: dict[str, Any]) -> Validator | None:
        """The compiled validator, or None when the schema cannot be compiled."""
        try:
            key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            return None
        validators = self._validators
        try:
            validator = validators.pop(key)
        except KeyError:
            validator = self._compile(key)
            if len(validators) >= self._max_entries:
                del validators[next(iter(validators))]
        validators[key] = validator  # (re)insert as most recently used
        return validator

    @staticmethod
    def _compile(key: bytes) -> Validator | None:
        # Compile a fresh copy: fastjsonschema rewrites "$ref"s in the schema it is given.
        if len(key) > SCHEMA_MAX_BYTES:
            return None
        schema = orjson.loads(key)
        if not isinstance(schema, dict | bool) or _has_remote_ref(schema):
            return None
        try:
            patterns = _client_patterns(schema)
            _defuse_required(schema, patterns)
            validator: Validator = fastjsonschema.compile(
                schema, handlers=_NO_REMOTE_REFS, use_default=False, detailed_exceptions=False
            )
        except Exception:  # invalid schema, a pattern RE2 refuses, a generator bug
            return None
        if not patterns:
            return validator
        compiled = getattr(validator, "__globals__", {}).get("REGEX_PATTERNS")
        if not isinstance(compiled, dict):
            return None  # a fastjsonschema we do not know: never run client regexes on re
        for text in patterns.keys() & compiled.keys():
            compiled[text] = patterns[text]  # the same search(), in linear time
        return validator

    def error(self, schema: dict[str, Any], data: Any) -> str | None:
        """Why ``data`` violates ``schema``; None when it conforms or cannot be checked."""
        validator = self.get(schema)
        if validator is None:
            return None
        try:
            validator(data)
        except fastjsonschema.JsonSchemaValueException as exc:
            return exc.message
        except Exception:  # the generated code choked on an odd schema: not the model's fault
            return None
        return None


class JsonParseMemo:
    """The parse of the last text seen, shared by ``json_valid`` and ``json_schema`` so one
    answer is parsed once. Matched by identity (``is``) of the text object; the one entry is
    replaced in a single assignment, so concurrent use only costs an extra parse."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[str | None, Any, str | None] = (None, None, None)

    def parse(self, text: str) -> tuple[Any, str | None]:
        """(value, None) when ``text`` is JSON, else (None, orjson's error message)."""
        last = self._last
        if last[0] is text:
            return last[1], last[2]
        value: Any = None
        error: str | None = None
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            error = str(exc) or "JSONDecodeError"
        self._last = (text, value, error)
        return value, error
