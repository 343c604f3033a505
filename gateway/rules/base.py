"""The base of every model of ``routing_rules.yaml``: strict (unknown keys are errors) and
frozen (a parsed file is a value, shared by every request of its snapshot)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
