"""The examples the console's forms offer, one place for all of them.

Each is offered next to the field it fills (a button; ``static/console.js`` puts it in the
field) and each is accepted by the form it is offered in, against the repository's rules:
``tests/test_console_units.py`` checks them against the admin API's own validation, and
``tests/test_console.py`` clicks and submits every example on every page in a browser.
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

POLICIES: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "standard tier only, 600 requests a minute",
        {"allowed_tiers": ["standard"], "requests_per_minute": 600},
    ),
    (
        "a monthly budget of a million tokens",
        {"token_budget": {"tokens": 1_000_000, "period": "month"}},
    ),
    (
        "4 requests at once; refused while the store is away",
        {"max_concurrent_requests": 4, "fail_closed": True},
    ),
)

REQUESTS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "a chat",
        {"model": "auto", "messages": [{"role": "user", "content": "Write a haiku about tea."}]},
    ),
    (
        "code, batch SLA (headers too)",
        {
            "path": "/v1/chat/completions",
            "headers": {"x-gateway-sla": "batch"},
            "body": {
                "model": "auto",
                "messages": [{"role": "user", "content": "def fib(n):\n    # complete this"}],
            },
        },
    ),
)


def shown(doc: dict[str, Any]) -> str:
    """An example as the field shows it (indented JSON)."""
    return json.dumps(doc, indent=2)


EXAMPLE_REQUEST = shown(REQUESTS[0][1])  # the explain field's text until one is typed


def _offered(examples: tuple[tuple[str, dict[str, Any]], ...]) -> tuple[tuple[str, ...], ...]:
    """(what it shows, the text it puts in the field, the one-line JSON on its button)."""
    return tuple((label, shown(doc), json.dumps(doc)) for label, doc in examples)


# field id -> the examples offered for it, as the templates show them
FOR_FIELD = MappingProxyType(
    {
        "tenant-policy": _offered(POLICIES),
        "policy": _offered(POLICIES),
        "explain-request": _offered(REQUESTS),
    }
)
