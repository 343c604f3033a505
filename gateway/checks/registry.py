"""Registry: every built-in check, found in the modules of this package, and configured
once per rules version.

A built-in check is a :class:`~gateway.checks.base.BaseCheck` subclass that states its
place in the catalogue (``catalogue = 30``) in any module of ``gateway/checks/``: the
catalogue is read from the modules themselves, so a new check is its module and its test,
and nothing else names it. ``CHECK_NAMES`` is the catalogue in the order the checks state.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterable, Mapping
from types import MappingProxyType, ModuleType
from typing import Final

import gateway.checks as _package
from gateway.checks.base import BaseCheck, BuildContext, Check, CheckResult
from gateway.checks.config import CheckSettings

__all__ = ("BUILTINS", "CHECK_NAMES", "PASS_CACHE", "build_checks", "discover")

_SKIP = frozenset({"base", "config", "registry"})


def discover(modules: Iterable[ModuleType]) -> Mapping[str, type[BaseCheck]]:
    """The check classes that ``modules`` define and that state a catalogue place, by
    name, in catalogue order. Two with one name are an error, found at import."""
    found: list[tuple[float, str, type[BaseCheck]]] = []
    for mod in modules:
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if (
                issubclass(cls, BaseCheck)
                and cls.__module__ == mod.__name__
                and cls.catalogue is not None
            ):
                found.append((cls.catalogue, cls.name, cls))
    found.sort(key=lambda f: (f[0], f[1]))
    names = [name for _, name, _ in found]
    if len(set(names)) != len(names) or "" in names:
        raise ValueError(f"built-in checks need names of their own: {names}")
    return MappingProxyType({name: cls for _, name, cls in found})


def _modules() -> list[ModuleType]:
    return [
        importlib.import_module(f"{_package.__name__}.{m.name}")
        for m in pkgutil.iter_modules(_package.__path__)
        if m.name not in _SKIP and not m.name.startswith("_")
    ]


BUILTINS: Final[Mapping[str, type[BaseCheck]]] = discover(_modules())
"""Every built-in check's class by name, in catalogue order."""
CHECK_NAMES: Final[tuple[str, ...]] = tuple(BUILTINS)
PASS_CACHE: Final[Mapping[str, CheckResult]] = MappingProxyType(
    {name: cls.passed for name, cls in BUILTINS.items()}
)
"""Each built-in's singleton "ok" result (``cls.passed``), by name."""


def build_checks(
    settings: CheckSettings, catalogue: Mapping[str, type[BaseCheck]] = BUILTINS
) -> dict[str, Check]:
    """Every check of ``catalogue`` (in its order), configured once.

    Checks of one build share what their ``build`` asks the context for (``json_schema``
    and ``tool_call_valid`` one compiled-validator cache, ``json_valid`` and
    ``json_schema`` one parse memo).
    """
    ctx = BuildContext(settings)
    return {name: cls.build(ctx) for name, cls in catalogue.items()}
