"""``gateway admin ...``: the common admin API calls from a shell.

The token comes from ``--token`` or ``GATEWAY_ADMIN_TOKEN``; the admin listener from
``--url``, else ``GATEWAY_ADMIN_URL``, else ``GATEWAY_ADMIN_HOST``/``GATEWAY_ADMIN_PORT``
(127.0.0.1:8081). Output is the API's JSON, indented.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gateway.settings import Settings, load_settings

# command -> (method, path template, body kind)
CALLS: MappingProxyType[str, tuple[str, str, str]] = MappingProxyType(
    {
        "tenants-list": ("GET", "/admin/tenants", ""),
        "tenants-create": ("POST", "/admin/tenants", "tenant"),
        "tenants-get": ("GET", "/admin/tenants/{id}", ""),
        "tenants-delete": ("DELETE", "/admin/tenants/{id}", ""),
        "policy-get": ("GET", "/admin/tenants/{id}/policy", ""),
        "policy-set": ("PUT", "/admin/tenants/{id}/policy", "json"),
        "keys-list": ("GET", "/admin/tenants/{id}/keys", ""),
        "keys-create": ("POST", "/admin/tenants/{id}/keys", "key"),
        "keys-revoke": ("DELETE", "/admin/keys/{id}", ""),
        "keys-rotate": ("POST", "/admin/keys/{id}/rotate", ""),
        "usage": ("GET", "/admin/tenants/{id}/usage", ""),
        "rules-show": ("GET", "/admin/rules", ""),
        "rules-versions": ("GET", "/admin/rules/versions", ""),
        "rules-upload": ("PUT", "/admin/rules", "file"),
        "rules-reload": ("POST", "/admin/rules/reload", ""),
        "rules-rollback": ("POST", "/admin/rules/rollback", "version"),
        "pools": ("GET", "/admin/pools", ""),
        "audit": ("GET", "/admin/audit", ""),
    }
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gateway admin", description=__doc__.split("\n")[0])
    p.add_argument(
        "--url", default=None, help="the admin listener (default: GATEWAY_ADMIN_URL, else :8081)"
    )
    p.add_argument("--token", default=None, help="admin token (default: GATEWAY_ADMIN_TOKEN)")
    p.add_argument("command", choices=sorted(CALLS))
    p.add_argument("id", nargs="?", help="tenant id, key id, or for tenants-create the name")
    p.add_argument("--policy", default=None, help="policy JSON")
    p.add_argument("--name", default="", help="key name")
    p.add_argument("--file", type=Path, default=None, help="rules YAML for rules-upload")
    p.add_argument("--version", type=int, default=None, help="for rules-rollback")
    return p


def _body(kind: str, a: argparse.Namespace) -> bytes | None:
    policy: Any = json.loads(a.policy) if a.policy else {}
    if kind == "tenant":
        return json.dumps({"name": a.id, "policy": policy}).encode()
    if kind == "json":
        return json.dumps(policy).encode()
    if kind == "key":
        return json.dumps({"name": a.name, "policy": policy}).encode()
    if kind == "file":
        if a.file is None:
            raise SystemExit("rules-upload needs --file RULES.yaml")
        data: bytes = a.file.read_bytes()
        return data
    if kind == "version":
        return json.dumps({"version": a.version}).encode()
    return None


_WILDCARD = MappingProxyType({"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"})


def admin_url(settings: Settings) -> str:
    """GATEWAY_ADMIN_URL, else the admin listener's address (a wildcard one: this host)."""
    if settings.admin_url:
        return settings.admin_url.rstrip("/")
    host = _WILDCARD.get(settings.admin_host, settings.admin_host)
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"http://{host}:{settings.admin_port}"


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        settings = load_settings()
    except ValueError as e:
        print(f"error: bad settings: {e}", file=sys.stderr)
        return 2
    token = a.token or (settings.admin_token.get_secret_value() if settings.admin_token else "")
    url = a.url or admin_url(settings)
    method, path, kind = CALLS[a.command]
    if "{id}" in path:
        if not a.id:
            raise SystemExit(f"{a.command} needs an id")
        path = path.replace("{id}", a.id)
    req = urllib.request.Request(
        url + path,
        data=_body(kind, a),
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        text, status = e.read(), e.code
    except OSError as e:
        print(f"error: cannot reach {url}: {e}", file=sys.stderr)
        return 2
    if text:
        print(json.dumps(json.loads(text), indent=2))
    return 0 if status < 400 else 1
