"""The ``quality`` section of ``routing_rules.yaml``: the quality circuit's settings, for
every rule (the top-level section) or one rule (a rule's own ``quality:``, which changes
only the fields it names).

A tier whose answers on a rule fail their checks too often is demoted for that rule: when
at least ``min_answers`` answers came in the last ``window_s`` seconds and at least
``demote_at`` of them failed a check, the rule's requests skip the tier and go straight to
the next one; so do ``consecutive`` answers in a row that all failed (a tier that fails
wholesale shows it long before its share outweighs the good answers still in the window).
``probe_share`` of them still try it first (its probes); once the last
``restore_probes`` probes failed no more than ``restore_at`` of the time, it carries its
traffic again. A demotion ends by itself after ``max_demotion_s`` whatever the probes say
(then the window judges afresh). See ``gateway.quality`` and docs/quality-circuit.md.
"""

from __future__ import annotations

from pydantic import Field

from gateway.rules.base import Strict


class QualitySettings(Strict):
    enabled: bool = Field(default=True, description="demote tiers whose answers fail checks")
    window_s: float = Field(
        default=60.0, gt=0, le=3600, description="seconds of answers the failure share is over"
    )
    min_answers: int = Field(
        default=20, ge=1, description="answers of the tier in the window before it is judged"
    )
    demote_at: float = Field(
        default=0.5, gt=0, le=1, description="share of those answers failing a check that demotes"
    )
    consecutive: int = Field(
        default=10,
        ge=0,
        description="answers in a row failing a check that demote at once, whatever the share "
        "(0: off)",
    )
    probe_share: float = Field(
        default=0.05, ge=0, le=1, description="share of the rule's requests still sent to it"
    )
    restore_probes: int = Field(
        default=10, ge=1, description="probes judged (the latest ones) before it is restored"
    )
    restore_at: float = Field(
        default=0.1, ge=0, lt=1, description="restored when at most this share of them failed"
    )
    max_demotion_s: float = Field(
        default=600.0, gt=0, description="a demotion ends by itself after this (then re-judged)"
    )

    def over(self, rule: QualitySettings | None) -> QualitySettings:
        """These settings with the fields a rule's own ``quality:`` names."""
        if rule is None or not rule.model_fields_set:
            return self
        return self.model_copy(update={k: getattr(rule, k) for k in rule.model_fields_set})

    def problem(self) -> str | None:
        """What makes these settings (a rule's, merged) unusable, or None."""
        if self.restore_at >= self.demote_at:
            return f"restore_at ({self.restore_at:g}) must be below demote_at ({self.demote_at:g})"
        return None
