"""The functions of the ``json_assert`` expression language (:mod:`gateway.checks.expr`)
and the type rules its operators share."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

__all__ = ("FUNCTIONS", "MISSING", "fail_type", "is_num")

MISSING: Final = None  # a path that is not there reads as null


def is_num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _seq(x: Any) -> list[Any]:
    if not isinstance(x, list):
        raise TypeError("not a list")
    return x


def _sum(x: Any) -> Any:
    values = _seq(x)
    if not all(is_num(v) for v in values):
        raise TypeError("sum of non-numbers")
    return math.fsum(values)


def _minmax(f: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        values = _seq(args[0]) if len(args) == 1 else list(args)
        if not values or not (
            all(is_num(v) for v in values) or all(isinstance(v, str) for v in values)
        ):
            raise TypeError("min/max of mixed values")
        return f(values)

    return run


FUNCTIONS: Final[Mapping[str, tuple[int, int, Callable[..., Any]]]] = MappingProxyType(
    {
        # name: (min args, max args, function)
        "exists": (1, 1, lambda v: v is not MISSING),
        "len": (1, 1, lambda v: len(v) if isinstance(v, list | str | dict) else fail_type()),
        "sum": (1, 1, _sum),
        "min": (1, 64, _minmax(min)),
        "max": (1, 64, _minmax(max)),
        "abs": (1, 1, lambda v: abs(v) if is_num(v) else fail_type()),
        "round": (1, 2, lambda v, n=0: round(v, int(n)) if is_num(v) else fail_type()),
        "count": (1, 1, lambda v: sum(1 for x in _seq(v) if x)),
    }
)


def fail_type() -> Any:
    raise TypeError("wrong type")
