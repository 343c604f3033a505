"""The gateway's own cost at fleet scale: how many gateway cores a fleet of GPU engines
needs, from the simulator's calibrated engine (``engines.sim_model``: an 8B model with FP8
and EAGLE-3 on one H100, 48 batch slots) and the gateway's measured CPU per request.

One engine at full load serves ``1 / (prefill + decode share)`` requests a second: the
prefill of a request's uncached tokens (one at a time on the GPU) plus its answer's tokens
at the full batch's time per token, shared by the batch's 48 requests. The request shapes
(answer tokens, uncached prompt tokens) are the ones measured in the routing run; the
gateway's CPU per request is the one measured there (this machine, prompts of 3-50 KB,
streamed answers) or the proxy benchmark's one-core figure (short prompts, 50-chunk
streams).
"""

from __future__ import annotations

from typing import Any

from engines.sim_model import make_profile

FLEET = 100  # engines (GPUs) in the fleet the table sizes
PROXY_STREAM_US = 1e6 / 2561  # the proxy benchmark's streams/s on one core (bench-proxy.md)
PEER = "smg-cache_aware"  # the router whose CPU per request the table shows beside ours


def engine_rps(answer_tokens: float, prefill_tokens: float) -> float:
    """Requests a second one highspeed engine serves at full load for this shape."""
    prof = make_profile("highspeed")
    batch = prof.max_running_requests
    decode_s = answer_tokens * prof.tpot_ms(batch) / 1000.0 / batch
    prefill_s = prof.prefill_ms(int(prefill_tokens)) / 1000.0 if prefill_tokens >= 1 else 0.0
    return 1.0 / (prefill_s + decode_s)


def rows(
    cells: list[dict[str, Any]], router: str = "gateway-1", load: str = "near"
) -> list[dict[str, Any]]:
    """Per workload: the engine's requests/s at full load, the gateway's CPU per request,
    and gateway cores per :data:`FLEET` engines (measured here, and at the proxy figure)."""
    out = []
    by = {(c["workload"], c["load"], c["router"]): c for c in cells}
    for c in cells:
        if c["router"] != router or c["load"] != load or not c.get("router_cpu_us"):
            continue
        peer = by.get((c["workload"], load, PEER), {}).get("router_cpu_us")
        rps = engine_rps(c["answer_tokens_mean"], c["prefill_tokens_mean"])
        out.append(
            {
                "workload": c["workload"],
                "answer_tokens": c["answer_tokens_mean"],
                "prefill_tokens": c["prefill_tokens_mean"],
                "engine_rps": rps,
                "gateway_us": c["router_cpu_us"],
                "peer_us": peer,
                "cores_measured": FLEET * rps * c["router_cpu_us"] / 1e6,
                "cores_proxy": FLEET * rps * PROXY_STREAM_US / 1e6,
            }
        )
    return out
