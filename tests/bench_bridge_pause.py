"""What a hand-back that never comes costs a stream: latency and the longest pause, with
``dispatch.bridge`` on and off, side by side, through the real gateway and fake engines.

    python -m tests.bench_bridge_pause [--rounds 5]

The fast tier's first token takes 3 s, its continuation's too (the hand-back waits its
0.2 s and gives up); the standard tier streams 16 words, 50 ms apart. Not a test: it
prints figures.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import openai

from tests.conftest import rules_for_tests, start_engine, start_gateway

TEXT = "Tea is a fine drink for the cold days of the year and the warm ones too"
PROMPT = f"q [[*: text={TEXT}; per=1; gap=0.05]] [[highspeed: delay=3]]"


def one(client: openai.OpenAI) -> tuple[float, float]:
    """(latency, the longest gap between two chunks), seconds."""
    t0 = last = time.monotonic()
    gap = 0.0
    with client.chat.completions.with_streaming_response.create(
        model="auto", messages=[{"role": "user", "content": PROMPT}], stream=True
    ) as r:
        for i, _ in enumerate(r.parse()):
            now = time.monotonic()
            gap = max(gap, now - last) if i else gap  # from the first chunk on
            last = now
    return time.monotonic() - t0, gap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    hs, hs_url = start_engine("highspeed", "--model", "fake-highspeed")
    st, st_url = start_engine("standard", "--model", "fake-standard")
    got: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    try:
        for bridge in (True, False) * 2:  # interleaved
            rules = rules_for_tests(ttft=5.0, total=10.0, stall=2.0)
            rules["default"]["hedge_after"] = 0.2
            rules["tiers"]["highspeed"]["continuation"] = "continue_final_message"
            rules["dispatch"]["bridge"] = bridge
            urls = {"highspeed": hs_url, "standard": st_url}
            proc, url = start_gateway(Path(tempfile.mkdtemp()), rules, urls)
            c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=20)
            got[bridge] += [one(c) for _ in range(args.rounds)]
            proc.stop()
    finally:
        hs.stop()
        st.stop()
    for bridge, v in got.items():
        lat = statistics.median(x for x, _ in v) * 1000
        gap = statistics.median(g for _, g in v) * 1000
        print(
            f"bridge {'on ' if bridge else 'off'}: latency p50 {lat:.0f} ms, "
            f"longest pause p50 {gap:.0f} ms (n={len(v)})"
        )


if __name__ == "__main__":
    main()
