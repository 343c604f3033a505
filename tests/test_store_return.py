"""When the store returns, the admin API and the data plane answer again together.

The breaker's background probe runs on a cycle that began when each process's breaker
opened; a process recovered only at its next tick, so one (or one worker's admin listener)
could answer 503 for up to a probe interval after another was serving. Now a refused call
asks for a probe at once, and an admin call waits for that probe's verdict: with a probe
interval of 30 s, the cycle cannot be what brings either back here.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import rules_for_tests, start_gateway
from tests.redis_procs import RedisProc, redis_procs, wait_for
from tests.test_store_faults import store_state
from tests.test_tenancy import call, chat, new_tenant, tenancy_env

pytestmark = pytest.mark.processes


def test_the_admin_api_and_the_data_plane_answer_as_soon_as_the_store_does(
    engines: dict[str, str], tmp_path: Path
) -> None:
    with redis_procs() as procs:
        r = RedisProc(tmp_path, "--appendonly", "yes", "--appendfsync", "always")
        procs.append(r)
        env = {**tenancy_env("gwback:", r.url), "GATEWAY_REDIS_PROBE_INTERVAL": "30"}
        proc, base = start_gateway(tmp_path, rules_for_tests(), engines, env)
        try:
            _, _, key = new_tenant(proc.admin, {"fail_closed": True})
            assert chat(base, key)[0] == 200
            r.kill()
            assert wait_for(lambda: chat(base, key)[0] == 503, timeout=10)
            assert wait_for(lambda: store_state(base) == "degraded", timeout=10)
            assert call(proc.admin, "GET", "/admin/tenants")[0] == 503
            r.start()
            back = time.monotonic()
            # the first admin call after the store is back answers: it waited for a probe
            assert call(proc.admin, "GET", "/admin/tenants")[0] == 200
            admin_s = time.monotonic() - back
            assert wait_for(lambda: chat(base, key)[0] == 200, timeout=10)
            data_s = time.monotonic() - back
            assert admin_s < 2.0 and data_s < 2.0, (admin_s, data_s)
            assert store_state(base) == "ok"
        finally:
            proc.stop()


def test_the_data_plane_alone_brings_the_store_back(
    engines: dict[str, str], tmp_path: Path
) -> None:
    """No admin call at all: the data plane's own refused calls ask for the probe."""
    with redis_procs() as procs:
        r = RedisProc(tmp_path, "--appendonly", "yes", "--appendfsync", "always")
        procs.append(r)
        env = {**tenancy_env("gwback2:", r.url), "GATEWAY_REDIS_PROBE_INTERVAL": "30"}
        proc, base = start_gateway(tmp_path, rules_for_tests(), engines, env)
        try:
            _, _, key = new_tenant(proc.admin, {"fail_closed": True})
            assert chat(base, key)[0] == 200
            r.kill()
            assert wait_for(lambda: store_state(base) == "degraded", timeout=10)
            r.start()
            back = time.monotonic()
            assert wait_for(lambda: chat(base, key)[0] == 200, timeout=10)
            assert time.monotonic() - back < 2.0
        finally:
            proc.stop()
