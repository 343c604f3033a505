"""Side by side in one run: the task classifier with two model files, per call.

    python -m evals.bench.classify_ab --before OLD.json [--after gateway/routing/textmodel.json]

Times ``classify`` then ``Router.decide`` (the hot path) with each model on a short English
prompt, a short Chinese one, a 20 KB prompt the model decides and the 20 KB summarization
prompt a cue decides; the two models alternate batch by batch, and the figure is the best
batch's mean in microseconds (the least disturbed by other processes on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from evals.bench.texts import prose
from gateway.request.model import ClientRequest, parse_chat
from gateway.routing.classify import Classifier
from gateway.routing.router import Router
from gateway.routing.textmodel import MODEL_PATH
from gateway.rules.schema import Rules, load_rules
from gateway.settings import REPO_RULES


def _req(text: str) -> ClientRequest:
    body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
    return parse_chat(json.dumps(body).encode())


def _rules(model: Path) -> Rules:
    data = load_rules(REPO_RULES).model_dump(mode="json")
    data["classify"]["model"]["path"] = str(model)
    return Rules.model_validate(data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=MODEL_PATH)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args(argv)
    big = prose(20_000, seed=7)
    cases = {
        "short English": _req("How does a refrigerator keep food cold? (#1)"),
        "short Chinese": _req("冰箱是怎么让食物保持低温的？请简单解释一下。"),  # noqa: RUF001
        "20 KB, model decides": _req(big + "\n\nWhat do you make of this?"),
        "20 KB, summarize cue": _req(big + "\n\nSummarize the text above in three bullets."),
    }
    arms = {}
    for name, path in (("before", a.before), ("after", a.after)):
        rules = _rules(path)
        arms[name] = (Classifier(rules), Router(rules))
    print("| prompt | before us | after us | ratio | before task | after task |")
    print("|---|---|---|---|---|---|")
    for label, req in cases.items():
        best = {k: float("inf") for k in arms}
        for _ in range(a.batches):
            for name, (clf, router) in arms.items():
                t0 = time.perf_counter_ns()
                for _ in range(a.calls):
                    router.decide(clf.classify(req, {}), {})
                best[name] = min(best[name], (time.perf_counter_ns() - t0) / a.calls / 1000)
        tasks = [clf.classify(req, {}).task for clf, _ in arms.values()]
        print(
            f"| {label} | {best['before']:.1f} | {best['after']:.1f} | "
            f"{best['after'] / best['before']:.2f} | {tasks[0]} | {tasks[1]} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
