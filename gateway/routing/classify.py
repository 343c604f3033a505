"""Request classification: task type, SLA class and tier hint, as a frozen value.

Pure: a :class:`Classifier` is compiled once from the rules (cue lists lower-cased,
header names collected) and its :meth:`Classifier.classify` looks only at its
arguments. Explicit hints win over the request's shape:

1. headers ``x-gateway-task`` / ``x-gateway-sla`` / ``x-gateway-tier``, and a tier
   alias in ``model`` (``auto``, ``fast``, ``standard`` ... from ``aliases``; a name no
   alias or tier names takes the most specific alias pattern that matches it, ``"*"``
   any name, and is a 404 ``model_not_found`` where none does);
2. shape: tools -> agent step; JSON ``response_format`` -> extraction;
3. the operator's cues in the rules: code (fences, FIM markers, language keywords),
   summarization (a long prompt with a summarise verb), reasoning;
4. the learned model (:mod:`gateway.routing.textmodel`) on the last user turn: its top
   class, or ``classify.model.uncertain_task`` when its probability is under
   ``classify.model.min_confidence``; with the model off, ``default_task``.

``task_source`` says what decided, and goes into ``x-gateway-route``: ``header``,
``tools``, ``json``, ``cue "prove"``, ``model 0.93``, ``uncertain code 0.41``, ``default``.
Cue search and the model look at most at ``scan_chars`` characters of the last user turn
(its head and tail), so their cost does not grow with the prompt.

``context_tokens`` estimates what the request puts in a context window (its prompt and
its tool definitions, ~4 characters a token), for the router's fit against each tier's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

import orjson

from gateway.errors import InvalidField, ModelNotFound
from gateway.request.model import ClientRequest
from gateway.routing.textmodel import MODEL_PATH, ModelFiles, TextModel
from gateway.rules.schema import Rules, RulesError

H_TASK = "x-gateway-task"
H_SLA = "x-gateway-sla"
H_TIER = "x-gateway-tier"
H_SESSION = "x-session-id"  # keeps a client on one arm of a canary split


@dataclass(frozen=True, slots=True, kw_only=True)
class Classification:
    task: str
    task_source: str  # header | tools | json | cue "..." | model 0.93 | uncertain x 0.41 | default
    sla: str
    sla_source: str  # header | task
    tier_hint: str | None
    hint_source: str | None  # header | model
    model: str  # as the client sent it
    has_tools: bool
    stream: bool
    prompt_tokens: int
    headers: tuple[tuple[str, str], ...] = ()  # only the headers that rules test
    max_tokens: int | None = None  # as the client set it
    scores: tuple[tuple[str, float], ...] = ()  # the model's top classes, when it was asked
    sticky: str = ""  # canary stickiness: "session:<x-session-id>" | "user:<user>" | ""
    affinity: int = 0  # the prompt head's hash: the stickiness of last resort
    alias: str | None = None  # the alias pattern ("*") that took a name nothing else names
    context_tokens: int = 0  # estimated prompt with tool definitions (the window fit)
    max_tokens_param: str = "max_tokens"  # the field the client set the limit with

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def describe(self) -> str:
        return f"task={self.task}({self.task_source}) sla={self.sla}({self.sla_source})"


def _sticky(req: ClientRequest, headers: Mapping[str, str]) -> str:
    """Who a canary split keeps on one arm: the session header, else the body's ``user``."""
    session = headers.get(H_SESSION)
    if session:
        return "session:" + session
    user = req.body.get("user")
    return "user:" + user if isinstance(user, str) and user else ""


def _tools_tokens(req: ClientRequest) -> int:
    """The tool definitions' share of the prompt (an engine renders them into it)."""
    tools = req.body.get("tools")
    return len(orjson.dumps(tools)) // 4 if isinstance(tools, list) and tools else 0


def _max_param(req: ClientRequest) -> str:
    body = req.body
    if body.get("max_tokens") is None and body.get("max_completion_tokens") is not None:
        return "max_completion_tokens"
    return "max_tokens"


