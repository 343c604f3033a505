"""What bursts of large requests the engine refuses leave in a gateway's RSS
(python tests/bench_refused_memory.py [--mb 9.3] [--bursts 4] [--clients 16]).

A gateway in front of two fake engines; each burst is ``--clients`` chat bodies of
``--mb`` MB sent at once, each carrying the fake engine's ``[[*: status=400]]`` directive
(under the 10 MiB default limit the gateway parses each and sends it on, and relays the
engine's 400; a 503 is the cap on body bytes held at once). Prints the worker's VmRSS at
the start, after each burst (2 s later) and 3 s after the last.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import rules_for_tests, start_engine, start_gateway


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def post(url: str, body: bytes) -> int:
    req = urllib.request.Request(
        f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        e.read()
        e.close()
        return int(e.code)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=9.3)
    ap.add_argument("--bursts", type=int, default=4)
    ap.add_argument("--clients", type=int, default=16)
    args = ap.parse_args()
    size = int(args.mb * 1_000_000)
    hs, hs_url = start_engine("highspeed")
    st, st_url = start_engine("standard")
    gw, url = start_gateway(
        Path(tempfile.mkdtemp()), rules_for_tests(), {"highspeed": hs_url, "standard": st_url}
    )
    try:
        print(f"start: {rss_mb(gw.p.pid):.0f} MB", flush=True)
        for burst in range(args.bursts):
            bodies = [
                json.dumps(
                    {
                        "model": "auto",
                        "messages": [
                            {
                                "role": "user",
                                "content": f"[[*: status=400]] {burst} {i} " + "x" * size,
                            }
                        ],
                    }
                ).encode()
                for i in range(args.clients)
            ]
            with ThreadPoolExecutor(args.clients) as pool:
                codes = Counter(pool.map(lambda b: post(url, b), bodies))
            del bodies
            urllib.request.urlopen(urllib.request.Request(f"{hs_url}/_reset", b"", method="POST"))
            time.sleep(2)
            print(f"burst {burst + 1}: {dict(codes)}; RSS {rss_mb(gw.p.pid):.0f} MB", flush=True)
        time.sleep(3)
        print(f"3 s after: {rss_mb(gw.p.pid):.0f} MB", flush=True)
    finally:
        gw.stop()
        hs.stop()
        st.stop()


if __name__ == "__main__":
    main()
