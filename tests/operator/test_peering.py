"""Replicas of one release, read from the peering object, and which of them owns each resource."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from lockstep.operator.replicas.membership import Member, Membership, live_members, owner

from lockstep.core.wire import ReplicaAddress

NOW = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
KEYS = [f"team-{index % 7}/server-{index}" for index in range(2000)]


def _entry(priority: int, seconds_ago: int = 1, lifetime: int = 20, endpoint: str = "") -> dict[str, object]:
    return {"priority": priority, "lifetime": lifetime, "endpoint": endpoint,
            "lastseen": (NOW - timedelta(seconds=seconds_ago)).isoformat()}


def test_live_members_skip_the_expired_and_the_garbage() -> None:
    status = {"replica-10": _entry(10, endpoint="10.0.0.1:8443"), "replica-20": _entry(20, seconds_ago=30),
              "junk": "x", "bad": {"priority": "x", "lastseen": "never"}}
    assert live_members(status, NOW) == [Member(10, ReplicaAddress("10.0.0.1", 8443))]


def test_every_key_has_one_owner_and_replicas_share_them() -> None:
    shares = Counter(owner(key, [10, 20, 30]) for key in KEYS)
    assert set(shares) == {10, 20, 30}
    assert all(count > len(KEYS) / 3 * 0.8 for count in shares.values()), shares
    assert owner("a/b", []) is None and owner("a/b", [7]) == 7


def test_a_replica_that_goes_moves_only_its_own_keys() -> None:
    """Rendezvous hashing: when 30 goes, the keys of 10 and 20 stay where they are (no flaps there)."""
    before = {key: owner(key, [10, 20, 30]) for key in KEYS}
    after = {key: owner(key, [10, 20]) for key in KEYS}
    moved = [key for key in KEYS if before[key] != after[key]]
    assert moved and all(before[key] == 30 for key in moved)


def test_the_peers_are_known_by_the_hosts_they_publish() -> None:
    membership = Membership(None, "lockstep", 10, None, ReplicaAddress("10.0.0.1", 8443))
    membership.members = live_members({"replica-10": _entry(10, endpoint="10.0.0.1:8443"),
                                       "replica-20": _entry(20, endpoint="[fd00::1]:8443"),
                                       "replica-30": _entry(30, endpoint="operator.example:8443")}, NOW)
    assert membership.peer_hosts == frozenset({"fd00::1"})  # not itself, not a name
    assert [member.endpoint for member in membership.members][2] is None
