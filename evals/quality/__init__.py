"""``python -m evals quality``: both tiers on the shipped eval set, side by side.

* ``metrics``  the score of an answer, per task
* ``report``   the Markdown report and the plot
* ``run``      asking the targets, the per-task verdict, ``--shadow``, ``main``
"""
