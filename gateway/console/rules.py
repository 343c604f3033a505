"""The rules page: the running version and its history, the judged rollouts (each analysed
rule's arms, their rates, the tests' p-values and the decision), a draft to validate, to
explain a request against and to upload (every error shown), a diff between two versions,
and rolling back."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Request, Response, UploadFile
from fastapi.responses import RedirectResponse

from gateway.console.auth import CSRF
from gateway.console.client import Api, ApiDep, ApiError
from gateway.console.diff import rules_diff
from gateway.console.examples import EXAMPLE_REQUEST
from gateway.console.render import ViewDep

router = APIRouter(prefix="/console", include_in_schema=False)


@dataclass(frozen=True, slots=True)
class Draft:
    """What the rules form sent: the YAML (the chosen file's, when there is one), a
    request to explain, and which button was pressed."""

    yaml: str
    request: str
    action: str


async def read_draft(
    request: Request,
    yaml: Annotated[str, Form()] = "",
    explain: Annotated[str, Form()] = EXAMPLE_REQUEST,
    action: Annotated[str, Form()] = "validate",
    file: Annotated[UploadFile | None, File()] = None,
) -> Draft:
    if file is not None and file.filename:
        limit: int = request.app.state.max_body_bytes
        raw = await file.read(limit + 1)
        if len(raw) > limit:
            raise ApiError(413, f"The rules file is larger than {limit} bytes.")
        try:
            yaml = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, "The rules file must be UTF-8 text.") from None
    # browsers send a textarea's line ends as CRLF: stored versions keep the file's LF
    return Draft(yaml.replace("\r\n", "\n"), explain, action)


DraftDep = Annotated[Draft, Depends(read_draft)]
Result = tuple[dict[str, Any], int]


async def history(api: Api) -> dict[str, Any]:
    current = await api.get("/admin/rules")
    versions = (await api.get("/admin/rules/versions"))["data"]
    rollouts = (await api.get("/admin/rollouts"))["data"]
    return {"current": current, "versions": list(reversed(versions)), "rollouts": rollouts}


@router.get("/rules")
async def rules_page(view: ViewDep, api: ApiDep, rolled_back: str = "") -> Response:
    ctx = await history(api)
    return view(
        "rules.html",
        tab="rules",
        **ctx,
        draft=ctx["current"]["yaml"],
        explain=EXAMPLE_REQUEST,
        result={"kind": "rolled_back", "version": rolled_back} if rolled_back else None,
    )


@router.post("/rules", dependencies=[CSRF])
async def rules_action(view: ViewDep, api: ApiDep, draft: DraftDep) -> Response:
    act = ACTIONS.get(draft.action, validate)
    done = await act(api, draft)
    if isinstance(done, Response):
        return done
    result, status = done
    ctx = await history(api)
    return view(
        "rules.html",
        status,
        tab="rules",
        **ctx,
        draft=draft.yaml,
        explain=draft.request,
        result=result,
    )


async def validate(api: Api, draft: Draft) -> Result | Response:
    out = await api.post_yaml("/admin/rules/validate", draft.yaml)
    if out["valid"]:
        return {"kind": "valid", "tiers": out["tiers"], "rules": out["rules"]}, 200
    return {"kind": "errors", "title": "The rules are invalid.", "errors": out["errors"]}, 200


def explain_body(draft: Draft) -> dict[str, Any]:
    """``POST /admin/explain``'s body: the request (a bare body, or ``{path, headers,
    body}`` as ``gateway explain`` takes it) and the draft's rules."""
    req = json.loads(draft.request)
    if not isinstance(req, dict):
        raise ValueError("expected a JSON object")
    if not isinstance(req.get("body"), dict):
        req = {"body": req}
    keep = {k: req[k] for k in ("path", "headers", "body") if k in req}
    return {**keep, "rules": draft.yaml if draft.yaml.strip() else None}


async def explain(api: Api, draft: Draft) -> Result | Response:
    try:
        body = explain_body(draft)
    except ValueError as e:
        return {
            "kind": "errors",
            "title": "The request is not a JSON object.",
            "errors": [str(e)],
        }, 400
    try:
        return {"kind": "explain", "d": await api.post("/admin/explain", body)}, 200
    except ApiError as e:
        return {"kind": "errors", "title": e.message, "errors": e.errors}, e.status


async def upload(api: Api, draft: Draft) -> Result | Response:
    before = (await api.get("/admin/rules"))["version"]
    try:
        v = (await api.put_yaml("/admin/rules", draft.yaml))["version"]
    except ApiError as e:
        return {"kind": "errors", "title": e.message, "errors": e.errors}, e.status
    return RedirectResponse(f"/console/rules/diff?a={before}&b={v}", status_code=303)


ACTIONS: MappingProxyType[str, Callable[[Api, Draft], Awaitable[Result | Response]]] = (
    MappingProxyType({"validate": validate, "explain": explain, "upload": upload})
)


def _version(raw: str | None) -> int | None:
    return int(raw) if raw and raw.isdigit() else None


@router.get("/rules/diff")
async def diff_page(view: ViewDep, api: ApiDep, a: str = "", b: str = "") -> Response:
    ctx = await history(api)
    new = _version(b) or ctx["current"]["version"]
    old = _version(a) or max(new - 1, 1)
    texts = [(await api.get(f"/admin/rules/versions/{v}"))["yaml"] for v in (old, new)]
    d = rules_diff(texts[0], texts[1], f"version {old}", f"version {new}")
    return view("diff.html", tab="rules", **ctx, a=old, b=new, diff=d)


@router.get("/rules/rollback")
async def rollback_url() -> Response:
    """The roll-back form's address opened as a page: the rules page, never a 405."""
    return RedirectResponse("/console/rules", status_code=303)


@router.post("/rules/rollback", dependencies=[CSRF])
async def rollback(api: ApiDep, version: Annotated[str, Form()] = "") -> Response:
    v = _version(version)
    if v is None:
        raise ApiError(400, "Choose a version to roll back to.")
    done = await api.post("/admin/rules/rollback", {"version": v})
    return RedirectResponse(f"/console/rules?rolled_back={done['version']}", status_code=303)
