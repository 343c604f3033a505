"""Writes ``evals/data/checks_labelled.jsonl``, the labelled set of ``python -m evals checks``.

    python evals/data/build_checks_set.py     # rewrites the .jsonl next to this file

Each line is one case: ``{"id", "category", "expect_fail", "facts", "output"}``, where
``expect_fail`` lists the checks of ``gateway.checks.CHECK_NAMES`` that *should* fail on the
answer (the ground truth, written by hand, not by running the checks), ``facts`` holds the
``RequestFacts`` fields and ``output`` the ``Output`` fields. The good answers are written
by hand to look like what an instruction-tuned model answers; degraded ones are good answers
broken the way models break (loops, cut-offs, leaked chat-template tokens, bad JSON, bad
tool calls, canned refusals, empty answers). Every category of failures comes with
look-alikes that are fine (tables, lyrics, zero matrices, "I can't help but notice" ...).

Deterministic: no randomness, no clock; the same code always writes the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("checks_labelled.jsonl")
Case = dict[str, Any]

# --- request shapes -------------------------------------------------------------------------

WEATHER = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City and country, e.g. Paris, FR"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location"],
}
SEARCH = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "top_k": {"type": "integer", "minimum": 1, "maximum": 20},
    },
    "required": ["query"],
}
TICKET = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 120},
        "priority": {"type": "string", "enum": ["low", "medium", "high"]},
        "labels": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["title", "priority"],
    "additionalProperties": False,
}
TOOLS: dict[str, dict[str, Any] | None] = {
    "get_weather": WEATHER,
    "search_docs": SEARCH,
    "create_ticket": TICKET,
    "get_time": None,
}

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "email": {"type": ["string", "null"]},
        "skills": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
SENTIMENT = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["positive", "negative", "neutral"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["label", "confidence"],
}
INVOICE = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string", "pattern": "^INV-[0-9]{4,}$"},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
        "total": {"type": "number"},
        "line_items": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "description": {"type": "string"},
                    "quantity": {"type": "integer", "minimum": 1},
                    "unit_price": {"type": "number"},
                },
                "required": ["description", "quantity", "unit_price"],
            },
        },
    },
    "required": ["invoice_number", "currency", "total", "line_items"],
}


# --- hand-written texts ---------------------------------------------------------------------
# Written the way an instruction-tuned model answers: Markdown, one line per paragraph.

GOOD_PROSE = {
    "tcp-vs-udp": (
        "TCP and UDP are both transport-layer protocols, but they make opposite trade-offs.\n\n"
        "**TCP** is connection-oriented. Before any data flows, the two hosts perform a "
        "three-way handshake (SYN, SYN-ACK, ACK). After that, TCP guarantees that bytes arrive "
        "in order and without gaps: lost segments are retransmitted, and congestion control "
        "slows the sender down when the network is overloaded. The price is extra latency, "
        "especially on lossy links, because one lost packet holds up everything behind it "
        "(head-of-line blocking).\n\n"
        "**UDP** just sends datagrams. There is no handshake, no retransmission and no ordering, "
        "so each packet may arrive late, twice or not at all. That sounds worse, but it is "
        "exactly what you want for real-time traffic such as voice calls, games or DNS lookups, "
        "where a late packet is useless anyway.\n\n"
        "Rule of thumb: use TCP when every byte matters (web pages, file transfers, database "
        "connections) and UDP when freshness matters more than completeness. QUIC, the protocol "
        "under HTTP/3, is an interesting middle ground: it runs over UDP but rebuilds "
        "reliability per stream, avoiding TCP's head-of-line blocking."
    ),
    "mutex": (
        "A mutex (short for *mutual exclusion*) is a lock that ensures only one thread at a time "
        "can run a critical section of code.\n\n"
        "When a thread wants to touch shared data, it first calls `lock()`. If no other thread "
        "holds the mutex, it gets it immediately and continues. If another thread already holds "
        "it, the caller blocks until the owner calls `unlock()`. This prevents race conditions "
        "such as two threads incrementing the same counter and losing one of the updates.\n\n"
        "A few practical tips:\n\n"
        "- Keep the critical section as short as possible; long sections serialize your "
        "program.\n"
        "- Always release the lock, even on errors. In C++ use `std::lock_guard`, in Python use "
        "`with lock:`, in Go use `defer mu.Unlock()`.\n"
        "- Acquire multiple locks in a consistent global order, otherwise two threads can each "
        "hold one lock and wait forever for the other (a deadlock).\n\n"
        "If you only need to protect a single integer, an atomic operation is usually cheaper "
        "than a mutex."
    ),
    "sky-blue": (
        "The sky looks blue because of a phenomenon called **Rayleigh scattering**.\n\n"
        "Sunlight contains all visible wavelengths. When it enters the atmosphere, it hits "
        "nitrogen and oxygen molecules that are much smaller than the wavelength of the light. "
        "Such small particles scatter short wavelengths far more strongly than long ones: the "
        "intensity of the scattered light is proportional to 1/λ⁴, so blue light (about 450 nm) "
        "is scattered roughly five times more than red light (about 700 nm).\n\n"
        "This scattered blue light reaches your eyes from every direction, which is why the "
        "whole sky appears blue rather than just the area around the Sun. Violet light is "
        "scattered even more, but the Sun emits less of it, some is absorbed high in the "
        "atmosphere, and our eyes are less sensitive to it.\n\n"
        "At sunrise and sunset the light travels through much more air before reaching you, so "
        "most of the blue is scattered away and the remaining light looks orange and red."
    ),
    "eventual-consistency": (
        "Eventual consistency is a guarantee offered by many distributed databases: if no new "
        "updates are made to a piece of data, all replicas will *eventually* return the same "
        "value.\n\n"
        "It does not promise that a read right after a write sees that write. If you write to "
        "replica A and immediately read from replica B, you may get the old value for a short "
        "time while the update propagates. Systems like Amazon DynamoDB (by default), Cassandra "
        "and DNS work this way because it lets them stay available during network partitions "
        "and keep write latency low.\n\n"
        "The alternative, strong consistency, makes every read reflect the latest committed "
        "write, usually by coordinating through a leader or a quorum. That is simpler to "
        "reason about but costs latency and availability when nodes cannot talk to each other."
    ),
    "compound-interest": (
        "Compound interest means you earn interest not only on your original deposit but also "
        "on the interest you have already earned.\n\n"
        "The formula is:\n\n"
        "A = P \u00d7 (1 + r/n)^(n·t)\n\n"
        "where P is the principal, r the annual rate, n the number of compounding periods per "
        "year and t the number of years.\n\n"
        "For example, $10,000 at 5% compounded monthly for 10 years gives:\n\n"
        "A = 10,000 \u00d7 (1 + 0.05/12)^120 ≈ $16,470.09\n\n"
        "With simple interest you would have $15,000, so compounding added about $1,470. The "
        "effect grows dramatically over longer periods, which is why starting to save early "
        "matters so much."
    ),
    "http-caching": (
        "Browsers and CDNs decide whether they may reuse a response based on a few headers.\n\n"
        "`Cache-Control` is the main one. `max-age=3600` says the response is fresh for an hour; "
        "`no-cache` means the cache must revalidate with the server before every reuse (it does "
        '*not* mean "don\'t cache"); `no-store` forbids storing it at all; `private` restricts '
        "it to the browser, so shared caches such as CDNs must not keep it.\n\n"
        "Revalidation uses validators. The server sends an `ETag` (an opaque version string) or "
        "a `Last-Modified` date. When the cached copy is stale, the browser asks again with "
        "`If-None-Match` or `If-Modified-Since`, and if nothing changed the server answers "
        "`304 Not Modified` with no body, which saves bandwidth.\n\n"
        "For static assets with hashed file names (like `app.3f9a1c.js`), a common pattern is "
        "`Cache-Control: public, max-age=31536000, immutable`, while the HTML page that "
        "references them uses `no-cache` so deploys are picked up immediately."
    ),
    "merge-vs-rebase": (
        "Both commands integrate changes from one branch into another; they differ in the "
        "history they leave behind.\n\n"
        "`git merge main` (run on your feature branch) creates a new merge commit with two "
        "parents. Your existing commits stay exactly as they were, so the history shows when "
        "the branches diverged and came back together. It is safe on shared branches because "
        "nothing is rewritten.\n\n"
        "`git rebase main` takes your feature commits and replays them one by one on top of the "
        "latest `main`. The result is a linear history, as if you had started your work from "
        "the current `main`. Because the replayed commits get new hashes, you should not rebase "
        "commits that others have already pulled; if you do, they will have to reconcile "
        "duplicated commits.\n\n"
        "A common workflow: rebase your private feature branch to keep it up to date and tidy, "
        "then merge it into `main` through a pull request."
    ),
    "vaccines": (
        "Vaccines train the immune system to recognize a pathogen without you having to get "
        "sick first.\n\n"
        "A vaccine contains something that looks like the pathogen to the immune system: a "
        "weakened or inactivated virus, a purified protein from its surface, or, in mRNA "
        "vaccines, instructions that let your own cells make that protein for a short time. "
        "Immune cells detect these antigens and mount a response. B cells produce antibodies "
        "that bind to the antigen, and T cells learn to recognize and kill infected cells.\n\n"
        "Crucially, some of these cells become long-lived **memory cells**. If you later meet "
        "the real pathogen, memory cells recognize it within hours instead of the days a first "
        "response takes, so the infection is usually stopped before it makes you seriously "
        "ill. Booster doses remind the immune system and raise antibody levels again when "
        "protection wanes."
    ),
    "dict-complexity": (
        "Python's `dict` is a hash table, so the common operations are fast on average:\n\n"
        "- lookup `d[key]`, insertion `d[key] = value` and deletion `del d[key]` are O(1) "
        "on average;\n"
        "- iterating over all items is O(n);\n"
        "- `key in d` is O(1) on average, unlike `value in d.values()`, which is O(n).\n\n"
        "The worst case for a single lookup is O(n), when many keys collide in the same slot, "
        "but with Python's hash functions and random string hashing this practically never "
        "happens. Resizing happens when the table is about two-thirds full; a single insertion "
        "that triggers it costs O(n), but amortized over all insertions it is still O(1).\n\n"
        "Since Python 3.7, dicts also preserve insertion order as part of the language "
        "specification."
    ),
    "index-explain": (
        "Your query is slow because PostgreSQL cannot use an index for the filter, so it reads "
        "the whole `orders` table (that's the `Seq Scan` in the plan, with 4.2 million rows "
        "examined to return 37).\n\n"
        "The condition `WHERE lower(email) = 'a@b.com'` applies a function to the column, and "
        "your index is on `email` itself. Either create an expression index:\n\n"
        "```sql\nCREATE INDEX CONCURRENTLY orders_lower_email_idx ON orders (lower(email));\n"
        "```\n\n"
        "or store emails already lower-cased and compare the column directly. After creating "
        "the index, run `ANALYZE orders;` and check `EXPLAIN (ANALYZE, BUFFERS)` again: you "
        "should see an `Index Scan using orders_lower_email_idx` and the execution time drop "
        "from seconds to well under a millisecond."
    ),
}

GOOD_LISTS = {
    "packing": (
        "Here's a packing list for a 4-day hiking trip in the Alps in September:\n\n"
        "**Clothing**\n"
        "- Moisture-wicking base layers (2 tops, 1 bottom)\n"
        "- Fleece or light down jacket\n"
        "- Waterproof shell jacket and trousers\n"
        "- Hiking trousers and one pair of shorts\n"
        "- 3 pairs of merino socks\n"
        "- Warm hat and thin gloves (mornings can be near freezing)\n\n"
        "**Gear**\n"
        "- 30-40 L backpack with rain cover\n"
        "- Broken-in hiking boots\n"
        "- Trekking poles\n"
        "- Headlamp with spare batteries\n"
        "- 2 L of water capacity\n\n"
        "**Other**\n"
        "- Sunscreen, sunglasses, lip balm\n"
        "- Small first-aid kit and blister plasters\n"
        "- Hut reservations, ID and some cash (many huts don't take cards)\n\n"
        "Check the weather forecast the day before: conditions above 2,500 m change quickly."
    ),
    "router-reset": (
        "To reset your router to factory settings:\n\n"
        "1. Make sure the router is powered on.\n"
        "2. Find the small **Reset** hole on the back, usually next to the power port.\n"
        "3. Press and hold the button with a paperclip for about 10 seconds, until the lights "
        "flash.\n"
        "4. Release it and wait 2-3 minutes while the router restarts.\n"
        "5. Connect to the default Wi-Fi network printed on the label under the router.\n"
        "6. Open `http://192.168.1.1` in a browser and log in with the default credentials from "
        "the same label.\n"
        "7. Set a new admin password and Wi-Fi password right away.\n\n"
        "Note that a factory reset erases all your custom settings, including port forwarding "
        "rules and the PPPoE login from your internet provider, so have those details ready."
    ),
    "pros-cons": (
        "**Pros of a monorepo**\n"
        "- Atomic changes across services and libraries in a single commit\n"
        "- One place for tooling, linting and CI configuration\n"
        "- Easier code discovery and refactoring\n\n"
        "**Cons of a monorepo**\n"
        "- CI needs to be smart about building only what changed, or it gets slow\n"
        "- Git operations slow down as the repository grows large\n"
        "- Access control per project is harder than with separate repositories\n\n"
        "For a team of around 15 engineers with a handful of services sharing code, a monorepo "
        "with a build tool like Bazel, Nx or Turborepo is usually worth it."
    ),
    "recipe": (
        "**Simple tomato pasta (serves 2)**\n\n"
        "Ingredients:\n"
        "- 200 g spaghetti\n"
        "- 1 can (400 g) chopped tomatoes\n"
        "- 2 cloves garlic, thinly sliced\n"
        "- 3 tbsp olive oil\n"
        "- A pinch of chili flakes\n"
        "- Salt, pepper and a few basil leaves\n\n"
        "Steps:\n"
        "1. Bring a large pot of salted water to a boil and cook the pasta until al dente.\n"
        "2. Meanwhile, warm the olive oil in a pan over medium heat and fry the garlic and "
        "chili for 1 minute without letting it brown.\n"
        "3. Add the tomatoes, season, and simmer for 10 minutes.\n"
        "4. Drain the pasta, keeping a cup of the cooking water.\n"
        "5. Toss the pasta in the sauce with a splash of the water until glossy, then add "
        "the basil.\n\n"
        "Enjoy! A little grated Parmesan on top never hurts."
    ),
    "nested-onboarding": (
        "Week 1 onboarding plan:\n\n"
        "1. **Day 1 - Setup**\n"
        "   - Laptop, SSO and VPN access\n"
        "   - Clone the main repository and run the test suite locally\n"
        "2. **Day 2 - Architecture**\n"
        "   - Read the architecture overview in the wiki\n"
        "   - 1:1 with your onboarding buddy to walk through the request path\n"
        "3. **Days 3-4 - First change**\n"
        "   - Pick a ticket labelled `good-first-issue`\n"
        "   - Open a pull request and go through code review\n"
        "4. **Day 5 - Operations**\n"
        "   - Shadow the on-call engineer for a few hours\n"
        "   - Review the last two incident post-mortems"
    ),
    "checklist": (
        "Pre-release checklist:\n\n"
        "- [x] All CI checks green on `main`\n"
        "- [x] Changelog updated\n"
        "- [ ] Version bumped in `pyproject.toml`\n"
        "- [ ] Database migrations tested on a staging snapshot\n"
        "- [ ] Feature flags for the new billing page set to 10% rollout\n"
        "- [ ] Release notes sent to support\n\n"
        "Four items are still open; I'd hold the release until the migration test is done."
    ),
}

GOOD_TABLES = {
    "databases": (
        "Here's a quick comparison:\n\n"
        "| Feature | PostgreSQL | MySQL | SQLite |\n"
        "|---|---|---|---|\n"
        "| Type | Client-server | Client-server | Embedded |\n"
        "| JSON support | `jsonb` with indexes | `JSON` type | JSON1 functions |\n"
        "| Full-text search | Built in | Built in (InnoDB) | FTS5 extension |\n"
        "| Concurrency | MVCC, high | MVCC (InnoDB), high | One writer at a time |\n"
        "| Replication | Streaming, logical | Binlog, group replication | None built in |\n"
        "| Best for | Complex queries, analytics | Web apps, read-heavy loads | Local and mobile "
        "apps, tests |\n\n"
        "If you need a server database and have no strong preference, PostgreSQL is the safest "
        "default today."
    ),
    "http-status": (
        "| Code | Name | When to use it |\n"
        "|:----:|------|----------------|\n"
        "| 200 | OK | The request succeeded and the body has the result |\n"
        "| 201 | Created | A resource was created; add a `Location` header |\n"
        "| 204 | No Content | Success with no body, e.g. after `DELETE` |\n"
        "| 400 | Bad Request | The input is malformed or fails validation |\n"
        "| 401 | Unauthorized | Missing or invalid credentials |\n"
        "| 403 | Forbidden | Authenticated, but not allowed |\n"
        "| 404 | Not Found | The resource does not exist |\n"
        "| 409 | Conflict | Version conflict, duplicate key |\n"
        "| 429 | Too Many Requests | Rate limited; send `Retry-After` |\n"
        "| 500 | Internal Server Error | An unexpected bug on the server |\n"
        "| 503 | Service Unavailable | Overloaded or in maintenance |"
    ),
    "schedule": (
        "Proposed on-call rotation for Q3:\n\n"
        "| Week | Primary | Secondary |\n"
        "|------|---------|-----------|\n"
        "| Jul 1 | Priya | Tom |\n"
        "| Jul 8 | Tom | Sofia |\n"
        "| Jul 15 | Sofia | Malik |\n"
        "| Jul 22 | Malik | Priya |\n"
        "| Jul 29 | Priya | Tom |\n"
        "| Aug 5 | Tom | Sofia |\n"
        "| Aug 12 | Sofia | Malik |\n"
        "| Aug 19 | Malik | Priya |\n\n"
        "Each person is primary every four weeks and never primary two weeks in a row."
    ),
    "complexity": (
        "| Operation | Array | Linked list | Hash table | Balanced BST |\n"
        "|-----------|:-----:|:-----------:|:----------:|:------------:|\n"
        "| Access by index | O(1) | O(n) | - | O(log n) |\n"
        "| Search | O(n) | O(n) | O(1) avg | O(log n) |\n"
        "| Insert at front | O(n) | O(1) | - | - |\n"
        "| Insert (general) | O(n) | O(1)* | O(1) avg | O(log n) |\n"
        "| Delete | O(n) | O(1)* | O(1) avg | O(log n) |\n\n"
        "\\* given a pointer to the node; finding it first is O(n)."
    ),
    "sparse-cells": (
        "Results of the load test (empty cells: the run did not reach that concurrency):\n\n"
        "| Concurrency | p50 (ms) | p95 (ms) | p99 (ms) | Errors |\n"
        "|---|---|---|---|---|\n"
        "| 1 | 41 | 55 | 63 | 0 |\n"
        "| 8 | 44 | 71 | 90 | 0 |\n"
        "| 32 | 58 | 130 | 210 | 2 |\n"
        "| 64 |  |  |  |  |\n"
        "| 128 |  |  |  |  |\n\n"
        "The service saturates between 32 and 64 concurrent clients."
    ),
}

GOOD_CODE = {
    "python-retry": (
        "Here's a small retry decorator with exponential backoff:\n\n"
        "```python\n"
        "import functools\n"
        "import random\n"
        "import time\n\n\n"
        "def retry(times=3, base_delay=0.5, exceptions=(Exception,)):\n"
        "    def decorator(func):\n"
        "        @functools.wraps(func)\n"
        "        def wrapper(*args, **kwargs):\n"
        "            for attempt in range(times):\n"
        "                try:\n"
        "                    return func(*args, **kwargs)\n"
        "                except exceptions:\n"
        "                    if attempt == times - 1:\n"
        "                        raise\n"
        "                    delay = base_delay * 2 ** attempt\n"
        "                    time.sleep(delay + random.uniform(0, delay / 2))\n"
        "        return wrapper\n"
        "    return decorator\n"
        "```\n\n"
        "Use it like `@retry(times=5, exceptions=(ConnectionError,))`. The random jitter keeps "
        "many clients from retrying in lockstep."
    ),
    "sql-report": (
        "This query gives monthly revenue and the number of distinct paying customers:\n\n"
        "```sql\n"
        "SELECT\n"
        "    date_trunc('month', o.created_at) AS month,\n"
        "    count(DISTINCT o.customer_id)     AS customers,\n"
        "    sum(oi.quantity * oi.unit_price)  AS revenue\n"
        "FROM orders o\n"
        "JOIN order_items oi ON oi.order_id = o.id\n"
        "WHERE o.status = 'paid'\n"
        "  AND o.created_at >= now() - interval '12 months'\n"
        "GROUP BY 1\n"
        "ORDER BY 1;\n"
        "```\n\n"
        "If `orders` is large, an index on `(status, created_at)` will help the filter."
    ),
    "js-fetch": (
        "You need to `await` the JSON parsing as well, and check `response.ok`, because `fetch` "
        "only rejects on network errors, not on HTTP 4xx/5xx:\n\n"
        "```js\n"
        "async function loadUser(id) {\n"
        "  const response = await fetch(`/api/users/${id}`);\n"
        "  if (!response.ok) {\n"
        "    throw new Error(`HTTP ${response.status}`);\n"
        "  }\n"
        "  const user = await response.json();\n"
        "  return user;\n"
        "}\n\n"
        "loadUser(42)\n"
        "  .then((user) => console.log(user.name))\n"
        "  .catch((err) => console.error('Failed to load user:', err));\n"
        "```"
    ),
    "bash-backup": (
        "```bash\n"
        "#!/usr/bin/env bash\n"
        "set -euo pipefail\n\n"
        'SRC="/var/www"\n'
        'DEST="/backups"\n'
        'STAMP="$(date +%Y-%m-%d_%H%M)"\n\n'
        'tar -czf "$DEST/www-$STAMP.tar.gz" -C "$SRC" .\n'
        "# keep the 14 most recent archives\n"
        'ls -1t "$DEST"/www-*.tar.gz | tail -n +15 | xargs -r rm --\n'
        "```\n\n"
        "Schedule it with `crontab -e` and a line like `30 2 * * * /usr/local/bin/backup.sh`."
    ),
    "rust-struct": (
        "In Rust you'd model it with a struct and an `impl` block:\n\n"
        "```rust\n"
        "#[derive(Debug, Clone, PartialEq)]\n"
        "pub struct Temperature {\n"
        "    celsius: f64,\n"
        "}\n\n"
        "impl Temperature {\n"
        "    pub fn from_fahrenheit(f: f64) -> Self {\n"
        "        Self { celsius: (f - 32.0) * 5.0 / 9.0 }\n"
        "    }\n\n"
        "    pub fn fahrenheit(&self) -> f64 {\n"
        "        self.celsius * 9.0 / 5.0 + 32.0\n"
        "    }\n"
        "}\n"
        "```\n\n"
        "Keeping the field private forces callers through the constructors, so the unit is "
        "never ambiguous."
    ),
    "dockerfile": (
        "A multi-stage build keeps the final image small:\n\n"
        "```dockerfile\n"
        "FROM python:3.12-slim AS build\n"
        "WORKDIR /app\n"
        "COPY pyproject.toml .\n"
        "RUN pip wheel --no-cache-dir --wheel-dir /wheels .\n\n"
        "FROM python:3.12-slim\n"
        "WORKDIR /app\n"
        "COPY --from=build /wheels /wheels\n"
        "RUN pip install --no-cache-dir /wheels/* && rm -rf /wheels\n"
        "COPY src/ ./src/\n"
        "USER 1000\n"
        'CMD ["python", "-m", "src.server"]\n'
        "```"
    ),
    "pytest-params": (
        "Parametrize the test instead of copying it:\n\n"
        "```python\n"
        "import pytest\n\n"
        "from myapp.text import slugify\n\n\n"
        "@pytest.mark.parametrize(\n"
        '    ("raw", "expected"),\n'
        "    [\n"
        '        ("Hello World", "hello-world"),\n'
        '        ("  Hello   World  ", "hello-world"),\n'
        '        ("Hello, World!", "hello-world"),\n'
        '        ("hello-world", "hello-world"),\n'
        '        ("Héllo Wörld", "hello-world"),\n'
        '        ("HELLO_WORLD", "hello-world"),\n'
        '        ("", ""),\n'
        "    ],\n"
        ")\n"
        "def test_slugify(raw, expected):\n"
        "    assert slugify(raw) == expected\n"
        "```\n\n"
        "Each tuple becomes its own test case in the report, so a failure tells you exactly "
        "which input broke."
    ),
    "k8s-yaml": (
        "```yaml\n"
        "apiVersion: apps/v1\n"
        "kind: Deployment\n"
        "metadata:\n"
        "  name: api\n"
        "spec:\n"
        "  replicas: 3\n"
        "  selector:\n"
        "    matchLabels:\n"
        "      app: api\n"
        "  template:\n"
        "    metadata:\n"
        "      labels:\n"
        "        app: api\n"
        "    spec:\n"
        "      containers:\n"
        "        - name: api\n"
        "          image: registry.example.com/api:1.8.2\n"
        "          ports:\n"
        "            - containerPort: 8080\n"
        "          resources:\n"
        "            requests:\n"
        "              cpu: 250m\n"
        "              memory: 256Mi\n"
        "            limits:\n"
        "              memory: 512Mi\n"
        "          readinessProbe:\n"
        "            httpGet:\n"
        "              path: /readyz\n"
        "              port: 8080\n"
        "```\n\n"
        "The readiness probe keeps traffic away from a pod until it can actually serve."
    ),
}

GOOD_SHORT = {
    "paris": "Paris.",
    "yes": "Yes.",
    "answer-42": "42",
    "zero": "0",
    "git-command": "`git stash pop`",
    "hashable": "No - lists are mutable, so they are not hashable. Use a tuple instead.",
    "true": "True",
    "latency": "About 4 ms.",
    "thumbs-up": "👍",
}

GOOD_LONG = {
    "postgres-backups": (
        "# Backing up PostgreSQL in production\n\n"
        "A good backup strategy answers two questions: how much data can you afford to lose "
        "(the recovery point objective, RPO) and how long can you afford to be down (the "
        "recovery time objective, RTO). PostgreSQL gives you three building blocks, and most "
        "production setups combine at least two of them.\n\n"
        "## 1. Logical backups with pg_dump\n\n"
        "`pg_dump` exports one database as SQL or in PostgreSQL's custom format. It is simple, "
        "portable across major versions and lets you restore a single table, which makes it "
        "great for small databases and for migrations.\n\n"
        "```bash\n"
        "pg_dump -Fc -d shop -f /backups/shop-$(date +%F).dump\n"
        "pg_restore -d shop_restored --jobs 4 /backups/shop-2024-05-01.dump\n"
        "```\n\n"
        "The downside is that a dump is a snapshot: anything written after it started is lost "
        "if you have to restore, and dumping a 500 GB database takes hours and puts noticeable "
        "load on the server.\n\n"
        "## 2. Physical base backups\n\n"
        "`pg_basebackup` copies the data directory of the whole cluster while it is running. "
        "Restoring is much faster than replaying SQL, because PostgreSQL simply starts on the "
        "copied files. On its own, though, a base backup still only gives you the state at the "
        "moment it finished.\n\n"
        "## 3. WAL archiving and point-in-time recovery\n\n"
        "Every change in PostgreSQL is first written to the write-ahead log (WAL). If you keep "
        "every WAL segment since your last base backup, you can restore the base backup and "
        "replay the WAL up to any moment you choose, for example one second before someone ran "
        "`DELETE FROM orders` without a `WHERE` clause. This is called point-in-time recovery "
        "(PITR), and it brings your RPO down to seconds.\n\n"
        "Configure it in `postgresql.conf`:\n\n"
        "```ini\n"
        "wal_level = replica\n"
        "archive_mode = on\n"
        "archive_command = 'pgbackrest --stanza=main archive-push %p'\n"
        "```\n\n"
        "## Use a dedicated tool\n\n"
        "Writing your own `archive_command` with `cp` or `rsync` is a classic source of silent "
        "data loss: a failed copy, a half-written file or a full disk can go unnoticed for "
        "weeks. Tools like **pgBackRest**, **Barman** or **WAL-G** handle compression, "
        "encryption, parallelism, retention policies and, most importantly, verification. They "
        "also support incremental backups, so you don't need a full copy every night.\n\n"
        "A typical pgBackRest schedule looks like this:\n\n"
        "| Backup type | Frequency | Retention |\n"
        "|---|---|---|\n"
        "| Full | Weekly (Sunday 01:00) | 4 weeks |\n"
        "| Differential | Daily | 7 days |\n"
        "| WAL archive | Continuous | Until the oldest full backup |\n\n"
        "## Store backups somewhere else\n\n"
        "A backup on the same disk, or even in the same data center, does not protect you from "
        "the failures that matter most. Push backups to object storage in another region (S3, "
        "GCS or Azure Blob Storage all work with the tools above) and enable object lock or "
        "versioning so that an attacker with access to the database server cannot delete "
        "them.\n\n"
        "## Test your restores\n\n"
        "A backup you have never restored is a hope, not a backup. Automate a restore test at "
        "least weekly:\n\n"
        "1. Provision a temporary instance.\n"
        "2. Restore the latest backup and replay WAL to a recent timestamp.\n"
        "3. Run a few sanity queries, such as row counts of key tables and the newest "
        "`created_at` value.\n"
        "4. Record how long the restore took: that is your real RTO.\n"
        "5. Tear the instance down.\n\n"
        "## Monitor\n\n"
        "Finally, alert on the things that break quietly: the age of the last successful "
        "backup, the number of WAL segments waiting to be archived (`pg_stat_archiver` shows "
        "failed attempts) and free space in the backup repository. With base backups, "
        "continuous WAL archiving, off-site copies and regular restore tests, you can recover "
        "from a dropped table, a corrupted disk or a lost region with only seconds of data "
        "loss."
    ),
    "incident-review": (
        "## Post-incident review: checkout errors on 12 March\n\n"
        "**Summary.** Between 14:02 and 14:49 UTC, about 18% of checkout attempts failed with "
        "HTTP 502. Roughly 3,100 customers were affected and an estimated 41,000 EUR of orders "
        "were delayed; most customers retried successfully later the same day. No data was "
        "lost.\n\n"
        "**Timeline (UTC)**\n\n"
        "- 13:55 - Deploy of `payments-api` v2.14.0 starts (canary at 10%).\n"
        "- 14:02 - Error rate on the canary rises to 20%; the automated canary analysis does "
        "not fire because its threshold is evaluated over 15 minutes.\n"
        "- 14:10 - The deploy is promoted to 100% by the pipeline.\n"
        "- 14:14 - The on-call engineer is paged by the checkout SLO burn-rate alert.\n"
        "- 14:31 - The team identifies connection pool exhaustion towards the fraud-scoring "
        "service.\n"
        "- 14:42 - Rollback to v2.13.3 completes.\n"
        "- 14:49 - Error rate back to baseline.\n\n"
        "**Root cause.** Version 2.14.0 replaced the HTTP client used to call the fraud-scoring "
        "service. The new client defaults to a pool of 10 connections per host, while the old "
        "one allowed 100. Under normal afternoon load each pod needs around 40 concurrent "
        "calls, so requests queued inside the client until the 2-second timeout expired, and "
        "the gateway returned 502 to the browser.\n\n"
        "**Why it was not caught earlier.**\n\n"
        "1. The load test in staging runs at 5% of production traffic, where 10 connections "
        "are enough.\n"
        "2. The canary analysis compares 15-minute windows, which is longer than the canary "
        "phase itself, so the pipeline promoted the release before the analysis had enough "
        "data.\n"
        "3. The client library's pool size was not visible in the code review, because it was "
        "a default rather than an explicit setting.\n\n"
        "**What went well.** The burn-rate alert paged within 12 minutes of the start, the "
        "runbook for rolling back was accurate, and the status page was updated at 14:20, well "
        "before the first support tickets arrived.\n\n"
        "**What went poorly.** Finding the cause took 17 minutes because the client's pool "
        "metrics were not exported, and we had to infer exhaustion from latency histograms. "
        "We also hesitated to roll back before understanding the problem; the runbook should "
        "state clearly that rolling back comes first.\n\n"
        "**Action items**\n\n"
        "| # | Action | Owner | Due |\n"
        "|---|---|---|---|\n"
        "| 1 | Set pool size explicitly in all service clients and add a lint rule | Dana | 22 "
        "March |\n"
        "| 2 | Export connection pool metrics (in use, waiting, timeouts) | Ravi | 29 March |\n"
        "| 3 | Shorten the canary analysis window to 5 minutes and block promotion until it "
        "completes | Chen | 5 April |\n"
        "| 4 | Run the staging load test at 30% of peak traffic before each payments release "
        "| Dana | 12 April |\n"
        "| 5 | Update the runbook: roll back first, investigate second | Ravi | 15 March |\n\n"
        "**Lessons.** Defaults in third-party libraries are part of our configuration and need "
        "the same review as our own settings. And a canary only protects us if the analysis "
        "finishes before the rollout continues."
    ),
    "python-packaging": (
        "Packaging a Python library today is much simpler than it used to be. You need one "
        "configuration file, `pyproject.toml`, and two tools: a build frontend and an upload "
        "tool.\n\n"
        "### 1. Lay out the project\n\n"
        "The `src` layout avoids a whole class of bugs where tests accidentally import the "
        "local folder instead of the installed package:\n\n"
        "```text\n"
        "mylib/\n"
        "├── pyproject.toml\n"
        "├── README.md\n"
        "├── LICENSE\n"
        "├── src/\n"
        "│   └── mylib/\n"
        "│       ├── __init__.py\n"
        "│       └── core.py\n"
        "└── tests/\n"
        "    └── test_core.py\n"
        "```\n\n"
        "### 2. Write pyproject.toml\n\n"
        "```toml\n"
        "[build-system]\n"
        'requires = ["hatchling"]\n'
        'build-backend = "hatchling.build"\n\n'
        "[project]\n"
        'name = "mylib"\n'
        'version = "0.3.0"\n'
        'description = "Fast parsing of fixed-width reports"\n'
        'readme = "README.md"\n'
        'requires-python = ">=3.9"\n'
        'license = "MIT"\n'
        'authors = [{ name = "Jo Park", email = "jo@example.com" }]\n'
        'dependencies = ["attrs>=23.1"]\n\n'
        "[project.optional-dependencies]\n"
        'test = ["pytest>=8", "hypothesis"]\n\n'
        "[project.urls]\n"
        'Homepage = "https://github.com/jopark/mylib"\n'
        "```\n\n"
        "The `[build-system]` table tells pip which backend builds your package. Hatchling, "
        "setuptools, Flit and PDM's backend all read the same `[project]` table, so you can "
        "switch later without rewriting your metadata.\n\n"
        "### 3. Build\n\n"
        "```bash\n"
        "python -m pip install --upgrade build\n"
        "python -m build\n"
        "```\n\n"
        "This creates two files in `dist/`: a source distribution (`mylib-0.3.0.tar.gz`) and a "
        "wheel (`mylib-0.3.0-py3-none-any.whl`). The wheel is what most users will install; "
        "because your package is pure Python, one wheel works on every platform.\n\n"
        "Before uploading, install the wheel into a fresh virtual environment and run your "
        "tests against it. That catches missing files, such as data files that are not "
        "included in the wheel.\n\n"
        "### 4. Upload\n\n"
        "Create an account on PyPI and, ideally, first on TestPyPI to rehearse:\n\n"
        "```bash\n"
        "python -m pip install --upgrade twine\n"
        "python -m twine check dist/*\n"
        "python -m twine upload --repository testpypi dist/*\n"
        "```\n\n"
        "For real releases, the recommended approach is **trusted publishing** from CI: you "
        "link your GitHub repository to the PyPI project once, and a workflow triggered by a "
        "release tag uploads the files without any long-lived API token stored in secrets.\n\n"
        "### 5. Versioning and changelog\n\n"
        "Follow semantic versioning if you can: bump the patch version for bug fixes, the minor "
        "version for backwards-compatible features and the major version for breaking changes. "
        "Keep a `CHANGELOG.md` and add an entry with every pull request rather than trying to "
        "reconstruct it at release time. If you prefer not to edit the version by hand, tools "
        "like `hatch-vcs` or `setuptools-scm` derive it from your git tags.\n\n"
        "### Common pitfalls\n\n"
        "- Forgetting `requires-python`, which lets pip install your package on interpreters it "
        "does not support.\n"
        "- Pinning exact dependency versions in a library; use lower bounds and let "
        "applications pin.\n"
        "- Uploading a wheel built from a dirty working tree with uncommitted changes.\n"
        "- Reusing a version number: PyPI never lets you upload the same file name twice, even "
        "after deleting a release.\n\n"
        "That's all there is to it: one file of metadata, `python -m build`, and an upload from "
        "CI."
    ),
    "overfitting": (
        "Overfitting happens when a model learns the training data too well, including its "
        "noise and accidental patterns, and therefore performs worse on new data. It is easiest "
        "to see by comparing two curves during training: the training loss keeps going down, "
        "but the validation loss stops improving and starts to rise. The gap between them is "
        "the symptom.\n\n"
        "**Why it happens.** A model with enough capacity can memorize its training set. If "
        "you fit a degree-15 polynomial through 20 noisy points, it will pass through almost "
        "every point and wiggle wildly between them. A deep network with millions of "
        "parameters trained on a few thousand images can do the same, recognizing individual "
        "images instead of the general features of each class. The smaller and noisier the "
        "dataset relative to the model, the bigger the risk.\n\n"
        "**How to detect it.**\n\n"
        "- Always hold out data the model never trains on. A simple split is 80% training, 10% "
        "validation and 10% test; use the validation set to make decisions and touch the test "
        "set only once at the end.\n"
        "- With little data, use k-fold cross-validation so every example is used for "
        "validation exactly once.\n"
        "- Watch for suspiciously good results. Near-perfect accuracy on a hard problem often "
        "means information about the label leaked into the features, for example a timestamp "
        "that correlates with the outcome or duplicated rows shared between the splits.\n\n"
        "**How to reduce it.**\n\n"
        "1. *Get more data.* This is the most reliable fix. When collecting more is not "
        "possible, data augmentation (random crops, flips and color jitter for images; "
        "back-translation or synonym replacement for text) creates plausible new examples.\n"
        "2. *Simplify the model.* Fewer layers, fewer features or a lower polynomial degree "
        "reduce the capacity to memorize.\n"
        "3. *Regularize.* L2 regularization (weight decay) penalizes large weights; L1 pushes "
        "many of them to exactly zero, which also selects features. Dropout randomly disables "
        "neurons during training so the network cannot rely on any single path.\n"
        "4. *Stop early.* Keep the checkpoint with the best validation loss and stop training "
        "when it has not improved for a number of epochs.\n"
        "5. *Use ensembles.* Averaging several models trained with different seeds or on "
        "different subsets (bagging, random forests) cancels out part of each model's "
        "idiosyncratic errors.\n\n"
        "**The opposite problem.** Underfitting is when the model is too simple to capture "
        "the real pattern: both training and validation error stay high. The cure there is the "
        "reverse: a more expressive model, better features or longer training. The goal is the "
        "sweet spot of the bias-variance trade-off, where the model is flexible enough to learn "
        "the signal but constrained enough to ignore the noise.\n\n"
        "**A practical workflow.** Start with a simple baseline, such as logistic regression or "
        "a small gradient-boosted model, and record its validation score. Then increase "
        "complexity step by step, checking after each change whether the validation score "
        "improves. Plot learning curves, which show the score as a function of training set "
        "size: if the validation curve is still rising when you run out of data, more data "
        "will help; if both curves have flattened at a poor level, you need a better model or "
        "better features instead.\n\n"
        "Finally, remember that the validation set itself can be overfit. If you try hundreds "
        "of hyperparameter combinations and keep the best validation score, that score is "
        "optimistic. This is exactly why the untouched test set exists: it gives you one "
        "honest estimate of how the final model will behave in production."
    ),
}

_ZERO_ROW = "[0. 0. 0. 0. 0. 0. 0. 0. 0. 0.]"
_BOARD_RULE = "+---+---+---+---+---+---+---+---+"


def _board(rows: list[str]) -> str:
    """An ASCII chess board, pieces as letters, empty squares as blanks."""
    lines = [_BOARD_RULE]
    for row in rows:
        lines += ["| " + " | ".join(row) + " |", _BOARD_RULE]
    return "\n".join(lines)


LOOKALIKE_REPETITION = {
    "laughter": "Ha ha ha ha ha! That's a great pun. Here's one back: I told my computer I "
    'needed a break, and it said "No problem, I\'ll go to sleep."',
    "lyrics-round": "It's a round, so each group starts the same verse a bit later:\n\n"
    "Row, row, row your boat,\nGently down the stream.\nMerrily, merrily, "
    "merrily, merrily,\nLife is but a dream.",
    "zero-matrix": "`np.zeros((10, 10))` prints:\n\n```\n["
    + "\n ".join([_ZERO_ROW] * 10)
    + "]\n```\n\nAll 100 entries are float zeros.",
    "pytest-parametrize": GOOD_CODE["pytest-params"],
    "chalkboard-lines": "Sure! Here it is, numbered so you can count them:\n\n"
    + "\n".join(f"{i}. I will not waste chalk." for i in range(1, 21)),
    "rules-and-headings": "Report\n"
    + "=" * 80
    + "\n\nSection 1: Inputs\n"
    + "-" * 80
    + "\n\nAll inputs were validated.\n\nSection 2: Results\n"
    + "-" * 80
    + "\n\nNo regressions found.\n"
    + "=" * 80,
    "log-excerpt": "The relevant part of the log is:\n\n```\n"
    "2024-05-02T10:14:03Z WARN pool: connection reset by peer (db-2)\n"
    "2024-05-02T10:14:05Z WARN pool: connection reset by peer (db-2)\n"
    "2024-05-02T10:14:09Z WARN pool: connection reset by peer (db-2)\n"
    "2024-05-02T10:14:17Z ERROR pool: giving up on db-2 after 3 retries\n```\n\n"
    "The exponential spacing (2 s, 4 s, 8 s) shows the retry policy works; db-2 "
    "itself is down.",
    "aligned-columns": "```\n"
    + "\n".join(
        f"{name:<28}{size:>12}{date:>16}"
        for name, size, date in (
            ("README.md", "4.1 KB", "2024-04-01"),
            ("src/", "-", "2024-04-28"),
            ("tests/", "-", "2024-04-28"),
            ("pyproject.toml", "1.2 KB", "2024-03-15"),
            ("LICENSE", "1.1 KB", "2023-11-02"),
        )
    )
    + "\n```",
    "poem-refrain": "Rain on the window, rain on the roof,\nthe kettle is singing, the cat "
    "keeps aloof.\nStay a while longer, stay until noon.\n\nLetters unopened, a "
    "half-finished tune,\nthe radio murmurs of weather and June.\nStay a while "
    "longer, stay until noon.\n\nThe clock on the mantel forgets how to "
    "chime,\nwe have all of the morning and none of the time.\nStay a while "
    "longer, stay until noon.",
    "yaml-hosts": "```yaml\nhosts:\n"
    + "".join(
        f"  - name: web-{i:02d}\n    port: 8080\n    zone: eu-west-1{'abc'[i % 3]}\n"
        for i in range(1, 9)
    )
    + "```",
    "chess-board": "Here is the position after 1. e4:\n\n```\n"
    + _board(
        [
            "rnbqkbnr",
            "pppppppp",
            "        ",
            "        ",
            "    P   ",
            "        ",
            "PPPP PPP",
            "RNBQKBNR",
        ]
    )
    + "\n```",
    "base-pairs": "The sequence has a short tandem repeat in the middle: "
    "GATTACA CAGCAGCAGCAGCAG TTGACC. The CAG unit appears five times, which is "
    "well below the 36+ repeats associated with Huntington's disease.",
}

LOOKALIKE_TEMPLATE = {
    "haskell-alternative": "In Haskell, `<|>` from `Control.Applicative` tries the first parser "
    "and falls back to the second: `number <|> identifier`.",
    "elixir-pipe": '```elixir\n"hello world"\n|> String.split()\n'
    '|> Enum.map(&String.capitalize/1)\n|> Enum.join(" ")\n```',
    "xml-roles": "You can store the dialogue as XML:\n\n```xml\n<conversation>\n  <user>"
    "Where is my order?</user>\n  <assistant>It shipped yesterday.</assistant>\n"
    "</conversation>\n```",
    "regex-slash": "Use the regex `[^/]+$` to get the last path segment, or `[/\\\\]` to split on "
    "both slash styles.",
    "kbd-html": "Press <kbd>Ctrl</kbd> + <kbd>Shift</kbd> + <kbd>P</kbd> to open the command "
    "palette, then type <b>Format Document</b>.",
    "html-strikethrough": "To show a price cut, use the `<s>` element: `<s>$49</s> $29`. Use "
    "`<del>` instead when the text was actually removed from a document.",
    "chatml-explained": "ChatML wraps every message in special tokens. A user turn looks like "
    "this:\n\n```\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n```\n\nThe model "
    "generates until it emits `<|im_end|>`.",
    "inst-without-slash": "Llama 2 prompts start with `[INST]` and put the system prompt inside "
    "`<<SYS>>` markers.",
}

REFUSALS = {
    "llama-cant-help": "I can't help with that.",
    "llama-fulfill": "I can't fulfill that request.",
    "llama-provide-info": "I can't provide information or guidance on illegal or harmful "
    "activities. Can I help you with something else?",
    "sorry-but-assist": "I'm sorry, but I can't assist with that request.",
    "cannot-help-malware": "I cannot help you create malware or software designed to access "
    "systems without permission. If you're interested in security, I can "
    "point you to legal resources like capture-the-flag competitions.",
    "not-able-to-help": "I'm not able to help with writing fake reviews, as they mislead "
    "customers.",
    "ai-language-model": "As an AI language model, I cannot browse the internet or access "
    "real-time information.",
    "wont-help": "I won't help with that. Tracking someone's location without their consent is "
    "illegal in most places.",
    "typographic-apostrophe": "I\u2019m sorry, but I can\u2019t share personal information "
    "about private individuals.",
    "unable-to-assist": "I am unable to assist with that request.",
    "llama-create": "I can't create explicit content involving real people.",
    "sorry-do-that": "Sorry, I can't do that.",
}

LOOKALIKE_REFUSALS = {
    "cant-help-but-notice": "I can't help but notice that your loop never increments `i`, so "
    "`while i < 10` runs forever. Add `i += 1` at the end of the body.",
    "you-cant": "You can't use `await` outside an `async` function. Wrap the call in "
    "`async def main():` and run it with `asyncio.run(main())`.",
    "cant-stress-enough": "I can't stress this enough: take a backup before running the "
    "migration. Then run `alembic upgrade head`.",
    "kernel-cant": "The error means the kernel can't allocate more memory for the process. "
    "Check `dmesg` for OOM-killer messages and raise the container's memory "
    "limit.",
    "cannot-reproduce": "I cannot reproduce the crash with the snippet you posted; on Python "
    "3.12 it prints `[1, 2, 3]`. Could you share the full traceback?",
    "wont-go-into-history": "I won't go into the full history here; the short version is that "
    "UTF-8 won because it is backwards compatible with ASCII.",
    "quoted-refusal-late": GOOD_PROSE["http-caching"] + "\n\nOne more tip: if your support bot "
    'answers "I can\'t help with that" to caching questions, add these '
    "headers to its knowledge base.",
    "linker-cannot": "The linker cannot find `sqrt` because libm is not linked. Add `-lm` at "
    "the end of the command.",
    "disclaimer-then-answer": "As an AI language model, I don't have personal favourites, but "
    "the most recommended beginner languages are Python (readable "
    "syntax, huge ecosystem) and JavaScript (runs in every browser).",
}


def case(
    cid: str,
    category: str,
    text: str = "",
    *,
    fail: Iterable[str] = (),
    finish: str | None = "stop",
    max_tokens: bool = False,
    json_mode: bool = False,
    schema: dict[str, Any] | None = None,
    tools: dict[str, dict[str, Any] | None] | None = None,
    calls: list[dict[str, Any]] | None = None,
) -> Case:
    """One labelled case; ``fail`` is the ground truth (checks that should fail)."""
    return {
        "id": f"{category}/{cid}",
        "category": category,
        "expect_fail": sorted(fail),
        "facts": {
            "max_tokens_set": max_tokens,
            "json_mode": json_mode or schema is not None,
            "json_schema": schema,
            "tools": tools or {},
        },
        "output": {"text": text, "finish_reason": finish, "tool_calls": calls or []},
    }


def call(name: Any, arguments: Any, n: int = 0, kind: str | None = "function") -> dict[str, Any]:
    """An OpenAI-shaped tool call; a dict ``arguments`` is serialized as the engine would."""
    if isinstance(arguments, dict):
        arguments = json.dumps(arguments)
    out: dict[str, Any] = {"id": f"call_{n:02d}"}
    if kind is not None:
        out["type"] = kind
    out["function"] = {"name": name, "arguments": arguments}
    return out


def dumps(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=False)


# --- good answers ---------------------------------------------------------------------------


def good_text_cases() -> list[Case]:
    out = [case(k, "good_prose", v) for k, v in GOOD_PROSE.items()]
    out += [case(k, "good_list", v) for k, v in GOOD_LISTS.items()]
    out += [case(k, "good_table", v) for k, v in GOOD_TABLES.items()]
    out += [case(k, "good_code", v) for k, v in GOOD_CODE.items()]
    out += [case(k, "good_short", v) for k, v in GOOD_SHORT.items()]
    out += [case(k, "good_long", v) for k, v in GOOD_LONG.items()]
    return out


def good_json_cases() -> list[Case]:
    person = {"name": "Amélie Durand", "age": 34, "email": None, "skills": ["SQL", "dbt"]}
    nested = {
        "order_id": "A-10293",
        "customer": {"id": 8812, "tier": "gold", "address": {"city": "Lyon", "zip": "69003"}},
        "items": [
            {"sku": "KB-87", "qty": 1, "price": 89.9},
            {"sku": "MS-2", "qty": 2, "price": 24.5},
        ],
        "notes": 'Leave at the front desk "Bâtiment B".',
    }
    cities = [
        {"city": "Tokyo", "population_millions": 37.4},
        {"city": "Delhi", "population_millions": 32.9},
    ]
    return [
        case("person-schema", "good_json", dumps(person, 2), schema=PERSON),
        case(
            "sentiment-schema",
            "good_json",
            '{"label": "negative", "confidence": 0.91}',
            schema=SENTIMENT,
        ),
        case(
            "invoice-schema",
            "good_json",
            dumps(
                {
                    "invoice_number": "INV-20931",
                    "currency": "EUR",
                    "total": 1290.0,
                    "line_items": [
                        {"description": "Annual support plan", "quantity": 1, "unit_price": 990.0},
                        {
                            "description": "Onboarding workshop (half day)",
                            "quantity": 2,
                            "unit_price": 150,
                        },
                    ],
                },
                2,
            ),
            schema=INVOICE,
        ),
        case("nested-object", "good_json", dumps(nested, 2), json_mode=True),
        case("top-level-array", "good_json", dumps(cities), json_mode=True),
        case(
            "surrounding-whitespace",
            "good_json",
            '\n  {"answer": "yes", "reason": "the date is within the 30-day window"}\n',
            json_mode=True,
        ),
        case(
            "fence-inside-string",
            "good_json",
            dumps(
                {
                    "language": "python",
                    "snippet": "```python\nprint('hi')\n```",
                    "explanation": "The snippet is wrapped in a Markdown fence.",
                }
            ),
            json_mode=True,
        ),
        case(
            "numbers-and-unicode",
            "good_json",
            '{"epsilon": 1e-7, "delta": -0.25, "count": 0,'
            ' "label": "température ✓", "emoji": "🚀", "ok": true, "next": null}',
            json_mode=True,
        ),
        case("optional-omitted", "good_json", '{"name": "Kenji Sato", "age": 41}', schema=PERSON),
        case(
            "nullable-null", "good_json", '{"name": "Ana", "age": 29, "email": null}', schema=PERSON
        ),
        case(
            "integer-for-number",
            "good_json",
            '{"label": "positive", "confidence": 1}',
            schema=SENTIMENT,
        ),
        case(
            "extra-key-allowed",
            "good_json",
            '{"label": "neutral", "confidence": 0.55, '
            '"rationale": "mixed: praises the screen, complains about battery"}',
            schema=SENTIMENT,
        ),
    ]


def good_tool_cases() -> list[Case]:
    t = TOOLS
    return [
        case(
            "weather",
            "good_tool_call",
            "",
            finish="tool_calls",
            tools=t,
            calls=[call("get_weather", {"location": "Lisbon, PT", "unit": "celsius"})],
        ),
        case(
            "parallel-two",
            "good_tool_call",
            "",
            finish="tool_calls",
            tools=t,
            calls=[
                call("get_weather", {"location": "Oslo, NO"}, 0),
                call("get_weather", {"location": "Bergen, NO"}, 1),
            ],
        ),
        case(
            "no-parameters",
            "good_tool_call",
            "",
            finish="tool_calls",
            tools=t,
            calls=[call("get_time", "{}")],
        ),
        case(
            "pretty-args",
            "good_tool_call",
            "",
            finish="tool_calls",
            tools=t,
            calls=[
                call(
                    "search_docs",
                    '{\n  "query": "rotate TLS certificates without downtime",\n  "top_k": 5\n}',
                )
            ],
        ),
        case(
            "with-preamble-text",
            "good_tool_call",
            "Let me look that up in the runbooks.",
            finish="tool_calls",
            tools=t,
            calls=[call("search_docs", {"query": "redis failover runbook"})],
        ),
        case(
            "ticket-with-labels",
            "good_tool_call",
            "",
            finish="tool_calls",
            tools=t,
            calls=[
                call(
                    "create_ticket",
                    {
                        "title": "Checkout returns 502 for EU users",
                        "priority": "high",
                        "labels": ["payments", "eu"],
                    },
                )
            ],
        ),
        case(
            "missing-type-field",
            "good_tool_call",
            "",
            finish="tool_calls",
            tools=t,
            calls=[call("get_weather", {"location": "Quito, EC"}, kind=None)],
        ),
        case(
            "unicode-args",
            "good_tool_call",
            "",
            finish="tool_calls",
            tools=t,
            calls=[call("get_weather", '{"location": "Zürich, CH", "unit": "celsius"}')],
        ),
        case(
            "json-mode-tool-call",
            "good_tool_call",
            "",
            finish="tool_calls",
            tools=t,
            json_mode=True,
            calls=[call("search_docs", {"query": "quarterly revenue 2024"})],
        ),
    ]


def truncation_ok_cases() -> list[Case]:
    """finish_reason "length" although fine: the client set max_tokens."""
    prose, code = GOOD_PROSE["tcp-vs-udp"], GOOD_CODE["python-retry"]
    return [
        case("prose-cut", "truncated_ok", prose[:310], finish="length", max_tokens=True),
        case("code-cut", "truncated_ok", code[:260], finish="length", max_tokens=True),
        case("one-token-probe", "truncated_ok", "Yes", finish="length", max_tokens=True),
        case(
            "list-cut",
            "truncated_ok",
            GOOD_LISTS["router-reset"][:200],
            finish="length",
            max_tokens=True,
        ),
        case(
            "long-capped",
            "truncated_ok",
            GOOD_LONG["python-packaging"][:2500],
            finish="length",
            max_tokens=True,
        ),
    ]


# --- degraded answers -----------------------------------------------------------------------


def truncation_cases() -> list[Case]:
    """finish_reason "length" and no max_tokens: the engine's own limit cut the answer."""
    nt = ["not_truncated"]
    return [
        case(
            "prose-mid-sentence", "truncated", GOOD_PROSE["mutex"][:420], finish="length", fail=nt
        ),
        case(
            "code-mid-block", "truncated", GOOD_CODE["sql-report"][:300], finish="length", fail=nt
        ),
        case("list-mid-item", "truncated", GOOD_LISTS["packing"][:350], finish="length", fail=nt),
        case(
            "long-answer-cut",
            "truncated",
            GOOD_LONG["incident-review"][:3000],
            finish="length",
            fail=nt,
        ),
        case(
            "json-cut",
            "truncated",
            '{"name": "Kenji Sato", "age": 41, "skills": ["Go", "Ku',
            finish="length",
            json_mode=True,
            fail=[*nt, "json_valid"],
        ),
        case("table-cut", "truncated", GOOD_TABLES["databases"][:400], finish="length", fail=nt),
    ]


