"""The client's request as the gateway reads it: body bytes to one validated value.

* ``model``  :class:`ClientRequest`, ``parse_chat``, ``parse_completion``, ``decode_body``
"""

from gateway.request.model import ClientRequest, decode_body, parse_chat, parse_completion

__all__ = ("ClientRequest", "decode_body", "parse_chat", "parse_completion")
