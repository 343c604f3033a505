"""Replica choice by the prompt's prefixes: the routing key of a prompt
(``gateway/request/prefix.py``) and the route book a pool chooses with
(``gateway/upstream/affinity.py``)."""

from __future__ import annotations

import json
from collections import Counter

from gateway.request.model import parse_chat
from gateway.request.prefix import BLOCK, PromptKey, chat_key, text_key
from gateway.rules.schema import Tier
from gateway.upstream.affinity import RouteBook
from gateway.upstream.pools import Pool
from gateway.upstream.replicas import Replica

SYSTEM = "You are the support assistant of a shop. " * 60  # ~2.5 KB, shared by every chat


def _chat(user: str, turns: int) -> list[tuple[str, str]]:
    said = [("system", SYSTEM), ("user", user)]
    for t in range(turns):
        said += [("assistant", f"answer {t} " * 60), ("user", f"and then {t}? " * 10)]
    return said


def _replicas(n: int) -> list[Replica]:
    return [Replica(f"http://engine-{i}:30000") for i in range(n)]


def test_a_later_turn_starts_with_the_earlier_turns_chain() -> None:
    first, later = (
        chat_key(_chat("my order 17 is late", 0)),
        chat_key(_chat("my order 17 is late", 3)),
    )
    assert later.chain[: len(first.chain)] == first.chain and len(later.chain) > len(first.chain)
    assert (later.head, later.unit) == (first.head, first.unit)  # one conversation
    assert later.continued and not first.continued
    other = chat_key(_chat("where is my refund", 0))
    assert other.head == first.head and other.unit != first.unit  # same system prompt
    assert other.lead == first.lead == len(f"system\x1f{SYSTEM}\x1e".encode())
    assert other.chain[: first.lead // BLOCK] == first.chain[: first.lead // BLOCK]


def test_the_request_parser_gives_the_key() -> None:
    said = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    req = parse_chat(json.dumps({"model": "m", "messages": said}).encode())
    assert req.key is None  # made when a pool of several replicas asks
    assert req.routing_key() == chat_key([("system", "s"), ("user", "q")])
    assert text_key("abc" * 1000).chain and PromptKey.of_hash(7) == PromptKey(7, 7)


def test_every_gateway_replica_puts_a_new_prompt_on_the_same_home() -> None:
    keys = [chat_key([("system", f"tenant {i} " * 50), ("user", "hi")]) for i in range(400)]
    one, two, reps = RouteBook(), RouteBook(), _replicas(8)
    homes = [one.choose(reps, k, 1.0).url for k in keys]
    assert homes == [two.choose(reps, k, 1.0).url for k in keys]
    assert len(Counter(homes)) == 8


def test_a_conversation_follows_its_history_after_load_moved_it() -> None:
    book, reps = RouteBook(), _replicas(4)
    home = book.choose(reps, chat_key(_chat("my order 17 is late", 1)), 1.0)
    home.in_flight = 20  # far over its share: even a conversation it holds goes elsewhere
    moved = book.choose(reps, chat_key(_chat("my order 17 is late", 2)), 1.0)
    assert moved is not home
    home.in_flight = 0
    for t in (3, 4):  # its later turns follow the history, cached where it went
        assert book.choose(reps, chat_key(_chat("my order 17 is late", t)), 1.0) is moved
    # a gateway replica that never routed it sends it home: where every replica sends it
    assert RouteBook().choose(reps, chat_key(_chat("my order 17 is late", 4)), 1.0) is home


def test_a_later_turn_goes_home_when_others_routed_the_turns_between() -> None:
    book, reps = RouteBook(), _replicas(8)
    first = book.choose(reps, chat_key(_chat("where is my refund", 1)), 1.0)
    first.in_flight = 40  # turn 2 leaves home here; the next turns are routed elsewhere
    assert book.choose(reps, chat_key(_chat("where is my refund", 2)), 1.0) is not first
    first.in_flight = 0
    # turn 5: this replica last saw turn 2, older than the previous turn: home
    assert book.choose(reps, chat_key(_chat("where is my refund", 5)), 1.0) is first


def test_conversations_on_one_system_prompt_spread_once_they_come_back() -> None:
    book, reps = RouteBook(), _replicas(8)
    where: Counter[str] = Counter()
    for c in range(200):  # every chat: three turns
        first = book.choose(reps, chat_key(_chat(f"question {c}", 0)), 1.0)
        later = [book.choose(reps, chat_key(_chat(f"question {c}", t)), 1.0) for t in (1, 2)]
        assert later[0] is later[1]
        if c >= 4:  # the system prompt's chats are known to come back: turn 0 at home too
            assert first is later[0]
        where[later[0].url] += 1
    assert len(where) == 8  # not every chat on the system prompt's home


def test_a_document_is_routed_by_itself_at_once() -> None:
    book, reps = RouteBook(), _replicas(8)
    docs = [("user", f"Document {d}: " + f"text of document {d} " * 400) for d in range(6)]
    homes = {book.choose(reps, chat_key([("system", "Answer from it."), d]), 1.0).url for d in docs}
    assert len(homes) > 1  # one shared instruction, yet the documents are not all on one
    again = [book.choose(reps, chat_key([("system", "Answer from it."), d]), 1.0) for d in docs]
    assert again == [
        book.choose(reps, chat_key([("system", "Answer from it."), d]), 1.0) for d in docs
    ]


def test_a_bare_hash_still_chooses() -> None:
    pool = Pool.create("hs", Tier(endpoints=("http://a:1", "http://b:1"), model="m"))
    assert pool.choose(42) is pool.choose(42)


def test_a_busy_tenant_spreads_over_the_replicas_that_hold_its_prompt() -> None:
    book, reps = RouteBook(), _replicas(8)
    question = [chat_key([("system", "tenant 7 " * 120), ("user", f"q {i}?")]) for i in range(6)]
    first = book.choose(reps, question[0], 1.0)
    assert book.choose(reps, question[1], 1.0) is first  # its system prompt is cached there
    first.in_flight = 12  # over its bound: the next question goes to a second replica
    second = book.choose(reps, question[2], 1.0)
    assert second is not first
    second.in_flight = 3  # both hold the prompt: the less loaded of the two, no third
    assert book.choose(reps, question[3], 1.0) is second
    first.in_flight = 0
    assert book.choose(reps, question[4], 1.0) is first
    assert {r.url for r in reps if r.in_flight == 0 and r is not first}.isdisjoint(
        book.index.head_holders(question[0].head)
    )


def test_the_key_is_made_only_when_a_pool_has_a_choice() -> None:
    said = [{"role": "system", "content": "s " * 500}, {"role": "user", "content": "q"}]
    raw = json.dumps({"model": "m", "messages": said}).encode()
    one = Pool.create("one", Tier(endpoints=("http://a:1",), model="m"))
    req = parse_chat(raw)
    assert one.choose(req.routing_key) is one.replicas[0] and req.key is None
    two = Pool.create("two", Tier(endpoints=("http://a:1", "http://b:1"), model="m"))
    two.choose(req.routing_key)
    assert req.key == chat_key([("system", "s " * 500), ("user", "q")])


def test_a_prompt_sent_again_stays_where_it_is_cached_whatever_the_urls() -> None:
    # The same prompt is routed by its head until its head is known to come back, then by
    # its unit: the two homes differ for about half of all URL pairs, so the switch must
    # find where the prompt went, not its unit's home (a failure CI caught on random ports).
    for port in range(40):
        book = RouteBook()
        reps = [Replica(f"http://127.0.0.1:{40000 + port}"), Replica(f"http://127.0.0.1:{port}")]
        key = chat_key([("user", "the very same prompt")])
        assert len({book.choose(reps, key, 1.0).url for _ in range(8)}) == 1, port


def test_a_chat_without_a_system_prompt_follows_its_first_turn() -> None:
    moved = 0
    for c in range(40):
        book, reps = RouteBook(), _replicas(8)
        said = [("user", f"question {c} without a system prompt")]
        first = book.choose(reps, chat_key(said), 1.0)
        said += [("assistant", "an answer " * 30), ("user", "and then?")]
        moved += book.choose(reps, chat_key(said), 1.0) is not first
    assert moved == 0
