"""What large bodies and silent connections cost a gateway process, with the body cap and
idle timeout against without them, side by side in one run (python tests/bench_connections.py).

16 clients each send a 9.3 MB chat body at once (under the 10 MiB limit: every head first,
then the bodies; the gateway parses each and sends it on to a fake engine, which answers
"ok"), while a probe times ``/healthz``; then 500 connections that send nothing. Prints
RSS before, at its peak and 5 s after the burst, the slowest ``/healthz``, the answers by
status, and the open file descriptors while the silent connections wait.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import Proc, rules_for_tests, start_engine, start_gateway

BODY = 9_300_000
CLIENTS = 16
SILENT = 500


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def gateway_pid(proc: Proc) -> int:  # the serve process itself (no supervisor with one worker)
    return proc.p.pid


def burst(url: str, pid: int) -> dict[str, object]:
    host, port = url.removeprefix("http://").split(":")
    filler = "x" * (BODY - 100)
    body = (
        '{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"[[*: text=ok]] '
        + filler
        + '"}]}'
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    statuses: Counter[str] = Counter()
    peak = [rss_mb(pid)]
    slowest = [0.0]
    done = threading.Event()
    heads_sent = threading.Barrier(CLIENTS)

    def client() -> None:
        with socket.create_connection((host, int(port)), timeout=60) as s:
            try:
                s.sendall(head)
                heads_sent.wait()
                s.sendall(body)
                first = s.recv(64)
                statuses[first.split(b" ")[1].decode() if first else "closed"] += 1
            except OSError as e:
                statuses[type(e).__name__] += 1

    def probe() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            urllib.request.urlopen(url + "/healthz", timeout=30).read()
            slowest[0] = max(slowest[0], time.perf_counter() - t0)
            peak[0] = max(peak[0], rss_mb(pid))
            time.sleep(0.01)

    p = threading.Thread(target=probe)
    p.start()
    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    p.join()
    time.sleep(5)
    return {
        "statuses": dict(statuses),
        "peak": peak[0],
        "after": rss_mb(pid),
        "healthz_max_ms": slowest[0] * 1000,
    }


def silent(url: str, pid: int, wait: float) -> tuple[int, int, int]:
    host, port = url.removeprefix("http://").split(":")
    before = fds(pid)
    socks = [socket.create_connection((host, int(port))) for _ in range(SILENT)]
    time.sleep(0.5)
    held = fds(pid)
    time.sleep(wait)
    later = fds(pid)
    for s in socks:
        s.close()
    return before, held, later


def main() -> None:
    hs, hs_url = start_engine("highspeed", "--model", "fake-highspeed")
    st, st_url = start_engine("standard", "--model", "fake-standard")
    engines = {"highspeed": hs_url, "standard": st_url}
    tmp = Path(tempfile.mkdtemp())
    runs = {
        "capped (defaults: 64 MiB of bodies, 15 s idle; idle 2 s here)": {
            "GATEWAY_IDLE_TIMEOUT": "2"
        },
        "uncapped (bodies 1 GiB, idle 3600 s)": {
            "GATEWAY_MAX_BODY_BYTES_IN_FLIGHT": str(1 << 30),
            "GATEWAY_IDLE_TIMEOUT": "3600",
        },
    }
    try:
        for name, env in runs.items():
            proc, url = start_gateway(tmp, rules_for_tests(), engines, env)
            try:
                pid = gateway_pid(proc)
                time.sleep(1)
                start = rss_mb(pid)
                b = burst(url, pid)
                before, held, later = silent(url, pid, 3.0)
                print(
                    f"{name}:\n  RSS {start:.0f} MB before, peak {b['peak']:.0f} MB, "
                    f"{b['after']:.0f} MB 5 s after; slowest /healthz {b['healthz_max_ms']:.0f}"
                    f" ms; answers {b['statuses']}\n  fds {before} -> {held} with {SILENT} "
                    f"silent connections -> {later} 3.5 s later"
                )
            finally:
                proc.stop()
    finally:
        hs.stop()
        st.stop()


if __name__ == "__main__":
    main()