def _times(unit: str, n: int) -> str:
    return unit * n


def loop_cases() -> list[Case]:
    rep, nt = "repetition", "not_truncated"
    hope = " I hope this helps! Let me know if you have any other questions."
    return [
        case(
            "closing-line",
            "loop_sentence",
            "To undo the last commit but keep your changes, run "
            "`git reset --soft HEAD~1`." + _times(hope, 30),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "returns-sum",
            "loop_sentence",
            "The function iterates over the list and adds each "
            "element to the accumulator. "
            + _times("The function returns the sum of the list. ", 25),
            finish="length",
            max_tokens=True,
            fail=[rep],
        ),
        case(
            "paragraph",
            "loop_sentence",
            _times(
                "In summary, the main advantage of this approach is that it reduces latency. "
                "However, it also increases memory usage, which may be a concern for large "
                "deployments.\n\n",
                9,
            ),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "numbered-item",
            "loop_sentence",
            "Here are some ways to speed up the build:\n\n"
            "1. Enable the build cache.\n2. Use parallel jobs with `-j`.\n3. Restart the "
            "build server.\n" + "".join(f"{i}. Restart the build server.\n" for i in range(4, 60)),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "import-line",
            "loop_sentence",
            "```python\nimport numpy as np\nimport pandas as pd\n"
            + _times("import matplotlib.pyplot as plt\n", 40),
            finish="length",
            max_tokens=True,
            fail=[rep],
        ),
        case(
            "table-row",
            "loop_sentence",
            "| Year | Revenue (M$) | Growth |\n|---|---|---|\n"
            "| 2021 | 4.1 | 12% |\n| 2022 | 4.6 | 11% |\n" + _times("| 2023 | 5.2 | 13% |\n", 45),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "very",
            "loop_word",
            "This is a very" + _times(" very", 150),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "the",
            "loop_word",
            "The error comes from the the" + _times(" the", 200),
            finish="length",
            max_tokens=True,
            fail=[rep],
        ),
        case("no", "loop_word", "No" + _times(", no", 160), finish="length", fail=[rep, nt]),
        case(
            "data-comma",
            "loop_word",
            "The pipeline reads the raw data, cleans the data, " + _times("data, ", 90),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "importantly",
            "loop_word",
            "Most importantly" + _times(", importantly", 60),
            finish="length",
            max_tokens=True,
            fail=[rep],
        ),
        case(
            "bang",
            "loop_char",
            "Congratulations on your new job" + _times("!", 900),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "newlines",
            "loop_char",
            "The answer is 12." + _times("\n", 2500),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "hmm",
            "loop_char",
            "Hmm" + _times("m", 600),
            finish="length",
            max_tokens=True,
            fail=[rep],
        ),
        case(
            "dots",
            "loop_char",
            "Let me think about it" + _times(".", 800),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "zeros",
            "loop_char",
            "The probability is 0." + _times("0", 700),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "zh-dont-know",
            "loop_cjk",
            "这个问题很难回答。" + _times("我不知道。", 120),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "zh-shi-de",
            "loop_cjk",
            "是的" + _times("是的", 250),
            finish="length",
            max_tokens=True,
            fail=[rep],
        ),
        case(
            "ja-thanks",
            "loop_cjk",
            "ご質問ありがとうございます。" + _times("ありがとうございます。", 60),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "ko-thanks",
            "loop_cjk",
            "좋은 질문입니다. " + _times("감사합니다. ", 80),
            finish="length",
            fail=[rep, nt],
        ),
    ]


