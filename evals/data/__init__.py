"""The harnesses' data sets (shipped as package data) and the scripts that build them.

``*.jsonl`` are the sets the harnesses read; ``build_*.py`` write them
(``python -m evals.data.build_classify_set --seed 14`` and the like) from the pools and
templates beside them. Generated data: these modules may run past the 400-line limit.
"""

from pathlib import Path

DIR = Path(__file__).resolve().parent
