"""``python -m evals semcache``: the semantic cache's false hits and hit rate on labelled
prompt pairs (``evals/data/semantic_pairs.jsonl``); all of it in ``run``.
"""
