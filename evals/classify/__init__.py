"""``python -m evals classify``: the task classifier on held-out prompts, and its training.

* ``run``    accuracy, confusion, what decided, latency; ``--train`` rebuilds the model
* ``train``  the linear model's fit (numpy; imported only when training)
"""
