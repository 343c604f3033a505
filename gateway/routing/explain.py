"""What the gateway would do with a request, without sending it (``gateway explain``,
``POST /admin/explain``). Pure: rules, policy and pool health in, a JSON-able dict out;
``classifier`` shows what decided the task and the learned model's top classes."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import orjson

from gateway.request.model import parse_chat, parse_completion
from gateway.routing.classify import Classifier
from gateway.routing.router import Router
from gateway.routing.textmodel import ModelFiles
from gateway.rules.effective import route_settings
from gateway.rules.schema import Route, Rules
from gateway.tenancy.tenants import OPEN, Effective


def explain(
    rules: Rules,
    request: dict[str, Any],
    eff: Effective | None = None,
    health: dict[str, bool] | None = None,
    files: ModelFiles | None = None,
) -> dict[str, Any]:
    """The routing decision for ``request`` as a JSON-able dict (nothing is sent).
    ``files``: the gateway's models already read (else the model file is read now)."""
    if "body" in request and isinstance(request["body"], dict):
        body, path = request["body"], request.get("path", "/v1/chat/completions")
        headers = {str(k).lower(): str(v) for k, v in (request.get("headers") or {}).items()}
    else:
        body, path, headers = request, "/v1/chat/completions", {}
    if "prompt" in body and "messages" not in body:
        path = "/v1/completions"
    parse = parse_completion if path.endswith("/v1/completions") else parse_chat
    req = parse(orjson.dumps(body))
    classifier = Classifier(rules, files=files)
    cls = classifier.classify(req, headers)
    d = Router(rules).decide(cls, health or {}, eff or OPEN)
    out = asdict(d)
    out["cls"] = asdict(cls)
    out["route_header"] = d.route_header
    route = _route(rules, d.rule, eff or OPEN)
    if route is not None:  # the rule's settings with its defaults filled in
        out["settings"] = route_settings(route, rules)
    # the model's view even where a header, the shape or a cue decided
    out["classifier"] = {
        "decided_by": cls.task_source,
        "top": [{"task": t, "score": p} for t, p in classifier.scores(req)[:3]],
    }
    if eff is not None and eff.tenant_id is not None:
        out["policy"] = {
            name: {"value": getattr(eff.policy, name), "level": eff.who(name)}
            for name in eff.source
            if name != "rules"
        }
    return out


def _route(rules: Rules, name: str, eff: Effective) -> Route | None:
    """The rule a decision names: the tenant's own first, then the file's, else the default."""
    if name == "default":
        return rules.default
    for r in (*(eff.policy.rules or ()), *rules.rules):
        if r.name == name:
            return r
    return None
