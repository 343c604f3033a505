"""Where the shared store is: ``GATEWAY_REDIS_URL`` parsed (one Redis, Sentinel or Cluster),
never echoing a password. Below the settings, which check the URL with it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal
from urllib.parse import unquote, urlsplit

__all__ = ("StoreTarget", "store_target")


@dataclass(frozen=True, slots=True)
class StoreTarget:
    """Where the shared store is, parsed from ``GATEWAY_REDIS_URL``.

    ``kind``: ``single`` (one Redis: ``redis://``, ``rediss://``, ``unix://``, passed to
    redis-py as it is), ``sentinel`` (``nodes`` are the Sentinels, ``master`` the service
    name they watch) or ``cluster`` (``nodes`` are start-up nodes of a Redis Cluster).
    """

    kind: Literal["single", "sentinel", "cluster"]
    url: str = field(default="", repr=False)
    nodes: tuple[tuple[str, int], ...] = ()
    master: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)


_SINGLE = ("redis://", "rediss://", "unix://")
_SCHEMES = "redis://, rediss://, unix://, redis+sentinel:// or redis+cluster://"


def store_target(url: str) -> StoreTarget:
    """Parse a store URL; a ValueError says in one line what is wrong (never echoing a
    password)."""
    if url.startswith(_SINGLE):
        try:
            urlsplit(url).port  # noqa: B018 (a bad port raises here, not at the first call)
        except ValueError:
            raise ValueError("store URL: the port is not a number") from None
        return StoreTarget("single", url=url)
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("redis+sentinel", "redis+cluster"):
        raise ValueError(f"unsupported store URL scheme {scheme + '://'!r}; use {_SCHEMES}")
    auth, _, rest = rest.rpartition("@")
    hosts, _, path = rest.partition("/")
    nodes = tuple(_node(h) for h in hosts.split(",") if h.strip())
    if not nodes:
        raise ValueError(f"{scheme}:// needs at least one host:port")
    user, _, password = auth.partition(":") if auth else ("", "", "")
    who = StoreTarget("cluster", nodes=nodes, username=unquote(user) or None)
    who = replace(who, password=unquote(password) or None)
    parts = [p for p in path.split("/") if p]
    if scheme == "redis+cluster":
        if parts:
            raise ValueError("redis+cluster:// takes no path (a cluster has only database 0)")
        return who
    if not 1 <= len(parts) <= 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise ValueError("redis+sentinel:// needs /<master-name> and optionally /<db>")
    db = int(parts[1]) if len(parts) == 2 else 0
    return replace(who, kind="sentinel", master=unquote(parts[0]), db=db)


def _node(hostport: str) -> tuple[str, int]:
    host, sep, port = hostport.strip().rpartition(":")
    if not sep or not port.isdigit() or not host or not 0 < int(port) < 65536:
        raise ValueError(f"store URL: {hostport.strip()!r} is not host:port")
    return host.strip("[]"), int(port)
