"""The ``python`` checks users write: a class from an installed package.

``object: "pkg.mod:Class"`` imports it; ``entry_point: name`` finds it in the
``llm_gateway.checks`` entry-point group (a package declares it in its ``pyproject.toml``,
like flake8's plugins). It is built as ``Class(**options)`` (or
``Class.from_options(name, options)`` where it has that), and must implement the check
protocol (:class:`gateway.checks.base.Check`; :class:`~gateway.checks.base.BaseCheck` gives
the defaults): its ``abilities`` say whether it runs on partial text, where its good prefix
is, its cost. The gateway never asks its type.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any, Final

from gateway.checks.base import Abilities, Check

__all__ = ("ENTRY_POINT_GROUP", "load_plugin")

ENTRY_POINT_GROUP: Final = "llm_gateway.checks"
_NEEDS: Final = ("run", "run_partial", "good_prefix", "guard", "verdict")


def _resolve(spec: Any) -> Any:
    if spec.entry_point is not None:
        found = metadata.entry_points(group=ENTRY_POINT_GROUP, name=spec.entry_point)
        if not found:
            raise ValueError(
                f"no entry point {spec.entry_point!r} in group {ENTRY_POINT_GROUP!r} "
                "(is the package installed?)"
            )
        return next(iter(found)).load()
    assert spec.object is not None
    module, _, attr = spec.object.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"cannot import {module!r}: {e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module!r} has no {attr!r}")
        obj = getattr(obj, part)
    return obj


def load_plugin(name: str, spec: Any) -> Check:
    """The plugin's check (``spec``: a ``python`` check's spec: ``object`` or
    ``entry_point``, ``options``), built and checked against the protocol; ``ValueError`` says
    what is wrong (not importable, not a check, refused its options)."""
    try:
        cls = _resolve(spec)
        make = getattr(cls, "from_options", None)
        check = make(name, dict(spec.options)) if callable(make) else cls(**spec.options)
    except ValueError:
        raise
    except Exception as e:  # the user's code: whatever it raised, said with its type
        raise ValueError(f"the plugin failed to build: {type(e).__name__}: {e}") from None
    missing = [m for m in _NEEDS if not callable(getattr(check, m, None))]
    if missing:
        raise ValueError(
            f"{type(check).__name__} is not a check: no {', '.join(missing)} "
            "(subclass gateway.checks.base.BaseCheck for the defaults)"
        )
    if not isinstance(getattr(check, "abilities", None), Abilities):
        raise ValueError(f"{type(check).__name__}.abilities is not an Abilities")
    if not getattr(check, "name", "") or check.name != name:
        try:
            check.name = name  # the rules' name for it is its name
        except AttributeError:
            raise ValueError(f"{type(check).__name__}'s name is not {name!r}") from None
    return check  # type: ignore[no-any-return]
