"""docs/failures.md shows the failure tables the gateway runs on: its generated block is
what :func:`gateway.dispatch.failures_doc.render` makes of the failure tree and the verdict
table now, and every failure type and reason is in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.dispatch import failures_doc
from gateway.dispatch.fallback import VERDICTS, verdict
from gateway.upstream import failures

PAGE = Path(__file__).resolve().parent.parent / "docs" / "failures.md"


def _block(text: str, name: str) -> str:
    start, stop = text.index(failures_doc.begin(name)), text.index(failures_doc.end(name))
    return text[start : stop + len(failures_doc.end(name))]


@pytest.mark.parametrize("name", ["verdicts", "last_error"])
def test_page_holds_the_generated_block(name: str) -> None:
    text = PAGE.read_text()
    assert text.count(failures_doc.begin(name)) == 1, f"docs/failures.md: one block {name!r}"
    assert text.count(failures_doc.end(name)) == 1, f"docs/failures.md: one block {name!r}"
    assert _block(text, name) == failures_doc.render()[name], (
        f"docs/failures.md is stale: run `{failures_doc.REGENERATE}`"
    )


def test_every_failure_type_has_a_row() -> None:
    block = failures_doc.render()["verdicts"]
    names = [
        cls.__name__
        for cls in vars(failures).values()
        if isinstance(cls, type)
        and issubclass(cls, failures.AttemptFailed)
        and cls is not failures.AttemptFailed
    ]
    missing = [name for name in names if f"`{name}`" not in block]
    assert not missing, f"types without a row: {missing}"


def test_every_plain_reason_is_shown() -> None:
    block = failures_doc.render()["verdicts"]
    plain = {v.reason for v in VERDICTS.values() if "{" not in v.reason}
    assert all(f"`{r}`" in block for r in plain), sorted(r for r in plain if f"`{r}`" not in block)


@pytest.mark.parametrize(
    ("cell", "sample"),
    [
        ("`ConnectionReset` | `reset` |", failures.ConnectionReset("x")),
        ("`ClientRejected` | `http_<status>` |", failures.ClientRejected(400, "x", b"")),
        ("`Stall` | `stall` |", failures.Stall("x")),
        ("`ServerError` (500, 502, 503) |", failures.ServerError(503, "x")),
        ("`ServerError` (other 5xx) | other `http_5xx` |", failures.ServerError(501, "x")),
        ("`Shed` | `shed` |", failures.Shed("x", 1.0)),
    ],
)
def test_rows_follow_the_verdicts(cell: str, sample: failures.AttemptFailed) -> None:
    v = verdict(sample)
    flags = (v.next_tier, v.same_tier, v.timeout, v.tier_fault, v.continuable)
    expected = "| " + " | ".join("yes" if f else "no" for f in flags) + " |"
    row = next(line for line in failures_doc.render()["verdicts"].splitlines() if cell in line)
    assert row.endswith(expected), row


def test_last_error_rows() -> None:
    block = failures_doc.render()["last_error"]
    assert "`504 upstream_error / upstream_timeout` (`UpstreamTimeout`)" in block
    assert "`502 upstream_error / all_tiers_failed` (`UpstreamFailed`)" in block
    assert "`429 server_overloaded / overloaded` (`RateLimited`) with `Retry-After`" in block


def test_splice_keeps_the_prose_around_the_blocks() -> None:
    begin, end = failures_doc.begin, failures_doc.end
    page = (
        f"# Title\n\nbefore\n\n{begin('verdicts')}\nold\n{end('verdicts')}\n\nbetween\n\n"
        f"{begin('last_error')}\n{end('last_error')}\n\nafter\n"
    )
    fresh = failures_doc.splice(page)
    assert fresh.startswith("# Title\n\nbefore\n\n") and fresh.endswith("\n\nafter\n")
    assert "\n\nbetween\n\n" in fresh and "\nold\n" not in fresh
    for name, block in failures_doc.render().items():
        assert _block(fresh, name) == block
    with pytest.raises(ValueError, match="markers"):
        failures_doc.splice("# no markers\n")
