"""The gateway's log lines: JSON, and none a client can flood.

:func:`setup_logging` sends every record to stderr as one JSON object a line
(:class:`JsonFormatter`), with the request id of the request being served.

Every refused or failed request is counted in the metrics (``gateway_errors_total`` by
kind); its log line is a sample: at most :data:`LINES` a :data:`INTERVAL_S` per kind of
line (:class:`LineBudget`), then one line saying how many were left out. A load test of
refused requests wrote a warning line each (5.5 MB in a short run).

A malformed request (a bad request line, header or URL, a head over its limits) is
answered 400 by the HTTP server; aiohttp logged each at error level with a traceback and
the first bytes of the offending line, uvicorn a warning: an attacker's bytes, as many
lines as requests. :class:`Malformed` makes each such record a debug line without the
traceback, the bytes escaped and cut at :data:`MAX_DETAIL` characters, and hands the
refusal to be counted (``gateway_errors_total{kind="malformed_request"}``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp.http_exceptions import HttpProcessingError

from gateway.telemetry.context import REQUEST_ID
from gateway.telemetry.record import RequestRecord, access_fields

LINES = 20  # lines of one kind per interval; the rest are counted in one line
INTERVAL_S = 10.0
MAX_DETAIL = 160  # characters of a malformed request's detail kept in its debug line
# the server loggers, and the message of a malformed request each writes
SERVER_LOGGERS = ("aiohttp.server", "uvicorn.error")
_UVICORN_MALFORMED = "Invalid HTTP request received."
# what a request the HTTP server refused as malformed leaves (no handler saw it)
MALFORMED = RequestRecord(
    request_id="-",
    kind="http",
    status=400,
    latency_s=0.0,
    overhead_s=0.0,
    error_code="malformed_request",
)


class AccessLines:
    """The access log's line of a request: every request's when the access log is on (at
    info), else the refused and the failed ones' (at warning), each kind sampled. Between
    :meth:`start` and :meth:`stop`, the HTTP servers' malformed requests are quiet and
    handed to ``malformed`` (:class:`Malformed`)."""

    def __init__(self, log: logging.Logger, malformed: Callable[[], None]):
        self._log = log
        self._refused = LineBudget(log, "refused requests")
        self._failed = LineBudget(log, "failed requests")
        self._filter = Malformed(malformed)

    def start(self) -> None:
        for name in SERVER_LOGGERS:
            logging.getLogger(name).addFilter(self._filter)

    def stop(self) -> None:
        for name in SERVER_LOGGERS:
            logging.getLogger(name).removeFilter(self._filter)

    def write(self, rec: RequestRecord) -> None:
        if self._log.isEnabledFor(logging.INFO):  # the access log, asked for: every line
            self._log.info("request", extra={"fields": access_fields(rec)})
        elif rec.failures or rec.status >= 500 or rec.error_code:
            failed = bool(rec.failures) or rec.status >= 500
            lines = self._failed if failed else self._refused
            if lines.allow(time.monotonic()):
                self._log.warning("request", extra={"fields": access_fields(rec)})

    def tick(self, now: float) -> None:
        self._refused.tick(now)
        self._failed.tick(now)


class LineBudget:
    """At most ``lines`` log lines of one kind per ``interval`` seconds; once an interval
    with lines left out is over, one line says how many (:meth:`tick`, or the next
    :meth:`allow`)."""

    def __init__(
        self, log: logging.Logger, what: str, lines: int = LINES, interval: float = INTERVAL_S
    ):
        self._log, self._what = log, what
        self._lines, self._interval = lines, interval
        self._start = float("-inf")
        self._used = 0
        self.left_out = 0  # in the current interval

    def allow(self, now: float) -> bool:
        self.tick(now)
        if self._used < self._lines:
            self._used += 1
            return True
        self.left_out += 1
        return False

    def tick(self, now: float) -> None:
        """End the interval if it is over, saying what it left out."""
        if now < self._start + self._interval:
            return
        if self.left_out:
            self._log.warning(
                "%d more %s not logged in %.0f s (each is counted in the metrics)",
                self.left_out,
                self._what,
                min(now - self._start, 10 * self._interval),
                extra={"fields": {"left_out": self.left_out, "what": self._what}},
            )
        self._start, self._used, self.left_out = now, 0, 0


class Malformed(logging.Filter):
    """On the HTTP servers' loggers: a malformed request's record becomes a debug line
    (kept only when ``gateway.http`` logs debug), without its traceback, its detail escaped
    and bounded; ``refused`` counts each. Other records pass as they are."""

    def __init__(self, refused: Callable[[], None]):
        super().__init__()
        self._refused = refused
        self._log = logging.getLogger("gateway.http")

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            detail = str(exc)
        elif record.name == "uvicorn.error" and record.msg == _UVICORN_MALFORMED:
            detail = _UVICORN_MALFORMED
        else:
            return True
        self._refused()
        if not self._log.isEnabledFor(logging.DEBUG):
            return False
        record.name, record.levelno, record.levelname = self._log.name, logging.DEBUG, "DEBUG"
        record.msg, record.args = "malformed request refused: %s", (escaped(detail),)
        record.exc_info = record.exc_text = None
        return True


def escaped(text: object, limit: int = MAX_DETAIL) -> str:
    """``text`` as printable ASCII (``\\x01``, ``\\u2028`` ...), at most ``limit``
    characters of it, with a mark where it was cut."""
    s = str(text)
    out = ascii(s[:limit])[1:-1]
    if len(s) <= limit and len(out) <= limit:
        return out
    return out[:limit] + "...[cut]"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the request being served
    (``request_id``, from :data:`gateway.telemetry.context.REQUEST_ID`) and the record's
    fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = REQUEST_ID.get()
        if rid != "-":
            doc["request_id"] = rid
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            doc.update(fields)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def setup_logging(level: str = "info", access: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("gateway.access").setLevel(logging.INFO if access else logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the console's calls: INFO each