def loop_after_prefix_cases() -> list[Case]:
    rep, nt = "repetition", "not_truncated"
    long_a, long_b = GOOD_LONG["postgres-backups"], GOOD_LONG["incident-review"]
    broke_out = (
        GOOD_PROSE["eventual-consistency"]
        + "\n\n"
        + _times("Each replica eventually converges to the same state. ", 10)
        + "\n\nIn practice, most systems add read-your-writes guarantees on top."
    )
    return [
        case(
            "guide-then-sentence",
            "loop_after_prefix",
            long_a + "\n\n" + _times("Remember to test your backups regularly. ", 40),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "review-then-bullet",
            "loop_after_prefix",
            long_b + "\n" + _times("- Add an alert for replication lag.\n", 50),
            finish="length",
            max_tokens=True,
            fail=[rep],
        ),
        case(
            "code-then-line",
            "loop_after_prefix",
            GOOD_CODE["js-fetch"] + "\n\n```js\n" + _times("console.log(response);\n", 60),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "prose-then-cjk",
            "loop_after_prefix",
            GOOD_PROSE["sky-blue"] + "\n\n" + _times("蓝色的天空。", 90),
            finish="length",
            fail=[rep, nt],
        ),
        case(
            "list-then-word",
            "loop_after_prefix",
            GOOD_LISTS["pros-cons"] + "\n\nOverall, it is a really" + _times(" really", 180),
            finish="length",
            fail=[rep, nt],
        ),
        case("loop-then-recovered", "loop_after_prefix", broke_out, fail=[rep]),
    ]


