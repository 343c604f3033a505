"""Process settings: one typed object, read from the environment once at start-up.

This is the only module that reads ``os.environ``. Everything else receives a
:class:`Settings` (or the parts of it it needs) from the app factory.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.storeurl import store_target

_POOL_ENV = re.compile(r"^GATEWAY_POOL_([A-Z0-9_]+)_URLS$")
_MODEL_ENV = re.compile(r"^GATEWAY_POOL_([A-Z0-9_]+)_MODEL$")
_TIER_ENV = re.compile(r"^GATEWAY_POOL_[A-Z0-9_]+_(URLS|MODEL)$")
# the settings read from a family of variables, one per tier, not from GATEWAY_<FIELD>
_FAMILIES = MappingProxyType(
    {"pool_urls": "GATEWAY_POOL_<TIER>_URLS", "pool_models": "GATEWAY_POOL_<TIER>_MODEL"}
)
# the repository's rules; an installed package carries a copy (gateway/routing_rules.yaml is a
# link to it in the repository, a file in a wheel)
_HERE = Path(__file__).resolve().parent
REPO_RULES = (
    _HERE.parent / "routing_rules.yaml"
    if (_HERE.parent / "routing_rules.yaml").is_file()
    else _HERE / "routing_rules.yaml"
)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: ``taskset``, a cpuset), not all
    the machine has."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GATEWAY_", extra="ignore", frozen=True)

    rules: Path | None = Field(default=None, description="routing_rules.yaml to load")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    admin_host: str = Field(default="127.0.0.1", description="the control plane's listener")
    admin_port: int = Field(default=8081, ge=0, le=65535)
    admin_url: str | None = Field(
        default=None, description="where `gateway admin` finds the admin API"
    )
    workers: int | Literal["auto"] = Field(
        default=1, description="data-plane processes sharing the ports; auto = one per usable CPU"
    )
    reuse_port: bool = Field(default=False, description="set by the supervisor for its workers")
    worker_id: str = Field(default="0", max_length=16, description="set by the supervisor")
    metrics_dir: Path | None = Field(
        default=None, description="set by the supervisor: where workers share their metrics"
    )
    drain_seconds: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="SIGTERM: /readyz says 503 and responses say Connection: close at once; "
        "in-flight requests and streams finish for this long, then open streams end with an "
        "error event and [DONE]; the process exits within this plus 3 s",
    )
    drain_listen_seconds: float = Field(
        default=2.0,
        ge=0,
        le=3600,
        description="SIGTERM: the listener stays open this long (within drain_seconds), "
        "answering with Connection: close, so load balancers and clients move off before "
        "idle connections are closed",
    )
    redis_url: str | None = Field(
        default=None,
        description="the shared store: redis://, rediss://, unix://, "
        "redis+sentinel://h1:p1,h2:p2/<master>/<db> or redis+cluster://h1:p1,h2:p2",
    )
    redis_prefix: str = Field(default="gw:", min_length=1, max_length=64)
    redis_timeout: float = Field(default=0.5, gt=0, le=10, description="a slower Redis is down")
    redis_max_connections: int = Field(
        default=128, ge=4, le=10_000, description="Redis connections per worker process"
    )
    redis_pool_wait: float = Field(
        default=0.5, gt=0, le=10, description="seconds to wait for a free Redis connection"
    )
    redis_breaker_failures: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="failed Redis calls in a row (over at least GATEWAY_REDIS_TIMEOUT) that "
        "open the breaker",
    )
    redis_probe_interval: float = Field(
        default=0.5, gt=0, le=60, description="seconds between probes while the breaker is open"
    )
    store_path: str = Field(
        default=".gateway/gateway.db",
        min_length=1,
        description="without Redis: the SQLite file that keeps tenants, keys, rules versions, "
        "usage and the audit log (shared by --workers N); ':memory:': forgotten at exit",
    )
    admin_token: SecretStr | None = None
    metrics_token: SecretStr | None = Field(
        default=None, description="when set, GET /metrics needs 'Authorization: Bearer <it>'"
    )
    metrics_tenant_label: bool = Field(
        default=False, description='label metrics with tenant ids (off: tenant="all")'
    )
    unready_when_saturated: bool = Field(
        default=False,
        description="/readyz answers 503 while requests wait in a tier's queue for an "
        "engine slot (a load balancer then sends new requests to another replica)",
    )
    key_secret: SecretStr | None = Field(
        default=None, description="HMAC secret for API key digests; shared by every replica"
    )
    policy_cache_ttl: float = Field(default=30.0, gt=0, description="re-read cached keys after")
    policy_stale_max: float = Field(
        default=300.0,
        gt=0,
        description="while the store is degraded, a cached key is served this long after it "
        "was last verified (a key revoked meanwhile stops working by then)",
    )
    policy_cache_max: int = Field(
        default=100_000, ge=1, description="API keys cached per worker (least recently used out)"
    )
    otlp_endpoint: str | None = Field(
        default=None, description="OTLP/HTTP collector, e.g. http://otel:4318; unset: no traces"
    )
    log_level: str = Field(default="info", pattern=r"^(debug|info|warning|error)$")
    access_log: bool = Field(
        default=False, description="a JSON line per request (off: failures, sampled)"
    )
    local_engines: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="start the local CPU engines for tiers on 127.0.0.1 ports nobody answers",
    )
    rules_watch_interval: float = Field(default=1.0, ge=0, description="0: don't watch the file")
    body_timeout: float = Field(
        default=30.0, gt=0, le=3600, description="a request body must arrive within this"
    )
    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, le=512 * 1024 * 1024)
    max_body_bytes_in_flight: int = Field(
        default=64 << 20,
        ge=1 << 20,
        description="request bodies over 256 KiB a worker holds at once (by declared size); "
        "one more gets a 503 with Retry-After, unless it is the only one",
    )
    idle_timeout: float = Field(
        default=15.0,
        gt=0,
        le=3600,
        description="a connection is closed after this long without a complete request head "
        "(an idle keep-alive, a connection that sends nothing, headers that trickle in)",
    )
    max_connections: int = Field(default=8192, ge=1, description="open per listener and worker")
    reserve_max_tokens: int = Field(
        default=4096, ge=1, description="reserved against a budget when a request has no max_tokens"
    )
    pool_urls: dict[str, tuple[str, ...]] = Field(  # tier (lower case) -> URLs
        default_factory=dict, description="comma-separated base URLs of a tier's engines"
    )
    pool_models: dict[str, str] = Field(  # tier (lower case) -> model name
        default_factory=dict, description="the model name sent to a tier's engines"
    )
    cache_max_bytes: int = Field(
        default=256 << 20, ge=1 << 20, description="the in-process response cache, in total"
    )
    cache_tenant_max_bytes: int = Field(
        default=64 << 20, ge=64 << 10, description="one tenant's response cache (either store)"
    )
    cache_embed_threads: int = Field(
        default=1, ge=1, le=64, description="BLAS threads of the local embedder"
    )
    cors_origins: str = Field(
        default="",
        description="comma-separated origins allowed to call the data plane from a browser "
        "('*': any); empty: no CORS headers",
    )
    trusted_proxies: str = Field(
        default="",
        description="comma-separated addresses or networks (CIDR) of the reverse proxies in "
        "front of the admin listener: from them, X-Forwarded-Proto and X-Forwarded-For are "
        "believed (the console's cookie is Secure behind a proxy that took TLS, login "
        "attempts are throttled per real client); empty: nobody's",
    )

    @field_validator("pool_urls")
    @classmethod
    def _urls_are_http(cls, v: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for name, urls in v.items():
            if not urls:
                raise ValueError(f"GATEWAY_POOL_{name.upper()}_URLS is empty")
            for url in urls:
                if not url.startswith(("http://", "https://")):
                    raise ValueError(
                        f"GATEWAY_POOL_{name.upper()}_URLS: {url!r} is not an http(s) URL"
                    )
        return v

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, v: str) -> str:
        _networks(v)  # raises ValueError naming the entry that is not an address or network
        return v

    @field_validator("redis_url")
    @classmethod
    def _store_url(cls, v: str | None) -> str | None:
        if v is not None:
            store_target(v)  # raises ValueError with one line saying what is wrong
        return v

    @model_validator(mode="after")
    def _secret_with_redis(self) -> Settings:
        if self.redis_url and self.key_secret is None:
            raise ValueError(
                "GATEWAY_KEY_SECRET is required with GATEWAY_REDIS_URL: every replica must "
                "hash API keys with the same secret"
            )
        if self.admin_token is not None and len(self.admin_token.get_secret_value()) < 16:
            raise ValueError("GATEWAY_ADMIN_TOKEN must be at least 16 characters")
        return self

    @field_validator("workers")
    @classmethod
    def _workers_positive(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 1 <= v <= 256:
            raise ValueError("GATEWAY_WORKERS must be 1..256 or 'auto'")
        return v

    def worker_count(self) -> int:
        if self.workers == "auto":
            return usable_cpus()
        return self.workers

    @property
    def tenancy(self) -> bool:
        """Tenant keys are required when a shared store or an admin token is configured."""
        return self.redis_url is not None or self.admin_token is not None

    def cors(self) -> frozenset[str]:
        """The origins CORS answers for (``*``: any); empty: CORS is off."""
        return frozenset(o.strip().rstrip("/") for o in self.cors_origins.split(",") if o.strip())

    def proxies(self) -> tuple[IPNetwork, ...]:
        """The trusted proxies' networks (an address is a network of one)."""
        return _networks(self.trusted_proxies)

    def rules_path(self) -> Path:
        """--rules / GATEWAY_RULES, else ./routing_rules.yaml, else the repository's copy."""
        if self.rules is not None:
            return self.rules
        local = Path("routing_rules.yaml")
        return local if local.is_file() else REPO_RULES


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _networks(text: str) -> tuple[IPNetwork, ...]:
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            out.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(
                f"GATEWAY_TRUSTED_PROXIES: {part!r} is not an IP address or network "
                "(write 10.0.0.5 or 10.0.0.0/8)"
            ) from None
    return tuple(out)


