"""The attempt loop: one request over the tiers of its route, within its deadline.

* ``attempts``     :class:`Dispatcher`, the one retry layer and its entry point (``serve``)
* ``fallback``     what each attempt failure means for the request: the one table
* ``opening``, ``relay``, ``complete``   a streamed attempt up to its first token, its
  live phase, and a non-streamed attempt
* ``hedge``, ``bridge``, ``continuation``, ``splice``, ``live``, ``rate``
  the tail guards and how a broken stream is finished
* ``budget``, ``call``, ``outcome``, ``assemble``   time budgets, the request's context,
  what a loop leaves behind, a non-streamed answer assembled from events
* ``shadow``       a sampled copy of live traffic, answered again by the standard tier
"""

from gateway.dispatch.attempts import Dispatcher

__all__ = ("Dispatcher",)
