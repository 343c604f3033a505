"""The admin API's routers, in the order their paths appear in the OpenAPI document."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.admin.routes import (
    cache,
    keys,
    live,
    ops,
    quality,
    review,
    rollouts,
    rules,
    tenants,
)

ROUTERS: tuple[APIRouter, ...] = (
    tenants.router,
    keys.router,
    cache.router,
    rules.router,
    rollouts.router,
    ops.router,
    live.router,
    quality.reader,
    quality.router,
    review.router,
)
