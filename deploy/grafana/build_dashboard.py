"""Build the Grafana dashboard ``deploy/grafana/gateway-dashboard.json``.

``python -m deploy.grafana.build_dashboard [--out DIR] [--check]``. Panels are data (the
``SECTIONS`` table below); ids and grid positions are assigned here, so adding a panel
is one line. Metric and label names come from :mod:`gateway.telemetry.recorder`'s constants, with
the suffixes the OpenTelemetry Prometheus exporter adds (``_total`` to counters,
``_bucket``/``_sum``/``_count`` to histograms). The engine panels read SGLang's own
metrics (``sglang:*``, labelled ``model_name`` = the profile's ``served_model_name``).

The datasource is the ``DS_PROMETHEUS`` template variable, so the JSON works both when
imported in the UI and when provisioned from a file. ``tier``, ``task`` and ``tenant``
filter every panel whose metric carries that label (see :data:`FILTERABLE`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy import generator_main
from gateway.telemetry import recorder as tm

OUT_DIR = Path(__file__).resolve().parent
FILE_NAME = "gateway-dashboard.json"
UID = "llm-gateway"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
RATE = "[$__rate_interval]"
COUNTER, BUCKET = "_total", "_bucket"  # the Prometheus exporter's suffixes

#: dashboard variable per label; "model" filters the SGLang panels
VARIABLES = {tm.A_TIER: "tier", tm.A_TASK: "task", tm.A_TENANT: "tenant"}
SGLANG_MODEL_LABEL = "model_name"

_REQ = (tm.A_TIER, tm.A_TASK, tm.A_TENANT)
#: the dashboard filters each gateway metric carries (the labels of Telemetry._record)
FILTERABLE: dict[str, tuple[str, ...]] = {
    tm.M_REQUESTS: _REQ,
    tm.M_ERRORS: _REQ,
    tm.M_LATENCY: _REQ,
    tm.M_TTFT: _REQ,
    tm.M_TPOT: _REQ,
    tm.M_TOKENS: _REQ,
    tm.M_FALLBACKS: (tm.A_TIER, tm.A_TASK),
    tm.M_CHECK_FAILURES: (tm.A_TIER,),
    tm.M_ATTEMPT: (tm.A_TIER,),
    tm.M_OVERHEAD: (),
}


# -- PromQL ----------------------------------------------------------------------------------------
def selector(metric: str, suffix: str = "") -> str:
    """``metric+suffix{label=~"$var",...}`` for the dashboard filters the metric carries."""
    if metric.startswith("sglang:"):
        return f'{metric}{{{SGLANG_MODEL_LABEL}=~"$model"}}'
    matchers = ",".join(f'{label}=~"${VARIABLES[label]}"' for label in FILTERABLE[metric])
    return f"{metric}{suffix}{{{matchers}}}" if matchers else f"{metric}{suffix}"


def rate(metric: str, by: Sequence[str], suffix: str = COUNTER) -> str:
    return f"sum by ({', '.join(by)}) (rate({selector(metric, suffix)}{RATE}))"


def quantile(q: float, metric: str, by: Sequence[str]) -> str:
    return f"histogram_quantile({q}, {rate(metric, ('le', *by), BUCKET)})"


def legend(by: Sequence[str], prefix: str = "") -> str:
    return prefix + " ".join("{{" + label + "}}" for label in by)


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


def per_second(metric: str, by: Sequence[str]) -> list[Target]:
    return [Target(rate(metric, by), legend(by))]


def quantiles(metric: str, qs: Sequence[float], by: Sequence[str] = (tm.A_TIER,)) -> list[Target]:
    return [Target(quantile(q, metric, by), legend(by, f"p{round(q * 100)} ")) for q in qs]


def engine(metric: str, agg: str = "sum") -> list[Target]:
    expr = f"{agg} by ({SGLANG_MODEL_LABEL}) ({selector(metric)})"
    return [Target(expr, legend((SGLANG_MODEL_LABEL,)))]


# -- panels ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: list[Target]
    description: str = ""
    stack: bool = False


_T = (tm.A_TIER,)
# Both counters carry the same labels, so the ratio matches their series one to one.
_ERROR_RATIO = Target(f"{rate(tm.M_ERRORS, _T)} / {rate(tm.M_REQUESTS, _T)}", legend(_T))

# fmt: off
SECTIONS: list[tuple[str, list[Panel]]] = [
    ("Traffic", [
        Panel("Request rate by tier", "reqps", per_second(tm.M_REQUESTS, _T),
              "Requests answered per second, by the tier that answered.", stack=True),
        Panel("Error ratio by tier", "percentunit", [_ERROR_RATIO],
              "Requests answered with an error / all requests (tier 'none': failed "
              "before routing)."),
        Panel("Errors by kind", "reqps", per_second(tm.M_ERRORS, (tm.A_KIND,)),
              "Error code (or HTTP status) of requests answered with an error.", stack=True),
        Panel("Tokens in / out", "short", per_second(tm.M_TOKENS, (tm.A_TIER, tm.A_DIRECTION)),
              "Tokens per second as reported by the engines (usage)."),
    ]),
    ("Latency", [
        Panel("End-to-end latency P50/P95/P99", "s", quantiles(tm.M_LATENCY, (0.5, 0.95, 0.99)),
              "Whole request, fallbacks included."),
        Panel("Time to first token P50/P95/P99", "s", quantiles(tm.M_TTFT, (0.5, 0.95, 0.99)),
              "Streams only: first byte to the client."),
        Panel("Time per output token P50/P95", "s", quantiles(tm.M_TPOT, (0.5, 0.95))),
        Panel("Gateway overhead P50/P99", "s",
              quantiles(tm.M_OVERHEAD, (0.5, 0.99), by=(tm.A_STREAM,)),
              "Time spent in the gateway itself (total minus waiting on engines). Not "
              "filtered by tier/task/tenant: the metric has only the stream label."),
    ]),
    ("Fallbacks and checks", [
        Panel("Fallbacks by reason and tier", "reqps",
              per_second(tm.M_FALLBACKS, (tm.A_TIER, tm.A_REASON)),
              "Failed attempts that moved a request on, by the tier that failed. Not "
              "filtered by tenant.", stack=True),
        Panel("Check failures by check", "reqps",
              per_second(tm.M_CHECK_FAILURES, (tm.A_CHECK, tm.A_TIER)),
              "Quality checks that failed an answer. Filtered by tier only.", stack=True),
        Panel("Upstream attempt latency P95 by outcome", "s",
              quantiles(tm.M_ATTEMPT, (0.95,), by=(tm.A_TIER, tm.A_OUTCOME)),
              "One attempt on one tier: 'ok' or the failure kind. Filtered by tier only."),
        Panel("Upstream attempt latency P50 by outcome", "s",
              quantiles(tm.M_ATTEMPT, (0.5,), by=(tm.A_TIER, tm.A_OUTCOME))),
    ]),
    ("SGLang engines", [
        Panel("Running requests", "short", engine("sglang:num_running_reqs"),
              "Requests in the engines' running batch, by served model (tier)."),
        Panel("Queued requests", "short", engine("sglang:num_queue_reqs"),
              "Requests waiting for a batch slot."),
        Panel("Prefix cache hit rate", "percentunit", engine("sglang:cache_hit_rate", "avg"),
              "RadixAttention cache hit rate, averaged over replicas."),
        Panel("Generation throughput", "short", engine("sglang:gen_throughput"),
              "Output tokens per second, summed over replicas."),
    ]),
]
# fmt: on


# -- dashboard -------------------------------------------------------------------------------------
PANEL_W, PANEL_H, COLUMNS = 12, 8, 2


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    custom: dict[str, Any] = {"lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
    if panel.stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": PANEL_H, "w": PANEL_W, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit, "custom": custom}, "overrides": []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": t.expr,
                "legendFormat": t.legend,
                "range": True,
            }
            for i, t in enumerate(panel.targets)
        ],
    }


def panels() -> list[dict[str, Any]]:
    """Rows and their panels, ids from 1, two panels per grid row."""
    out: list[dict[str, Any]] = []
    y = 0
    for title, section in SECTIONS:
        out.append(
            {
                "id": len(out) + 1,
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        for i, panel in enumerate(section):
            x = (i % COLUMNS) * PANEL_W
            out.append(_panel(panel, len(out) + 1, x, y))
            if i % COLUMNS == COLUMNS - 1 or i == len(section) - 1:
                y += PANEL_H
    return out


def _query_variable(name: str, label: str, metric: str, label_name: str) -> dict[str, Any]:
    query = f"label_values({metric}, {label_name})"
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"var-{name}"},
        "definition": query,
        "refresh": 2,  # on time range change
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "hide": 0,
    }


def templating() -> list[dict[str, Any]]:
    datasource = {
        "type": "datasource",
        "name": "DS_PROMETHEUS",
        "label": "Prometheus",
        "query": "prometheus",
        "current": {},
        "options": [],
        "refresh": 1,
        "regex": "",
        "hide": 0,
    }
    requests = tm.M_REQUESTS + COUNTER
    gateway = [
        _query_variable(var, var.capitalize(), requests, label) for label, var in VARIABLES.items()
    ]
    model = _query_variable("model", "Engine model", "sglang:num_running_reqs", SGLANG_MODEL_LABEL)
    return [datasource, *gateway, model]


def dashboard() -> dict[str, Any]:
    return {
        "id": None,
        "uid": UID,
        "title": "LLM gateway",
        "description": "Two-tier LLM gateway (highspeed/standard) and its SGLang engines. "
        "Generated by deploy/grafana/build_dashboard.py.",
        "tags": ["llm-gateway", "sglang"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "templating": {"list": templating()},
        "panels": panels(),
    }


def render() -> dict[str, str]:
    return {FILE_NAME: json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"}


def main(argv: Sequence[str] | None = None) -> int:
    return generator_main(
        "python -m deploy.grafana.build_dashboard",
        "Build the Grafana dashboard.",
        render,
        OUT_DIR,
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
