"""OpenAI object shapes: an answer's chunks or its whole body, error bodies, SSE events."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from engines.sim.config import Json
from engines.sim.plan import Plan


def error_body(status: int, message: str, kind: str) -> Json:
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def error_response(
    status: int, message: str, kind: str, headers: dict[str, str] | None = None
) -> web.Response:
    body = orjson.dumps(error_body(status, message, kind))
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


@dataclass
class Shape:
    """OpenAI object shapes for one answer (chat or text completion)."""

    chat: bool
    rid: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))

    def chunk(self, choice: Json, **extra: Any) -> Json:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        base = {"id": self.rid, "object": kind, "created": self.created, "model": self.model}
        return {**base, "choices": [choice], **extra}

    def _choice(self, delta: Json | None, text: str, finish: str | None) -> Json:
        if self.chat:
            return {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

    def opening(self, plan: Plan) -> list[Json]:
        """Chunks sent with the first token: the role, then a tool call's header."""
        if not self.chat:
            return []
        out = [self.chunk(self._choice({"role": "assistant", "content": ""}, "", None))]
        if plan.tool_name is not None:
            call = {
                "index": 0,
                "id": plan.tool_id,
                "type": "function",
                "function": {"name": plan.tool_name, "arguments": ""},
            }
            out.append(self.chunk(self._choice({"tool_calls": [call]}, "", None)))
        return out

    def delta(self, plan: Plan, text: str) -> Json:
        if plan.tool_name is not None:
            call = {"index": 0, "function": {"arguments": text}}
            return self.chunk(self._choice({"tool_calls": [call]}, text, None))
        return self.chunk(self._choice({"content": text}, text, None))

    def finish(self, plan: Plan, sim: Json) -> Json:
        return self.chunk(self._choice({}, "", plan.finish), sim=sim)

    def usage_chunk(self, usage: Json) -> Json:
        chunk = self.chunk({}, usage=usage)
        chunk["choices"] = []
        return chunk

    def full(self, plan: Plan, usage: Json, sim: Json) -> Json:
        text = "".join(plan.pieces)
        base = {"id": self.rid, "created": self.created, "model": self.model}
        tail = {"usage": usage, "sim": sim}
        if not self.chat:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": plan.finish}
            return {**base, "object": "text_completion", "choices": [choice], **tail}
        message: Json = {"role": "assistant", "content": text}
        if plan.tool_name is not None:
            call = {"name": plan.tool_name, "arguments": text}
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": plan.tool_id, "type": "function", "function": call}],
            }
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": plan.finish}
        return {**base, "object": "chat.completion", "choices": [choice], **tail}


def sse(obj: Json) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"
