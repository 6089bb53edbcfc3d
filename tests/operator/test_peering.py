"""Leadership among replicas, read from kopf's peering status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lockstep.operator.peering import leads

NOW = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)


def _peer(priority: int, seconds_ago: int = 1, lifetime: int = 60) -> dict[str, object]:
    return {"priority": priority, "lifetime": lifetime, "lastseen": (NOW - timedelta(seconds=seconds_ago)).isoformat()}


def test_highest_live_priority_leads() -> None:
    peers = {"a": _peer(10), "b": _peer(20)}
    assert leads(peers, 20, NOW) and not leads(peers, 10, NOW)


def test_a_dead_peer_does_not_count() -> None:
    assert leads({"a": _peer(10), "b": _peer(20, seconds_ago=120)}, 10, NOW)


def test_alone_or_not_listed_yet() -> None:
    assert leads({}, 5, NOW) and leads({"self": _peer(5)}, 5, NOW)


def test_a_tie_leads_nobody() -> None:
    assert not leads({"a": _peer(7), "b": _peer(7)}, 7, NOW)


def test_garbage_entries_are_skipped() -> None:
    assert leads({"a": "junk", "b": {"priority": "x", "lastseen": "never"}}, 1, NOW)
