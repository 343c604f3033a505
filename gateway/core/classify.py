"""Request classification: task type, SLA class and tier hint, as a frozen value.

Pure: a :class:`Classifier` is compiled once from the rules (cue lists lower-cased,
header names collected) and its :meth:`Classifier.classify` looks only at its
arguments. Explicit hints win over the request's shape:

1. headers ``x-gateway-task`` / ``x-gateway-sla`` / ``x-gateway-tier``, and a tier
   alias in ``model`` (``auto``, ``fast``, ``standard`` ... from ``aliases``);
2. shape: tools -> agent step; JSON ``response_format`` -> extraction; code cues
   (fences, FIM markers, language keywords) -> code; a long prompt with
   summarise verbs -> summarization; reasoning cues -> reasoning; else chat.

Cue search looks at most at ``classify.scan_chars`` characters of the last user turn
(its head and tail), so its cost does not grow with the prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.core.request import ClientRequest
from gateway.core.rules import Rules
from gateway.errors import InvalidField, ModelNotFound

H_TASK = "x-gateway-task"
H_SLA = "x-gateway-sla"
H_TIER = "x-gateway-tier"


@dataclass(frozen=True, slots=True)
class Classification:
    task: str
    task_source: str  # header | tools | json | code | summarization | reasoning | default
    sla: str
    sla_source: str  # header | task
    tier_hint: str | None
    hint_source: str | None  # header | model
    model: str  # as the client sent it
    has_tools: bool
    stream: bool
    prompt_tokens: int
    headers: tuple[tuple[str, str], ...] = ()  # only the headers that rules test

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def describe(self) -> str:
        return f"task={self.task}({self.task_source}) sla={self.sla}({self.sla_source})"


def _lower(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(i.lower() for i in items)


def _known(value: str | None, known: Mapping[str, object], header: str, what: str) -> str | None:
    """A hint header's value, if sent; a 400 naming the header when it is not one we know."""
    if value is not None and value not in known:
        raise InvalidField(
            f"Unknown {what} {value!r} in {header}; known: {', '.join(known)}.",
            param=header,
            code="invalid_value",
        )
    return value


class Classifier:
    """Compiled from one :class:`Rules`; rebuilt whenever the rules change."""

    def __init__(self, rules: Rules):
        c = rules.classify
        self._rules = rules
        self._scan = c.scan_chars
        self._fences = c.code.fences
        self._fim = c.code.fim_markers
        self._keywords = _lower(c.code.keywords)
        self._kw_hits = c.code.min_keyword_hits
        self._verbs = _lower(c.summarization.verbs)
        self._sum_min = c.summarization.min_prompt_tokens
        self._reasoning = _lower(c.reasoning.cues)
        self._model_tiers = {t.model: name for name, t in rules.tiers.items()}
        names: set[str] = set()
        for r in rules.rules:
            names.update(k.lower() for k in (r.when.headers or {}))
        self._rule_headers = tuple(sorted(names))
        self._hints = frozenset({H_TASK, H_SLA, H_TIER, *names})

    def classify(self, req: ClientRequest, headers: Mapping[str, str]) -> Classification:
        rules = self._rules
        for name in headers:
            if name[:10].lower() == "x-gateway-" and name.lower() not in self._hints:
                raise InvalidField(
                    f"Unknown hint header {name!r}; known: {H_TASK}, {H_SLA}, {H_TIER}.",
                    param=name.lower(),
                    code="invalid_value",
                )
        tier_hint, hint_source = self._tier_hint(req.model, headers.get(H_TIER))
        has_tools = bool(req.facts.tools)

        task = _known(headers.get(H_TASK), rules.tasks, H_TASK, "task")
        if task is not None:
            task_source = "header"
        else:
            task, task_source = self._shape(req, has_tools)

        sla = _known(headers.get(H_SLA), rules.sla_classes, H_SLA, "SLA class")
        if sla is not None:
            sla_source = "header"
        else:
            tc = rules.tasks.get(task)
            sla = tc.default_sla if tc else rules.default_sla
            sla_source = "task"

        hdrs: tuple[tuple[str, str], ...] = ()
        if self._rule_headers:
            hdrs = tuple((n, v) for n in self._rule_headers if (v := headers.get(n)) is not None)
        return Classification(
            task,
            task_source,
            sla,
            sla_source,
            tier_hint,
            hint_source,
            req.model,
            has_tools,
            req.stream,
            req.prompt_tokens,
            hdrs,
        )

    def _tier_hint(self, model: str, header: str | None) -> tuple[str | None, str | None]:
        aliases = self._rules.aliases
        if model in aliases:
            model_tier = aliases[model]
        elif model in self._model_tiers:
            model_tier = self._model_tiers[model]
        else:
            known = sorted({*aliases, *self._model_tiers})
            raise ModelNotFound(
                f"The model '{model}' does not exist; this gateway serves: {', '.join(known)}.",
                param="model",
            )
        if header is not None:
            if header in self._rules.tiers:
                return header, "header"
            if header in aliases and aliases[header] is not None:
                return aliases[header], "header"
            raise InvalidField(
                f"Unknown tier {header!r} in {H_TIER}; known: {', '.join(self._rules.tiers)}.",
                param=H_TIER,
                code="invalid_value",
            )
        return model_tier, ("model" if model_tier else None)

    def _shape(self, req: ClientRequest, has_tools: bool) -> tuple[str, str]:
        c = self._rules.classify
        if has_tools:
            return c.tools_task, "tools"
        if req.facts.json_mode:
            return c.json_task, "json"
        text = req.cue_text
        if len(text) > self._scan:
            half = self._scan // 2
            text = text[:half] + "\n" + text[-half:]
        for f in self._fences:
            if f in text:
                return c.code.task, "code"
        for f in self._fim:
            if f in text:
                return c.code.task, "code"
        low = text.lower()
        if self._keywords:
            hits = 0
            for k in self._keywords:
                if k in low:
                    hits += 1
                    if hits >= self._kw_hits:
                        return c.code.task, "code"
        if req.prompt_tokens >= self._sum_min:
            for v in self._verbs:
                if v in low:
                    return c.summarization.task, "summarization"
        for r in self._reasoning:
            if r in low:
                return c.reasoning.task, "reasoning"
        return c.default_task, "default"
