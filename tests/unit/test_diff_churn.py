"""The severity rules against the legitimate churn of real servers (tests/corpus/churn, pinned by bench/churn.py)."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest

from lockstep.core.diff import Change, diff_interfaces
from lockstep.core.model import Interface
from lockstep.core.severity import gained_signals

CHURN = Path(__file__).resolve().parent.parent / "corpus" / "churn"
SERVERS = sorted(path for path in CHURN.iterdir() if path.is_dir())


def version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in path.stem.split("."))


def versions(server: Path) -> list[Interface]:
    return [Interface.from_document(json.loads(path.read_text()))
            for path in sorted(server.glob("*.json"), key=version_key)]


def test_churn_corpus_covers_several_servers_and_versions() -> None:
    assert len(SERVERS) >= 5
    assert all(len(list(server.glob("*.json"))) >= 2 for server in SERVERS)


@pytest.mark.parametrize("server", SERVERS, ids=[path.name for path in SERVERS])
def test_legitimate_rewording_never_trips_the_text_rules(server: Path) -> None:
    """No release of these servers made an existing component's text high: no false alarm to tune away."""
    pinned = versions(server)
    for old, new in pairwise(pinned):
        for finding in diff_interfaces(old, new):
            if finding.change is Change.CHANGED:
                assert not any(" gains " in reason for reason in finding.reasons), (finding.ref, finding.reasons)


def test_pinned_servers_carry_no_risky_text_in_their_tools() -> None:
    """No released tool text of these servers holds hidden characters, look-alikes or markup."""
    for server in SERVERS:
        for component in (component for interface in versions(server) for component in interface):
            if component.kind.value != "tool":
                continue
            categories = {gain.signal.category.value for gain in gained_signals(None, component.definition)}
            assert not categories - {"url", "instruction"}, (server.name, component.name, categories)
