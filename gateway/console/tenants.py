"""The tenants pages: the list, creating one (name and policy), and a tenant's page: its
policy, keys (create: the plaintext shown once; rotate; revoke) and usage of a day.

Post/Redirect/Get: a form that changes something answers 303 to a page, so a refresh
repeats nothing; a new key is shown once on that page (:mod:`gateway.console.reveal`). A
refused form is shown again with its errors (nothing changed), and its address opened as
a page leads back to the tenant."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Response
from fastapi.responses import RedirectResponse

from gateway.console.auth import CSRF
from gateway.console.client import Api, ApiDep, ApiError
from gateway.console.render import View, ViewDep
from gateway.console.reveal import RevealsDep, keep, take

router = APIRouter(prefix="/console", include_in_schema=False)
FormText = Annotated[str, Form()]


def parse_policy(text: str) -> dict[str, Any]:
    """A policy typed as JSON ("" is the empty policy); a 400 naming the problem."""
    if not text.strip():
        return {}
    try:
        policy = json.loads(text)
    except ValueError as e:
        raise ApiError(400, f"The policy is not valid JSON: {e}.") from None
    if not isinstance(policy, dict):
        raise ApiError(400, "The policy must be a JSON object.")
    return policy


def tenant_url(tenant_id: str, **query: str) -> str:
    q = "&".join(f"{k}={quote(v)}" for k, v in query.items())
    return f"/console/tenants/{quote(tenant_id, safe='')}" + (f"?{q}" if q else "")


@router.get("/tenants")
async def tenants_page(view: ViewDep, api: ApiDep) -> Response:
    data = (await api.get("/admin/tenants"))["data"]
    return view("tenants.html", tab="tenants", tenants=data, error=None, form={})


@router.post("/tenants", dependencies=[CSRF])
async def create_tenant(
    view: ViewDep, api: ApiDep, name: FormText = "", policy: FormText = ""
) -> Response:
    try:
        t = await api.post("/admin/tenants", {"name": name, "policy": parse_policy(policy)})
    except ApiError as e:
        data = (await api.get("/admin/tenants"))["data"]
        form = {"name": name, "policy": policy}
        return view("tenants.html", e.status, tab="tenants", tenants=data, error=e, form=form)
    return RedirectResponse(tenant_url(t["id"]), status_code=303)


async def tenant_view(view: View, api: Api, tenant_id: str, **extra: Any) -> Response:
    """A tenant's page; ``extra``: a new key to show once, an error, the day's usage."""
    path = f"/admin/tenants/{quote(tenant_id, safe='')}"
    t = await api.get(path)
    day = extra.pop("day", "") or None
    usage = await api.get(f"{path}/usage", **({"day": day} if day else {}))
    status = extra.pop("status", 200)
    ctx = {"new_key": None, "key_gone": False, "error": None, "done": None, **extra}
    policy = json.dumps(t["policy"], indent=2)
    return view("tenant.html", status, tab="tenants", t=t, usage=usage, policy=policy, **ctx)


@dataclass(frozen=True, slots=True)
class TenantQuery:
    """A tenant page's query: the usage day, what was just done, a new key to show once
    (:mod:`gateway.console.reveal`)."""

    day: str = ""
    done: str = ""
    shown: str = ""


@router.get("/tenants/{tenant_id}")
async def tenant_page(
    tenant_id: str,
    view: ViewDep,
    api: ApiDep,
    store: RevealsDep,
    q: Annotated[TenantQuery, Depends()],
) -> Response:
    """A new key is shown once; on a refresh it is gone, and the page says so."""
    new_key = await take(store, q.shown) if q.shown else None
    if new_key is not None and new_key.get("tenant_id") != tenant_id:
        new_key = None
    gone = bool(q.shown) and new_key is None
    return await tenant_view(
        view, api, tenant_id, day=q.day, done=q.done or None, new_key=new_key, key_gone=gone
    )


@router.post("/tenants/{tenant_id}/keys", dependencies=[CSRF])
async def create_key(
    tenant_id: str, view: ViewDep, api: ApiDep, store: RevealsDep, name: FormText = ""
) -> Response:
    path = f"/admin/tenants/{quote(tenant_id, safe='')}/keys"
    try:
        key = await api.post(path, {"name": name})
    except ApiError as e:
        return await tenant_view(view, api, tenant_id, error=e, status=e.status)
    return RedirectResponse(tenant_url(tenant_id, shown=await keep(store, key)), status_code=303)


@router.get("/tenants/{tenant_id}/keys")
@router.get("/tenants/{tenant_id}/policy")
async def tenant_form_url(tenant_id: str) -> Response:
    """A form's address opened as a page (a refresh after a refused form, a bookmark):
    the tenant's page, never a 405."""
    return RedirectResponse(tenant_url(tenant_id), status_code=303)


@router.post("/tenants/{tenant_id}/policy", dependencies=[CSRF])
async def put_policy(tenant_id: str, view: ViewDep, api: ApiDep, policy: FormText = "") -> Response:
    path = f"/admin/tenants/{quote(tenant_id, safe='')}/policy"
    try:
        await api.call("PUT", path, json=parse_policy(policy))
    except ApiError as e:
        return await tenant_view(view, api, tenant_id, error=e, status=e.status)
    return RedirectResponse(tenant_url(tenant_id, done="policy"), status_code=303)


@router.post("/keys/{key_id}/rotate", dependencies=[CSRF])
async def rotate_key(key_id: str, api: ApiDep, store: RevealsDep) -> Response:
    key = await api.post(f"/admin/keys/{quote(key_id, safe='')}/rotate")
    shown = await keep(store, key)
    return RedirectResponse(tenant_url(key["tenant_id"], shown=shown), status_code=303)


@router.post("/keys/{key_id}/revoke", dependencies=[CSRF])
async def revoke_key(key_id: str, api: ApiDep, tenant: FormText = "") -> Response:
    await api.call("DELETE", f"/admin/keys/{quote(key_id, safe='')}")
    return RedirectResponse(tenant_url(tenant, done="revoked"), status_code=303)


@router.get("/keys/{key_id}/{action}")
async def key_form_url(key_id: str, action: str) -> Response:
    """A key form's address opened as a page: the tenants, never a 405."""
    return RedirectResponse("/console/tenants", status_code=303)
