"""``python -m evals checks``: precision, recall and cost of each quality check on the
labelled set (``evals/data/checks_labelled.jsonl``); all of it in ``run``.
"""
