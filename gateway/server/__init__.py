"""The data plane: aiohttp app, the OpenAI wire format in and out, SSE.

* ``app``, ``state``, ``handlers``, ``middleware``, ``cors``   the app, its published
  state, the small routes, the last line against a 500
* ``completions``, ``exchange``, ``replies``   chat and text completions, one request's
  record, request ids and error replies
* ``responses_api``, ``responses_format``, ``responses_stream``   the Responses API
* ``embeddings``   embeddings, routed to tiers that serve them
"""