LEAKS = {
    "chatml-next-turn": "You can cancel the subscription from Settings > Billing.<|im_end|>\n"
    "<|im_start|>user\nThanks! And how do I get a refund?",
    "chatml-role-header": "<|im_start|>assistant\nThe capital of Australia is Canberra.",
    "llama3-next-header": "The meeting is at 3 pm CET on Thursday.<|eot_id|><|start_header_id|>"
    "user<|end_header_id|>\n\nCan you move it to Friday?",
    "llama3-eot-tail": "Sure, here's a haiku:\n\nAutumn server room\nfans hum a low lullaby\n"
    "uptime holds its breath<|eot_id|>",
    "llama3-end-of-text": "Yes, `pip install -e .` installs the package in editable mode."
    "<|end_of_text|>",
    "gemma-turns": "Photosynthesis turns light into chemical energy.<end_of_turn>\n"
    "<start_of_turn>user\nwhat about respiration",
    "mistral-inst": "The function is O(n log n) because of the sort. [/INST] Is there anything "
    "else?",
    "eos-s": "Paris is the capital of France.</s>",
    "gpt2-endoftext": "That completes the migration script.<|endoftext|>Once upon a time, in a "
    "small village, there lived",
    "zephyr-assistant": "Of course!\n<|user|>\nwrite it in French\n<|assistant|>\nBien sûr !",
    "llama31-eom": "I'll check the current weather in Madrid for you.<|eom_id|>",
    "llama31-python-tag": '<|python_tag|>{"name": "get_weather", "parameters": {"location": '
    '"Madrid, ES"}}',
}


