"""The gateway's error tree and its mapping to OpenAI's error envelope.

Every error a client can see is a ``GatewayError``; the api layer turns it into
``{"error": {"message", "type", "param", "code"}}`` with the status below, in one place
(:func:`error_body`). Callers catch by category::

    GatewayError                  (status, type, code)
    ├── BadRequest                400 invalid_request_error
    │   ├── InvalidJSON           400 invalid_request_error / invalid_json
    │   ├── InvalidField          400 invalid_request_error / invalid_type, ...
    │   ├── InvalidBody           400 invalid_request_error / invalid_body (corrupt gzip ...)
    │   ├── ContextTooLong        400 invalid_request_error / context_length_exceeded (no tier
    │   │                             of the route holds the prompt and max_tokens)
    │   └── BodyTimeout           408 invalid_request_error / body_timeout
    ├── Unauthorized              401 authentication_error / invalid_api_key
    ├── PermissionDenied          403 permission_error / tier_not_allowed, admin_only
    ├── NotFound                  404 invalid_request_error / not_found
    │   └── ModelNotFound         404 invalid_request_error / model_not_found
    ├── MethodNotAllowed          405 invalid_request_error / method_not_allowed
    ├── PayloadTooLarge           413 invalid_request_error / request_too_large
    ├── UnsupportedEncoding       415 invalid_request_error / unsupported_content_encoding
    ├── Unprocessable             422 invalid_request_error / invalid_rules
    ├── RateLimited               429 requests|tokens / rate_limit_exceeded
    │   └── QuotaExceeded         429 insufficient_quota / insufficient_quota
    ├── Conflicted                409 invalid_request_error / conflict
    ├── ServiceUnavailable        503 api_error / store_unavailable
    ├── InternalError             500 api_error / internal_error (a bug: logged with its stack)
    └── UpstreamFailed            502 upstream_error / all_tiers_failed (all tiers)
        ├── UpstreamTimeout       504 upstream_error / upstream_timeout (last: timeout)
        └── StreamBroken          (an SSE error event) upstream_error / stream_broken

Beside the tree, one internal signal that never reaches a client as itself:
:class:`StoreUnavailable` (the store could not be reached, refused the command, or
answered too slowly); each caller turns it into its documented degraded mode or a 503.

Upstream 4xx answers other than 408/429 are the client's fault: relayed with the engine's
status and message, in the envelope above (``gateway.server.replies.engine_error``).
"""

from __future__ import annotations

from http import HTTPStatus

import orjson


class StoreUnavailable(Exception):
    """The store could not be reached, refused the command, or answered too slowly."""


class GatewayError(Exception):
    status = 500
    type = "api_error"
    code: str | None = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:  # an HTTP-layer 4xx without a class of its own
            self.status = status


class BadRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class InvalidJSON(BadRequest):
    code = "invalid_json"


class InvalidField(BadRequest):
    code = "invalid_type"


class InvalidBody(BadRequest):
    code = "invalid_body"


class ContextTooLong(BadRequest):
    """The prompt and ``max_tokens`` fit the context window of no tier of the route (by the
    gateway's estimate, or as each engine that was tried said)."""

    code = "context_length_exceeded"


class BodyTimeout(BadRequest):
    status = 408
    code = "body_timeout"


class Unauthorized(GatewayError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    type = "permission_error"
    code = "permission_denied"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"


class MethodNotAllowed(GatewayError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedEncoding(GatewayError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_content_encoding"


class UnsupportedMediaType(GatewayError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_content_type"


class Unprocessable(GatewayError):
    status = 422
    type = "invalid_request_error"
    code = "invalid_rules"

    def __init__(self, message: str, errors: list[str], code: str | None = None):
        super().__init__(message, code=code)
        self.errors = errors


class Conflicted(GatewayError):
    status = 409
    type = "invalid_request_error"
    code = "conflict"


class RateLimited(GatewayError):
    status = 429
    type = "requests"
    code = "rate_limit_exceeded"

    def __init__(
        self,
        message: str,
        *,
        retry_after: float = 1.0,
        type_: str = "requests",
        headers: dict[str, str] | None = None,
        code: str | None = None,
    ):
        super().__init__(message, code=code)
        self.type = type_
        self.retry_after = retry_after
        self.headers = headers or {}


class ServiceUnavailable(GatewayError):
    status = 503
    type = "api_error"
    code = "store_unavailable"


class InternalError(GatewayError):
    status = 500
    type = "api_error"
    code = "internal_error"


class UpstreamFailed(GatewayError):
    status = 502
    type = "upstream_error"
    code = "all_tiers_failed"


class UpstreamTimeout(UpstreamFailed):
    status = 504
    code = "upstream_timeout"


class StreamBroken(UpstreamFailed):
    """A stream that failed after the client got bytes and could not be continued."""

    code = "stream_broken"


def error_payload(err: GatewayError) -> dict[str, object]:
    body: dict[str, object] = {
        "message": err.message,
        "type": err.type,
        "param": err.param,
        "code": err.code,
    }
    if isinstance(err, Unprocessable):
        body["errors"] = err.errors
    return {"error": body}


def error_body(err: GatewayError) -> bytes:
    return orjson.dumps(error_payload(err))


def closing_response(err: GatewayError, headers: tuple[str, ...] = ()) -> bytes:
    """``err`` as a whole HTTP/1.1 answer that closes its connection, for a listener that
    answers before it reads a request (a connection over its cap)."""
    body = error_body(err)
    head = [
        f"HTTP/1.1 {err.status} {HTTPStatus(err.status).phrase}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *headers,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body
