"""The task metrics of ``python -m evals quality``: one score in [0, 1] per answer.

chat — share of the expected keywords present; reasoning — the last number equals the
expected one; code — the share of its unit tests that pass (the answer's code is run in a
subprocess with a timeout); extraction — JSON valid, schema valid, share of fields exactly
right; tools — right function, arguments valid JSON, share of arguments right;
summarization — token F1 against a reference summary.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

from gateway.dispatch.shadow import token_f1

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def score_chat(ans: dict[str, Any], exp: dict[str, Any]) -> float:
    text = ans.get("text", "").lower()
    kws = exp["keywords"]
    return sum(k in text for k in kws) / len(kws)


def score_reasoning(ans: dict[str, Any], exp: dict[str, Any]) -> float:
    nums = _NUMBER.findall(ans.get("text", ""))
    return float(bool(nums) and float(nums[-1]) == float(exp["number"]))


def extract_code(text: str) -> str:
    m = _FENCE.search(text)
    return m.group(1) if m else text


def score_code(ans: dict[str, Any], exp: dict[str, Any]) -> float:
    code = extract_code(ans.get("text", ""))
    passed = 0
    for test in exp["tests"]:
        try:
            r = subprocess.run(
                [sys.executable, "-I", "-c", f"{code}\n{test}\n"], capture_output=True, timeout=5
            )
            passed += r.returncode == 0
        except subprocess.TimeoutExpired:
            pass
    return passed / len(exp["tests"])


def score_extraction(ans: dict[str, Any], exp: dict[str, Any]) -> float:
    import fastjsonschema

    try:
        obj = json.loads(ans.get("text", ""))
    except ValueError:
        return 0.0
    try:
        fastjsonschema.validate(exp["schema"], obj)
    except fastjsonschema.JsonSchemaException:
        return 0.25
    fields = exp["fields"]
    right = sum(bool(obj.get(k) == v) for k, v in fields.items())
    return 0.5 + 0.5 * right / len(fields)


def score_tools(ans: dict[str, Any], exp: dict[str, Any]) -> float:
    calls = ans.get("tool_calls") or []
    if not calls:
        return 0.0
    fn = calls[0].get("function") or {}
    if fn.get("name") != exp["tool"]:
        return 0.0
    try:
        args = json.loads(fn.get("arguments") or "")
    except ValueError:
        return 0.25
    if not isinstance(args, dict):
        return 0.25
    want = exp["args"]
    right = sum(str(args.get(k, "")).lower() == str(v).lower() for k, v in want.items())
    return 0.5 + 0.5 * right / len(want)


def score_summarization(ans: dict[str, Any], exp: dict[str, Any]) -> float:
    return token_f1(ans.get("text", ""), exp["reference"])


METRICS = {
    "chat": score_chat,
    "reasoning": score_reasoning,
    "code": score_code,
    "extraction": score_extraction,
    "tools": score_tools,
    "summarization": score_summarization,
}
METRIC_NAMES = {
    "chat": "keyword recall",
    "reasoning": "exact number",
    "code": "unit tests passed",
    "extraction": "JSON+schema+fields",
    "tools": "right call+args",
    "summarization": "token F1 vs reference",
}


def answer_key(ans: dict[str, Any]) -> str:
    calls = ans.get("tool_calls")
    return json.dumps(calls, sort_keys=True) if calls else ans.get("text", "")