def template_cases() -> list[Case]:
    out = [case(k, "template_leak", v, fail=["template_leak"]) for k, v in LEAKS.items()]
    out += [case(k, "lookalike_template", v) for k, v in LOOKALIKE_TEMPLATE.items()]
    return out


def json_broken_cases() -> list[Case]:
    jv = ["json_valid"]
    broken = {
        "markdown-fence": '```json\n{"label": "positive", "confidence": 0.87}\n```',
        "trailing-comma": '{\n  "city": "Porto",\n  "country": "PT",\n}',
        "single-quotes": "{'name': 'Kenji Sato', 'age': 41}",
        "prose-before": 'Here is the JSON you asked for:\n{"status": "ok", "items": 3}',
        "nan-value": '{"mean": 0.42, "stddev": NaN}',
        "line-comment": '{\n  "retries": 3, // per request\n  "timeout_s": 10\n}',
        "two-objects": '{"id": 1, "ok": true}\n{"id": 2, "ok": false}',
        "python-literals": '{"valid": True, "reason": None}',
        "unescaped-quote": '{"quote": "She said "no" twice."}',
        "unquoted-keys": '{status: "shipped", eta_days: 2}',
    }
    out = [case(k, "json_broken", v, json_mode=True, fail=jv) for k, v in broken.items()]
    out.append(
        case(
            "fenced-with-schema",
            "json_broken",
            '```json\n{"label": "neutral", "confidence": 0.5}\n```',
            schema=SENTIMENT,
            fail=jv,
        )
    )
    out.append(
        case(
            "cut-by-max-tokens",
            "json_broken",
            '{"invoice_number": "INV-2209", "currency": "USD", "total": 18',
            finish="length",
            max_tokens=True,
            schema=INVOICE,
            fail=jv,
        )
    )
    return out


