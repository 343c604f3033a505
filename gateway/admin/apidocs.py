"""The admin API's browser at ``/docs``: Swagger UI, served by the admin listener itself
from the ``swagger-ui-bundle-v2`` package (Swagger UI 5, which reads OpenAPI 3.1).
FastAPI's own page loads it from a CDN, and is blank on a machine without network access.
No validator badge (Swagger UI would ask swagger.io to validate the document), no favicon
from elsewhere: the page and everything it loads come from this listener
(``tests/test_offline.py``)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

ASSETS = "/docs/assets"


def install(app: FastAPI, title: str) -> None:
    """``/docs`` and its assets on ``app`` (created with ``docs_url=None``)."""
    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{title}: API browser",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},
        )
