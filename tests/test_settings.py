"""``gateway.settings``: a ``GATEWAY_*`` variable no setting reads is refused by name."""

from __future__ import annotations

import pytest

from gateway.settings import UnknownVariableError, load_settings


@pytest.mark.parametrize(
    ("name", "nearest"),
    [
        ("GATEWAY_REDIS_URLL", "GATEWAY_REDIS_URL"),
        ("GATEWAY_ADMINTOKEN", "GATEWAY_ADMIN_TOKEN"),
        ("gateway_redis_url_", "GATEWAY_REDIS_URL"),
        ("GATEWAY_POOL_STANDARD_URL", "GATEWAY_POOL_STANDARD_URLS"),
        ("GATEWAY_POOL_HIGHSPEED_MODLE", "GATEWAY_POOL_HIGHSPEED_MODEL"),
        ("GATEWAY_POOL_URLS", "GATEWAY_POOL_<TIER>_URLS"),
    ],
)
def test_an_unknown_variable_is_refused_with_the_nearest_name(name: str, nearest: str) -> None:
    with pytest.raises(UnknownVariableError) as e:
        load_settings({name: "x"})
    assert str(e.value) == f"{name} is not a setting (did you mean {nearest}?)"


def test_every_unknown_variable_is_named_and_a_far_one_gets_no_guess() -> None:
    with pytest.raises(UnknownVariableError) as e:
        load_settings({"GATEWAY_PROT": "1", "GATEWAY_QQQQQQQQQQQQQQQQQQQQ": "1"})
    assert str(e.value) == (
        "GATEWAY_PROT is not a setting (did you mean GATEWAY_PORT?); "
        "GATEWAY_QQQQQQQQQQQQQQQQQQQQ is not a setting"
    )


def test_known_names_the_tier_families_and_other_prefixes_pass() -> None:
    env = {
        "GATEWAY_PORT": "9000",
        "gateway_host": "0.0.0.0",  # pydantic-settings reads names in any case
        "GATEWAY_POOL_STANDARD_URLS": "http://127.0.0.1:1",
        "GATEWAY_POOL_FAST_2_MODEL": "m",
        "GATEWAYS": "not ours",
        "MY_GATEWAY_URL": "not ours",
    }
    s = load_settings(env)
    assert s.port == 9000
    assert s.pool_urls == {"standard": ("http://127.0.0.1:1",)}
    assert s.pool_models == {"fast_2": "m"}