def schema_violation_cases() -> list[Case]:
    js = ["json_schema"]
    bad: list[tuple[str, str, dict[str, Any]]] = [
        ("missing-required", '{"name": "Leila Haddad"}', PERSON),
        ("age-as-string", '{"name": "Leila Haddad", "age": "37"}', PERSON),
        ("negative-age", '{"name": "Baby Yoda", "age": -50}', PERSON),
        ("extra-property", '{"name": "Leila Haddad", "age": 37, "city": "Tunis"}', PERSON),
        ("enum-capitalized", '{"label": "Positive", "confidence": 0.93}', SENTIMENT),
        ("confidence-percent", '{"label": "positive", "confidence": 93}', SENTIMENT),
        (
            "pattern-mismatch",
            dumps(
                {
                    "invoice_number": "2024/0193",
                    "currency": "EUR",
                    "total": 120.0,
                    "line_items": [
                        {"description": "Consulting", "quantity": 1, "unit_price": 120.0}
                    ],
                }
            ),
            INVOICE,
        ),
        (
            "empty-line-items",
            dumps({"invoice_number": "INV-5531", "currency": "GBP", "total": 0, "line_items": []}),
            INVOICE,
        ),
        (
            "nested-missing",
            dumps(
                {
                    "invoice_number": "INV-5532",
                    "currency": "USD",
                    "total": 40,
                    "line_items": [{"description": "Cable", "unit_price": 20}],
                }
            ),
            INVOICE,
        ),
        ("array-not-object", '[{"label": "positive", "confidence": 0.8}]', SENTIMENT),
        (
            "total-as-string",
            dumps(
                {
                    "invoice_number": "INV-7001",
                    "currency": "EUR",
                    "total": "1,290.00",
                    "line_items": [{"description": "Plan", "quantity": 1, "unit_price": 1290}],
                }
            ),
            INVOICE,
        ),
    ]
    return [case(k, "json_schema_violation", v, schema=s, fail=js) for k, v, s in bad]