def _lower(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(i.lower() for i in items)


def quote(cue: str) -> str:
    """A cue (or a client's model name) as ``x-gateway-route`` shows it: quoted,
    printable ASCII only."""
    s = cue.strip().encode("ascii", "backslashreplace").decode("ascii")
    return '"' + "".join(ch if " " <= ch <= "~" and ch != '"' else "?" for ch in s) + '"'


def _cues(items: tuple[str, ...], lower: bool = True) -> tuple[tuple[str, str], ...]:
    """(text searched for, source shown) pairs."""
    return tuple((i.lower() if lower else i, f"cue {quote(i)}") for i in items)


def load_model(rules: Rules, files: ModelFiles | None = None) -> TextModel | None:
    m = rules.classify.model
    if not m.enabled:
        return None
    path = Path(m.path) if m.path else MODEL_PATH
    return files.get(path) if files is not None else TextModel.load(path)


def check_model(rules: Rules, files: ModelFiles, source: str = "<rules>") -> None:
    """RulesError unless the rules' classifier builds, its model read into ``files`` (one a
    path names is read even while the model is off): a file that is not a model refuses the
    rules whole, before they are stored, and the event loop then finds the model read."""
    m = rules.classify.model
    try:
        if m.path and not m.enabled:
            files.get(Path(m.path))
        Classifier(rules, files=files)
    except (OSError, ValueError, TypeError) as e:
        raise RulesError(source, [f"classify.model.path: {m.path or MODEL_PATH}: {e}"]) from None


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

    def __init__(
        self,
        rules: Rules,
        served: Mapping[str, str] | None = None,
        files: ModelFiles | None = None,
    ):
        """``served``: tier -> the model its engines serve (configured or discovered);
        default: the models the rules name. ``files``: where the model is read once."""
        c = rules.classify
        self._rules = rules
        self._scan = c.scan_chars
        self._marks = _cues((*c.code.fences, *c.code.fim_markers), lower=False)
        self._keywords = _lower(c.code.keywords)
        self._kw_hits = c.code.min_keyword_hits
        self._verbs = _cues(c.summarization.verbs)
        self._sum_min = c.summarization.min_prompt_tokens
        self._reasoning = _cues(c.reasoning.cues)
        self._model = load_model(rules, files)
        self._min_conf = c.model.min_confidence
        self._uncertain = c.model.uncertain_task or c.default_task
        # a model class the rules do not know as a task is taken as the default task
        self._label_task = {
            label: (label if label in rules.tasks else c.default_task)
            for label in (self._model.labels if self._model else ())
        }
        if served is None:
            served = {n: t.model for n, t in rules.tiers.items() if t.model is not None}
        self._model_tiers = {model: name for name, model in served.items()}
        # aliases with a wildcard, the most specific first (the most characters that are not
        # wildcards; ties in the file's order): "claude-*haiku*" before "claude-*" before "*"
        patterns = [(k, v) for k, v in rules.aliases.items() if any(ch in k for ch in "*?[")]
        self._patterns = tuple(sorted(patterns, key=lambda kv: -len(kv[0].strip("*?"))))
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
        model_tier, alias = self._model_tier(req.model)
        tier_hint, hint_source = self._tier_hint(model_tier, headers.get(H_TIER))
        has_tools = bool(req.facts.tools or req.facts.other_tools)

        task = _known(headers.get(H_TASK), rules.tasks, H_TASK, "task")
        scores: tuple[tuple[str, float], ...] = ()
        if task is not None:
            task_source = "header"
        else:
            task, task_source = self._shape(req, has_tools)
            if task_source == "":
                task, task_source, scores = self._learned(req.cue_text)

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
            task=task,
            task_source=task_source,
            sla=sla,
            sla_source=sla_source,
            tier_hint=tier_hint,
            hint_source=hint_source,
            model=req.model,
            has_tools=has_tools,
            stream=req.stream,
            prompt_tokens=req.prompt_tokens,
            headers=hdrs,
            max_tokens=req.max_tokens,
            scores=scores,
            sticky=_sticky(req, headers),
            affinity=req.affinity,
            alias=alias,
            context_tokens=req.prompt_tokens + _tools_tokens(req),
            max_tokens_param=_max_param(req),
        )

    def _model_tier(self, model: str) -> tuple[str | None, str | None]:
        """The tier ``model`` pins (None: the rules decide) and the alias pattern that took
        it (None: an alias or tier model of that very name); 404 when nothing takes it."""
        aliases = self._rules.aliases
        if model in aliases:
            return aliases[model], None
        if model in self._model_tiers:
            return self._model_tiers[model], None
        for pattern, tier in self._patterns:
            if fnmatchcase(model, pattern):
                return tier, pattern
        patterns = [p for p, _ in self._patterns]
        known = sorted({*(a for a in aliases if a not in patterns), *self._model_tiers})
        also = f"; and names matching {', '.join(patterns)}" if patterns else ""
        raise ModelNotFound(
            f"The model '{model}' does not exist; this gateway serves: {', '.join(known)}{also}.",
            param="model",
        )

    def _tier_hint(
        self, model_tier: str | None, header: str | None
    ) -> tuple[str | None, str | None]:
        aliases = self._rules.aliases
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
        """Overrides from the request's shape and the rules' cues; ``("", "")``: none."""
        c = self._rules.classify
        if has_tools:
            return c.tools_task, "tools"
        if req.facts.json_mode:
            return c.json_task, "json"
        text = req.cue_text
        if len(text) > self._scan:
            half = self._scan // 2
            text = text[:half] + "\n" + text[-half:]
        for mark, source in self._marks:
            if mark in text:
                return c.code.task, source
        low = text.lower()
        if self._keywords:
            hits: list[str] = []
            for k in self._keywords:
                if k in low:
                    hits.append(k)
                    if len(hits) >= self._kw_hits:
                        return c.code.task, "cue " + "+".join(map(quote, hits))
        if req.prompt_tokens >= self._sum_min:
            for v, source in self._verbs:
                if v in low:
                    return c.summarization.task, source
        for r, source in self._reasoning:
            if r in low:
                return c.reasoning.task, source
        return "", ""

    def _learned(self, text: str) -> tuple[str, str, tuple[tuple[str, float], ...]]:
        """The model's verdict on ``text``: (task, source, top classes)."""
        if self._model is None or not text.strip():
            return self._rules.classify.default_task, "default", ()
        p = self._model.predict(text)
        top = p.ranked[:3]
        if p.confidence < self._min_conf:
            return self._uncertain, f"uncertain {p.label} {p.confidence:.2f}", top
        return self._label_task[p.label], f"model {p.confidence:.2f}", top

    def scores(self, req: ClientRequest) -> tuple[tuple[str, float], ...]:
        """Every class of the model with its probability, most likely first (``explain``)."""
        if self._model is None:
            return ()
        return tuple((k, round(v, 4)) for k, v in self._model.predict(req.cue_text).ranked)
