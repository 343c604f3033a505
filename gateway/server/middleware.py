"""The data plane's last line: nothing answers a plain-text 500.

Any exception a handler did not turn into an answer becomes a 500 OpenAI error envelope
(``code: internal_error``) carrying the request id, and is logged once with its stack.
aiohttp's own HTTP errors (an oversize body, a bad ``Content-Encoding``) get the envelope
too. It also holds a large body's bytes against the worker's cap for as long as the
request runs (:mod:`gateway.server.bodies`).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.errors import BadRequest, GatewayError, InternalError, PayloadTooLarge
from gateway.headers import H_RETRY_AFTER
from gateway.server.bodies import BODIES
from gateway.server.replies import assign_request_id, error_response

log = logging.getLogger("gateway.server")


@web.middleware
async def catch_all(request: web.Request, handler: Handler) -> web.StreamResponse:
    rid = assign_request_id(request)
    bodies = request.app[BODIES]
    try:
        held = bodies.take(request)
    except GatewayError as e:
        return error_response(e, rid, {H_RETRY_AFTER: "1"})
    try:
        return await handler(request)
    except asyncio.CancelledError:
        raise
    except web.HTTPException as e:
        return error_response(_from_http(e), rid)
    except Exception:
        log.exception("unexpected error on %s %s (request %s)", request.method, request.path, rid)
        err = InternalError(f"The gateway failed unexpectedly; request id {rid}.")
        return error_response(err, rid)
    finally:
        if held:
            bodies.give(held)


def _from_http(e: web.HTTPException) -> GatewayError:
    if e.status == 413:
        return PayloadTooLarge(e.text or "The request body is too large.")
    if 400 <= e.status < 500:
        return BadRequest(e.reason or "Bad request.", status=e.status)
    return InternalError(e.reason or "Internal error.")
