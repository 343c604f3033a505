"""The routing rules: show, validate, upload (YAML), reload from disk, roll back, history.

A change is validated whole first (422 with every error, the running rules unchanged),
then stored as a new version that every replica adopts. ``validate`` runs the same
checks and changes nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from gateway.admin.deps import Audit, AuditDep, ControlDep, StoreDep, admin_user
from gateway.admin.models import (
    RecordList,
    Rollback,
    RulesOut,
    RulesVersionOut,
    ValidateOut,
    VersionOut,
)
from gateway.admin.routes.base import admin_router, errors
from gateway.errors import BadRequest, NotFound, Unprocessable
from gateway.rules.control import RulesControl
from gateway.rules.schema import RulesError

router = admin_router("rules")
UserDep = Annotated[str, Depends(admin_user)]


@router.get(
    "/admin/rules",
    summary="The running rules: version, YAML, last rejected change",
    response_model=RulesOut,
)
async def rules(control: ControlDep) -> RulesOut:
    return RulesOut(
        version=control.version,
        source=str(control.path),
        yaml=control.text,
        last_error=control.last_error,
    )


def _yaml_body() -> dict[str, Any]:
    """OpenAPI: the route takes a YAML text body."""
    yaml = {"application/yaml": {"schema": {"type": "string"}}}
    return {"requestBody": {"required": True, "content": yaml}}


async def _yaml_text(request: Request) -> str:
    try:
        return (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("The rules must be UTF-8 YAML.", code="invalid_rules") from None


YamlDep = Annotated[str, Depends(_yaml_text)]


@router.post(
    "/admin/rules/validate",
    summary="Validate rules (YAML body) as an upload would, changing nothing",
    response_model=ValidateOut,
    openapi_extra=_yaml_body(),
)
async def validate_rules(text: YamlDep, control: ControlDep) -> ValidateOut:
    try:
        r = await control.parse_off_loop(text, "validate")
    except RulesError as e:
        return ValidateOut(valid=False, errors=e.errors, tiers=[], rules=[])
    names = [rule.name for rule in r.rules]
    return ValidateOut(valid=True, errors=[], tiers=list(r.tiers), rules=names)


@router.put(
    "/admin/rules",
    summary="Upload new rules (YAML body); validated first, 422 with every error",
    response_model=VersionOut,
    responses=errors(422),
    openapi_extra=_yaml_body(),
)
async def upload_rules(
    text: YamlDep, control: ControlDep, audit: AuditDep, who: UserDep
) -> VersionOut:
    return await _submit(control, audit, text, "admin upload", who)


@router.post(
    "/admin/rules/reload",
    summary="Reload the rules file from disk",
    response_model=VersionOut,
    responses=errors(422),
)
async def reload_rules(control: ControlDep, audit: AuditDep, who: UserDep) -> VersionOut:
    try:
        text = control.path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise Unprocessable(f"Cannot read {control.path}.", [str(e)]) from None
    return await _submit(control, audit, text, str(control.path), who)


async def _submit(
    control: RulesControl, audit: Audit, text: str, source: str, who: str
) -> VersionOut:
    try:
        v = await control.submit(text, source, who)
    except RulesError as e:
        raise Unprocessable(
            "The rules are invalid; the running rules are unchanged.", e.errors
        ) from None
    await audit("rules.update", f"version {v}", {"source": source})
    return VersionOut(version=v)


@router.post(
    "/admin/rules/rollback",
    summary="Make a stored version current",
    response_model=VersionOut,
    responses=errors(404, 422),
)
async def rollback_rules(
    body: Rollback, control: ControlDep, audit: AuditDep, who: UserDep
) -> VersionOut:
    try:
        v = await control.rollback(body.version, who)
    except KeyError:
        raise NotFound(f"No rules version {body.version}.") from None
    except RulesError as e:
        raise Unprocessable("That version no longer validates.", e.errors) from None
    await audit("rules.rollback", f"version {v}")
    return VersionOut(version=v)


@router.get(
    "/admin/rules/versions", summary="Rule versions (newest last)", response_model=RecordList
)
async def rules_versions(store: StoreDep, control: ControlDep) -> RecordList:
    data = await store.rules_versions()
    if not data and await control.rerecord():  # the store came back empty: ours, recorded
        data = await store.rules_versions()
    return RecordList(data=data)


@router.get(
    "/admin/rules/versions/{version}",
    summary="One stored version's YAML",
    response_model=RulesVersionOut,
    responses=errors(404),
)
async def rules_version(version: str, store: StoreDep) -> RulesVersionOut:
    try:
        v = int(version)
    except ValueError:
        raise NotFound("No such rules version.") from None
    text = await store.rules_text(v)
    if text is None:
        raise NotFound(f"No rules version {v}.")
    return RulesVersionOut(version=v, yaml=text)