def pool_urls_from_env(environ: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for key, value in environ.items():
        m = _POOL_ENV.match(key)
        if m:
            out[m.group(1).lower()] = tuple(u.strip() for u in value.split(",") if u.strip())
    return out


def pool_models_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in environ.items():
        m = _MODEL_ENV.match(key)
        if m and value.strip():
            out[m.group(1).lower()] = value.strip()
    return out


class UnknownVariableError(ValueError):
    """A ``GATEWAY_*`` variable that no setting reads: a typo would otherwise be ignored
    silently (``GATEWAY_REDIS_URLL`` and the gateway runs without its store)."""


def known_variables() -> tuple[str, ...]:
    """Every ``GATEWAY_*`` name a setting reads; a per-tier family by its pattern."""
    return tuple(_FAMILIES.get(f, f"GATEWAY_{f.upper()}") for f in Settings.model_fields)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One line for each ``GATEWAY_*`` variable of ``environ`` that no setting reads, with
    the nearest known name. Any case counts: pydantic-settings reads names in any case."""
    fixed = {f"GATEWAY_{f.upper()}" for f in Settings.model_fields if f not in _FAMILIES}
    out = []
    for key in sorted(environ):
        name = key.upper()
        if not name.startswith("GATEWAY_") or name in fixed or _TIER_ENV.match(key):
            continue
        near = difflib.get_close_matches(name, [*fixed, *_family_guesses(name)], n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        out.append(f"{key} is not a setting{hint}")
    return out


def _family_guesses(name: str) -> list[str]:
    """``GATEWAY_POOL_FAST_URL`` is nearest ``GATEWAY_POOL_FAST_URLS``, not the pattern."""
    rest = name.removeprefix("GATEWAY_POOL_")
    if rest != name and "_" in rest.strip("_"):
        tier = rest.rsplit("_", 1)[0]
        return [f"GATEWAY_POOL_{tier}_URLS", f"GATEWAY_POOL_{tier}_MODEL"]
    return list(_FAMILIES.values())


def load_settings(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Settings from the environment (or ``environ``), with explicit overrides on top.

    Raises :class:`UnknownVariableError` for a ``GATEWAY_*`` variable no setting reads."""
    env = os.environ if environ is None else environ
    unknown = unknown_variables(env)
    if unknown:
        raise UnknownVariableError("; ".join(unknown))
    values: dict[str, object] = {
        "pool_urls": pool_urls_from_env(env),
        "pool_models": pool_models_from_env(env),
    }
    if environ is not None:
        for field in Settings.model_fields:
            key = f"GATEWAY_{field.upper()}"
            if key in environ and field not in ("pool_urls", "pool_models"):
                values[field] = environ[key]
    values.update({k: v for k, v in overrides.items() if v is not None})
    if environ is None:
        return Settings(**values)  # type: ignore[arg-type]
    return Settings.model_validate(values)


def pin_blas_threads(n: int) -> None:
    """Cap the BLAS threads of numpy (the local embedder), unless the environment already
    does: on a busy machine more threads than cores make a small matmul 10-30x slower."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(n))


def env_reference(name: str) -> str | None:
    """The value a rules file names as ``os.environ/NAME`` (LiteLLM's syntax for secrets),
    read when the tier is built: keys never sit in the rules file."""
    return os.environ.get(name)


def litellm_offline() -> None:
    """LiteLLM downloads its model price map at import (with retries that stall start-up
    for seconds) unless told to use the copy it ships: a gateway must not depend on that."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
