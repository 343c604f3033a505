"""A rollout step as an edit of the rules text: one rule's split weights changed, nothing
else (the operator's comments, order and layout stay, so the version's diff is the step).

The weights' scalars are found in the YAML's node tree (their exact place in the text),
replaced, and the result read back: it must differ from the text it came from in those
weights only, or the step is refused (:class:`StepRefused`): a split shared through a YAML
anchor with another rule, say.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml


class StepRefused(ValueError):
    """The rules text cannot be stepped by an edit of its weights (the reason says why)."""


def _get(node: yaml.Node, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            found: yaml.Node = v
            return found
    return None


def _route_node(root: yaml.Node, rule: str) -> yaml.Node:
    if rule == "default":
        found = _get(root, "default")
    else:
        rules = _get(root, "rules")
        items = rules.value if isinstance(rules, yaml.SequenceNode) else []
        found = next((r for r in items if _scalar(_get(r, "name")) == rule), None)
    if found is None:
        raise StepRefused(f"no rule {rule!r} in the rules text")
    return found


def _scalar(node: yaml.Node | None) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _number(w: float) -> str:
    return str(int(w)) if float(w).is_integer() else f"{w:g}"


def set_weights(text: str, rule: str, weights: Mapping[str, float]) -> str:
    """``text`` with the split of ``rule`` (or ``default``) weighing its arms (by label: the
    arm's name, else its tier) as ``weights`` says."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        raise StepRefused(f"the rules text does not parse: {e}") from None
    if root is None:
        raise StepRefused("the rules text is empty")
    split = _get(_route_node(root, rule), "split")
    if not isinstance(split, yaml.SequenceNode):
        raise StepRefused(f"rule {rule!r} has no split")
    edits: list[tuple[int, int, str]] = []
    for arm in split.value:
        label = _scalar(_get(arm, "name")) or _scalar(_get(arm, "tier"))
        weight = _get(arm, "weight")
        if label is None or label not in weights:
            continue
        if not isinstance(weight, yaml.ScalarNode):
            raise StepRefused(f"arm {label!r} of rule {rule!r} has no weight to change")
        edits.append((weight.start_mark.index, weight.end_mark.index, _number(weights[label])))
    if len(edits) != len(weights):
        raise StepRefused(f"rule {rule!r} lacks an arm of {sorted(weights)}")
    out = text
    for start, end, value in sorted(edits, reverse=True):
        out = out[:start] + value + out[end:]
    _verify(text, out, rule, weights)
    return out


def _verify(before: str, after: str, rule: str, weights: Mapping[str, float]) -> None:
    """``after`` reads as ``before`` with those weights: nothing else changed (a split
    shared through an anchor would change another rule too)."""
    old: Any = _unshared(yaml.safe_load(before))
    new: Any = yaml.safe_load(after)
    route = old["default"] if rule == "default" else _named(old["rules"], rule)
    for arm in route["split"]:
        label = arm.get("name") or arm.get("tier")
        if label in weights:
            arm["weight"] = weights[label]
    if old != new:
        raise StepRefused(f"changing the weights of rule {rule!r} would change more than them")


def _unshared(v: Any) -> Any:
    """A copy of a loaded YAML value in which no two places share one object (an alias)."""
    if isinstance(v, dict):
        return {k: _unshared(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_unshared(x) for x in v]
    return v


def _named(rules: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(r for r in rules if r.get("name") == name)
