"""Where a request to the admin listener came from, believing a proxy only when it is one
of ``GATEWAY_TRUSTED_PROXIES``.

The listener reads no forwarding header by itself (uvicorn's ``proxy_headers`` is off), so
a client cannot claim another address or TLS it did not use. From a trusted proxy, two
headers are believed:

* ``X-Forwarded-Proto``: the last value, the one the proxy next to the gateway wrote (a
  proxy that appends leaves a client's own value in front of its own), says whether the
  client reached it over TLS;
* ``X-Forwarded-For``: read from the right, the first address that is not a trusted proxy
  is the client (the ones on its left are the client's own say, never believed).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from fastapi import Request

from gateway.settings import IPNetwork


@dataclass(frozen=True, slots=True)
class Origin:
    client: str  # the client's address ("unknown" when the server did not say)
    tls: bool  # it reached us, or the trusted proxy in front of us, over TLS


def origin(request: Request, proxies: tuple[IPNetwork, ...]) -> Origin:
    peer = request.client.host if request.client is not None else "unknown"
    tls = request.url.scheme == "https"
    if not _trusted(peer, proxies):
        return Origin(peer, tls)
    proto = request.headers.get("x-forwarded-proto", "")
    if proto:
        tls = proto.rsplit(",", 1)[-1].strip().lower() == "https"
    client = peer
    for hop in reversed(request.headers.get("x-forwarded-for", "").split(",")):
        hop = hop.strip()
        if not hop:
            continue
        client = hop
        if not _trusted(hop, proxies):
            break
    return Origin(client, tls)


def _trusted(address: str, proxies: tuple[IPNetwork, ...]) -> bool:
    if not proxies:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # a dual-stack listener's view of an IPv4 peer
    return any(ip in net for net in proxies)
