"""A small expression language over a JSON value, for ``json_assert`` checks: it reads
paths, compares and does arithmetic, and cannot run code (no names but the functions
below, no attribute access, no calls of anything else; parsed once, evaluated on values).

Grammar::

    expr   := or
    or     := and ("or" and)*
    and    := not ("and" not)*
    not    := "not" not | cmp
    cmp    := sum (("==" | "!=" | "<" | "<=" | ">" | ">=" | "in" | "not in") sum)*   (chained)
    sum    := term (("+" | "-") term)*
    term   := unary (("*" | "/" | "%") unary)*
    unary  := "-" unary | atom
    atom   := number | string | true | false | null | "[" [expr ("," expr)*] "]"
            | func "(" [expr ("," expr)*] ")" | path | "(" expr ")"
    path   := ("$" | name) ("." name | "[" integer "]" | "[*]")*

A path reads the answer (``$`` is the whole of it): ``total``, ``items[0].price``,
``items[*].price`` (a list of every item's price). A missing path is ``null``, and
``exists(path)`` is true when the path is there and not null. Functions: ``exists``,
``len``, ``sum``, ``min``, ``max``, ``abs``, ``round``, ``count`` (true values of a list).
``==`` between numbers allows the check's ``tolerance``. An expression that errors (a sum
of strings, ``null < 1``) is false.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from gateway.checks.exprfuncs import FUNCTIONS, MISSING, fail_type, is_num

__all__ = ("Expr", "Path", "evaluate", "parse", "parse_path", "read_path")

_TOKEN: Final = re.compile(
    r"""\s*(?:
    (?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
   |(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
   |(?P<op>==|!=|<=|>=|\[\*\]|[<>()\[\],.+\-*/%$])
   |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS: Final = frozenset({"and", "or", "not", "in", "true", "false", "null"})
MAX_CHARS: Final = 1000
MAX_DEPTH: Final = 32


@dataclass(frozen=True, slots=True)
class Path:
    steps: tuple[str | int | None, ...]  # a key, an index, None for [*]


@dataclass(frozen=True, slots=True)
class Expr:
    op: str  # "lit", "path", "list", "call", "neg", "not", "and", "or", "cmp", "bin"
    args: tuple[Any, ...]


class _Parser:
    def __init__(self, text: str):
        if len(text) > MAX_CHARS:
            raise ValueError(f"longer than {MAX_CHARS} characters")
        self.toks: list[tuple[str, str]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"cannot read {text[pos : pos + 12]!r}")
            kind = m.lastgroup or ""
            self.toks.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0
        self.depth = 0

    def peek(self, value: str | None = None) -> bool:
        if self.i >= len(self.toks):
            return False
        kind, v = self.toks[self.i]
        return value is None or (v == value and kind in ("op", "name"))

    def take(self, value: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise ValueError("the expression ends too soon")
        tok = self.toks[self.i]
        if value is not None and tok[1] != value:
            raise ValueError(f"expected {value!r}, found {tok[1]!r}")
        self.i += 1
        return tok

    def whole(self) -> Expr:
        e = self.expr()
        if self.i != len(self.toks):
            raise ValueError(f"unexpected {self.toks[self.i][1]!r}")
        return e

    def expr(self) -> Expr:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ValueError("nested too deep")
        try:
            return self._binary("or", self._and)
        finally:
            self.depth -= 1

    def _binary(self, word: str, sub: Callable[[], Expr]) -> Expr:
        e = sub()
        while self.peek(word):
            self.take()
            e = Expr(word, (e, sub()))
        return e

    def _and(self) -> Expr:
        return self._binary("and", self._not)

    def _not(self) -> Expr:
        if self.peek("not"):
            self.take()
            return Expr("not", (self._not(),))
        return self._cmp()

    def _cmp(self) -> Expr:
        first = self._sum()
        pairs: list[tuple[str, Expr]] = []
        while True:
            if (
                self.peek("not")
                and self.i + 1 < len(self.toks)
                and self.toks[self.i + 1][1] == "in"
            ):
                self.take(), self.take()
                pairs.append(("not in", self._sum()))
            elif any(self.peek(op) for op in ("==", "!=", "<", "<=", ">", ">=", "in")):
                pairs.append((self.take()[1], self._sum()))
            else:
                break
        return first if not pairs else Expr("cmp", (first, tuple(pairs)))

    def _sum(self) -> Expr:
        e = self._term()
        while self.peek("+") or self.peek("-"):
            e = Expr("bin", (self.take()[1], e, self._term()))
        return e

    def _term(self) -> Expr:
        e = self._unary()
        while self.peek("*") or self.peek("/") or self.peek("%"):
            e = Expr("bin", (self.take()[1], e, self._unary()))
        return e

    def _unary(self) -> Expr:
        signs = 0  # "- - x" read without recursion: a run of signs cannot blow the stack
        while self.peek("-"):
            self.take()
            signs += 1
        if signs > MAX_DEPTH:
            raise ValueError("nested too deep")
        e = self._atom()
        for _ in range(signs):
            e = Expr("neg", (e,))
        return e

    def _atom(self) -> Expr:
        kind, v = self.take()
        if kind == "num":
            return Expr("lit", (float(v) if any(c in v for c in ".eE") else int(v),))
        if kind == "str":
            return Expr("lit", (_unquote(v),))
        if v == "(":
            e = self.expr()
            self.take(")")
            return e
        if v == "[":
            return Expr("list", tuple(self._items("]")))
        if kind == "name" and v in ("true", "false", "null"):
            return Expr("lit", ({"true": True, "false": False, "null": None}[v],))
        if kind == "name" and v in FUNCTIONS and self.peek("("):
            self.take("(")
            args = self._items(")")
            lo, hi, _ = FUNCTIONS[v]
            if not lo <= len(args) <= hi:
                raise ValueError(f"{v}() takes {lo}-{hi} arguments")
            return Expr("call", (v, tuple(args)))
        if (kind == "name" and v not in _KEYWORDS) or v == "$":
            return Expr("path", (self._path(v),))
        raise ValueError(f"unexpected {v!r}")

    def _items(self, close: str) -> list[Expr]:
        items: list[Expr] = []
        if self.peek(close):
            self.take()
            return items
        while True:
            items.append(self.expr())
            if self.peek(","):
                self.take()
                continue
            self.take(close)
            return items

    def _path(self, first: str) -> Path:
        steps: list[str | int | None] = [] if first == "$" else [first]
        while True:
            if self.peek("."):
                self.take()
                kind, v = self.take()
                if kind != "name":
                    raise ValueError(f"a name after '.', not {v!r}")
                steps.append(v)
            elif self.peek("[*]"):
                self.take()
                steps.append(None)
            elif self.peek("[") and (index := self._index()) is not None:
                steps.append(index)
            else:
                return Path(tuple(steps))

    def _index(self) -> int | None:
        """``[n]`` or ``[-n]`` at the "[" (taken), else None (nothing taken)."""
        neg = self.i + 1 < len(self.toks) and self.toks[self.i + 1] == ("op", "-")
        j = self.i + 1 + neg
        digits = self.toks[j][1] if j + 1 < len(self.toks) else ""
        if not (digits.isdigit() and self.toks[j + 1][1] == "]"):
            return None
        self.i = j + 2
        return -int(digits) if neg else int(digits)


def _unquote(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s[1:-1])


def parse(text: str) -> Expr:
    """The expression, parsed; ``ValueError`` says what is wrong."""
    return _Parser(text).whole()


def parse_path(text: str) -> Path:
    e = parse(text)
    if e.op != "path":
        raise ValueError(f"{text!r} is not a path")
    path: Path = e.args[0]
    return path


def read_path(value: Any, path: Path) -> Any:
    """The value at ``path`` (a list where it has ``[*]``); ``None`` where it is missing."""
    current: list[Any] | Any = value
    fan = False
    for step in path.steps:
        items = current if fan else [current]
        out: list[Any] = []
        for item in items:
            if step is None:
                if isinstance(item, list):
                    out.extend(item)
                continue
            if isinstance(step, int):
                ok = isinstance(item, list) and -len(item) <= step < len(item)
                got = item[step] if ok else MISSING
            else:
                got = item.get(step, MISSING) if isinstance(item, dict) else MISSING
            if fan:
                if got is not MISSING:
                    out.append(got)
            else:
                out.append(got)
        fan = fan or step is None
        current = out if fan else out[0]
    return current


_COMPARE: Final[Mapping[str, Callable[[Any, Any], bool]]] = MappingProxyType(
    {
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
        "in": lambda a, b: a in b if isinstance(b, list | str | dict) else fail_type(),
        "not in": lambda a, b: a not in b if isinstance(b, list | str | dict) else fail_type(),
    }
)


def _equal(a: Any, b: Any, tol: float) -> bool:
    if is_num(a) and is_num(b):
        return bool(abs(a - b) <= tol * max(1.0, abs(a), abs(b)))
    return bool(a == b)


def _value(e: Expr, doc: Any, tol: float) -> Any:
    op, args = e.op, e.args
    if op == "lit":
        return args[0]
    if op == "path":
        return read_path(doc, args[0])
    if op == "list":
        return [_value(a, doc, tol) for a in args]
    if op == "call":
        return FUNCTIONS[args[0]][2](*(_value(a, doc, tol) for a in args[1]))
    if op == "neg":
        v = _value(args[0], doc, tol)
        return -v if is_num(v) else fail_type()
    if op == "not":
        return not _truth(args[0], doc, tol)
    if op == "and":
        return _truth(args[0], doc, tol) and _truth(args[1], doc, tol)
    if op == "or":
        return _truth(args[0], doc, tol) or _truth(args[1], doc, tol)
    if op == "cmp":
        left = _value(args[0], doc, tol)
        for sym, sub in args[1]:
            right = _value(sub, doc, tol)
            if sym in ("==", "!="):
                ok = _equal(left, right, tol) == (sym == "==")
            elif (
                sym in ("in", "not in")
                or (is_num(left) and is_num(right))
                or (isinstance(left, str) and isinstance(right, str))
            ):
                ok = _COMPARE[sym](left, right)
            else:
                raise TypeError("ordering of mixed values")
            if not ok:
                return False
            left = right
        return True
    sym, a, b = args  # "bin"
    x, y = _value(a, doc, tol), _value(b, doc, tol)
    if not (is_num(x) and is_num(y)):
        if sym == "+" and isinstance(x, str) and isinstance(y, str):
            return x + y
        raise TypeError("arithmetic on non-numbers")
    if sym == "+":
        return x + y
    if sym == "-":
        return x - y
    if sym == "*":
        return x * y
    return x / y if sym == "/" else x % y


def _truth(e: Expr, doc: Any, tol: float) -> bool:
    return bool(_value(e, doc, tol))


def evaluate(e: Expr, doc: Any, tolerance: float = 1e-9) -> bool:
    """Whether ``e`` holds on ``doc``; an expression that errors on it does not."""
    try:
        return _truth(e, doc, tolerance)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return False
