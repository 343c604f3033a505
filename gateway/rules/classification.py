"""Classification in ``routing_rules.yaml``: SLA classes, task classes and the cues and
learned model that give a request its task."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from gateway.rules.base import Strict


class SlaClass(Strict):
    deadline: float = Field(gt=0, description="whole request, all attempts, seconds")
    ttft_budget: float = Field(gt=0, description="first token of a stream, seconds")


class TaskClass(Strict):
    default_sla: str


class CodeCues(Strict):
    task: str = "code"
    fences: tuple[str, ...] = ("```",)
    fim_markers: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    min_keyword_hits: int = Field(default=2, ge=1)


class SummarizationCues(Strict):
    task: str = "summarization"
    verbs: tuple[str, ...] = ()
    min_prompt_tokens: int = Field(default=300, ge=0)


class ReasoningCues(Strict):
    task: str = "reasoning"
    cues: tuple[str, ...] = ()


class ModelSettings(Strict):
    """The learned classifier, asked when no header, shape or cue decided."""

    enabled: bool = True
    path: str | None = Field(
        default=None,
        description="weights (JSON) written by `python -m evals classify --train`; "
        "null: the model shipped in the package",
    )
    min_confidence: float = Field(
        default=0.5, ge=0, le=1, description="a top class below this probability is uncertain"
    )
    uncertain_task: str | None = Field(
        default=None, description="the task of an uncertain request; null: default_task"
    )

    @field_validator("path")
    @classmethod
    def _readable(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).is_file():
            raise ValueError(f"no model file at {v!r}")
        return v


class Classify(Strict):
    tools_task: str = "agent"
    json_task: str = "extraction"
    default_task: str = "chat"
    code: CodeCues = CodeCues()
    summarization: SummarizationCues = SummarizationCues()
    reasoning: ReasoningCues = ReasoningCues()
    model: ModelSettings = ModelSettings()
    scan_chars: int = Field(
        default=4096, ge=64, description="cue search looks at this many chars of the last turn"
    )