def tool_invalid_cases() -> list[Case]:
    tv, t = ["tool_call_valid"], TOOLS

    def bad(cid: str, category: str, *calls: dict[str, Any], text: str = "") -> Case:
        return case(cid, category, text, finish="tool_calls", tools=t, calls=list(calls), fail=tv)

    return [
        bad(
            "renamed-function",
            "tool_unknown",
            call("get_current_weather", {"location": "Paris, FR"}),
        ),
        bad("hallucinated-python", "tool_unknown", call("python", {"code": "print(2**10)"})),
        bad("empty-name", "tool_unknown", call("", {"query": "vacation policy"})),
        bad(
            "second-unknown",
            "tool_unknown",
            call("get_weather", {"location": "Rome, IT"}, 0),
            call("book_flight", {"to": "FCO"}, 1),
        ),
        bad(
            "truncated-args",
            "tool_bad_args",
            call("search_docs", '{"query": "how to rotate the signing key", "top_k": '),
        ),
        bad("single-quoted-args", "tool_bad_args", call("get_weather", "{'location': 'Nice, FR'}")),
        bad(
            "double-encoded",
            "tool_bad_args",
            call("get_weather", json.dumps(json.dumps({"location": "Lima"}))),
        ),
        bad("array-args", "tool_bad_args", call("search_docs", '["kubernetes", "ingress"]')),
        bad("empty-string-args", "tool_bad_args", call("get_time", "")),
        bad("missing-required", "tool_schema_violation", call("get_weather", {"unit": "celsius"})),
        bad(
            "enum-violation",
            "tool_schema_violation",
            call("get_weather", {"location": "Austin, US", "unit": "Fahrenheit"}),
        ),
        bad(
            "top-k-string",
            "tool_schema_violation",
            call("search_docs", {"query": "sso setup", "top_k": "5"}),
        ),
        bad(
            "top-k-range",
            "tool_schema_violation",
            call("search_docs", {"query": "sso setup", "top_k": 100}),
        ),
        bad(
            "extra-arg",
            "tool_schema_violation",
            call(
                "create_ticket",
                {"title": "Login page slow", "priority": "medium", "assignee": "maria"},
            ),
        ),
        bad(
            "second-call-bad",
            "tool_schema_violation",
            call("create_ticket", {"title": "Disk full on db-3", "priority": "high"}, 0),
            call("create_ticket", {"title": "Clean up old WAL files"}, 1),
        ),
    ]


