"""The first rules version of an empty store, claimed by a fleet at once, on a real Redis.

Eight replicas (each its own connection pool, as eight processes have) start on an empty
store, or find that the store came back empty, at the same moment: one version is recorded,
every replica runs it, and the history lists it alone.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import yaml

from gateway.rules.control import RulesControl
from gateway.rules.schema import Rules
from gateway.store.memory_store import MemoryStore
from gateway.store.redis_store import RedisStore
from tests.conftest import REDIS, rules_for_tests

REPLICAS = 8


def _texts() -> list[str]:
    """One rules text per replica, each a little different (a rolling upgrade's files)."""
    out = []
    for i in range(REPLICAS):
        data = rules_for_tests()
        data["default"]["checks"] = ["non_empty"] if i % 2 else []
        out.append(yaml.safe_dump(data) + f"# replica {i}\n")
    return out


async def _fleet(prefix: str, tmp: Path) -> tuple[list[RedisStore], list[RulesControl]]:
    stores = [RedisStore(REDIS, prefix) for _ in range(REPLICAS)]
    controls = []
    for i, (store, text) in enumerate(zip(stores, _texts(), strict=True)):
        path = tmp / f"rules-{i}.yaml"
        path.write_text(text)
        applied: list[Rules] = []
        controls.append(RulesControl(store, path, text, applied.append, None, 0))
    return stores, controls


def test_a_fleet_starting_on_an_empty_store_records_one_version(tmp_path: Path) -> None:
    prefix = f"gwtest:{uuid.uuid4().hex[:8]}:"

    async def scenario() -> None:
        stores, controls = await _fleet(prefix, tmp_path)
        try:
            await asyncio.gather(*(c.start() for c in controls))
            versions = await stores[0].rules_versions()
            current = await stores[0].current_rules()
            assert current is not None  # the claim whose SET NX came first: any of the eight
            assert [(v["version"], v["current"], v["by"]) for v in versions] == [
                (current[0], True, "startup")
            ]
            assert {(c.version, c.text) for c in controls} == {current}

            await stores[0].delete_prefix()  # the store came back empty
            recorded = await asyncio.gather(*(c.rerecord() for c in controls))
            assert sorted(recorded) == [False] * (REPLICAS - 1) + [True]
            versions = await stores[0].rules_versions()
            assert [(v["current"], v["by"]) for v in versions] == [(True, "re-recorded")]
            current = await stores[0].current_rules()
            assert current is not None and current[0] == versions[0]["version"]
            assert {(c.version, c.text) for c in controls} == {current}
        finally:
            await stores[0].delete_prefix()
            for c in controls:
                await c.close()
            for s in stores:
                await s.close()

    asyncio.run(scenario())


def test_a_current_version_whose_text_was_lost_is_replaced(tmp_path: Path) -> None:
    prefix = f"gwtest:{uuid.uuid4().hex[:8]}:"

    async def scenario() -> None:
        store = RedisStore(REDIS, prefix)
        try:
            await store.set_current_rules(7)  # names a text the store does not have
            version, text, ours = await store.claim_first_rules("a: 1\n", {"by": "test"})
            assert (text, ours) == ("a: 1\n", True)
            assert await store.current_rules() == (version, "a: 1\n")
            again = await store.claim_first_rules("b: 2\n", {"by": "test"})
            assert again == (version, "a: 1\n", False)
            assert [v["version"] for v in await store.rules_versions()] == [version]
        finally:
            await store.delete_prefix()
            await store.close()

    asyncio.run(scenario())


def test_eight_claims_over_a_lost_text_replace_it_once() -> None:
    prefix = f"gwtest:{uuid.uuid4().hex[:8]}:"

    async def scenario() -> None:
        stores = [RedisStore(REDIS, prefix) for _ in range(REPLICAS)]
        try:
            await stores[0].set_current_rules(7)  # names a text the store does not have
            got = await asyncio.gather(
                *(s.claim_first_rules(f"r: {i}\n", {"by": "test"}) for i, s in enumerate(stores))
            )
            current = await stores[0].current_rules()
            assert current is not None
            assert [g[2] for g in got].count(True) == 1  # one compare-and-set won
            assert {g[:2] for g in got} == {current}
            assert [v["version"] for v in await stores[0].rules_versions()] == [current[0]]
        finally:
            await stores[0].delete_prefix()
            for s in stores:
                await s.close()

    asyncio.run(scenario())


def test_the_memory_store_claims_the_same_way() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        assert await store.claim_first_rules("a: 1\n", {"by": "x"}) == (1, "a: 1\n", True)
        assert await store.claim_first_rules("b: 2\n", {"by": "y"}) == (1, "a: 1\n", False)
        assert [v["version"] for v in await store.rules_versions()] == [1]

    asyncio.run(scenario())
