"""The data plane's last line: nothing answers a plain-text 500.

Any exception a handler did not turn into an answer becomes a 500 OpenAI error envelope
(``code: internal_error``) carrying the request id, and is logged once with its stack.
aiohttp's own HTTP errors (an oversize body, a bad ``Content-Encoding``) get the envelope
too. It also holds a large body's bytes against the worker's cap for as long as the
request runs (:mod:`gateway.server.bodies`).

On Anthropic's paths (``/v1/messages``, ``/v1/messages/count_tokens``) every error leaves
in Anthropic's shape instead, with the status its SDKs expect (:func:`_in_dialect`): the
one place that knows which format a path's errors speak.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.errors import BadRequest, GatewayError, InternalError, PayloadTooLarge
from gateway.headers import H_RETRY_AFTER
from gateway.server.bodies import BODIES
from gateway.server.messages_format import error_from
from gateway.server.replies import assign_request_id, error_response

log = logging.getLogger("gateway.server")


@web.middleware
async def catch_all(request: web.Request, handler: Handler) -> web.StreamResponse:
    rid = assign_request_id(request)
    bodies = request.app[BODIES]
    try:
        held = bodies.take(request)
    except GatewayError as e:
        return _in_dialect(request, error_response(e, rid, {H_RETRY_AFTER: "1"}), rid)
    try:
        return _in_dialect(request, await handler(request), rid)
    except asyncio.CancelledError:
        raise
    except web.HTTPException as e:
        return _in_dialect(request, error_response(_from_http(e), rid), rid)
    except Exception:
        log.exception("unexpected error on %s %s (request %s)", request.method, request.path, rid)
        err = InternalError(f"The gateway failed unexpectedly; request id {rid}.")
        return _in_dialect(request, error_response(err, rid), rid)
    finally:
        if held:
            bodies.give(held)


def _from_http(e: web.HTTPException) -> GatewayError:
    if e.status == 413:
        return PayloadTooLarge(e.text or "The request body is too large.")
    if 400 <= e.status < 500:
        return BadRequest(e.reason or "Bad request.", status=e.status)
    return InternalError(e.reason or "Internal error.")


def _anthropic(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def _in_dialect(request: web.Request, resp: web.StreamResponse, rid: str) -> web.StreamResponse:
    """``resp``, an error on one of Anthropic's paths rewritten in Anthropic's shape."""
    if resp.status < 400 or not _anthropic(request.path) or not isinstance(resp, web.Response):
        return resp
    if resp.prepared or not isinstance(resp.body, bytes):
        return resp
    status, body = error_from(resp.status, resp.body, rid)
    resp.set_status(status, "Overloaded" if status == 529 else None)
    resp.body = body
    return resp