def refusal_cases() -> list[Case]:
    out = [case(k, "refusal", v, fail=["refusal"]) for k, v in REFUSALS.items()]
    out += [case(k, "lookalike_refusal", v) for k, v in LOOKALIKE_REFUSALS.items()]
    return out


def empty_cases() -> list[Case]:
    ne = ["non_empty"]
    return [
        case("empty-string", "empty", "", fail=ne),
        case("single-space", "empty", " ", fail=ne),
        case("newlines", "empty", "\n\n", fail=ne),
        case("mixed-whitespace", "empty", "\t \n  \n", fail=ne),
        case("none-finish", "empty", "", finish=None, fail=ne),
        case("empty-and-cut", "empty", "", finish="length", fail=[*ne, "not_truncated"]),
        case("json-mode-empty", "empty", "", json_mode=True, fail=[*ne, "json_valid"]),
    ]


def lookalike_repetition_cases() -> list[Case]:
    return [case(k, "lookalike_repetition", v) for k, v in LOOKALIKE_REPETITION.items()]


def build() -> list[Case]:
    """Every case, in a fixed order; ids are unique."""
    cases = [
        *good_text_cases(),
        *good_json_cases(),
        *good_tool_cases(),
        *truncation_ok_cases(),
        *lookalike_repetition_cases(),
        *loop_cases(),
        *loop_after_prefix_cases(),
        *truncation_cases(),
        *template_cases(),
        *json_broken_cases(),
        *schema_violation_cases(),
        *tool_invalid_cases(),
        *refusal_cases(),
        *empty_cases(),
    ]
    ids = [c["id"] for c in cases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"duplicate case ids: {duplicates}")
    return cases


def main() -> int:
    cases = build()
    lines = [json.dumps(c, ensure_ascii=False) for c in cases]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
