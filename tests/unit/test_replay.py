"""The replay rule (lockstep.core.replay) and the stamp the operator keeps in a pod's annotation."""

from __future__ import annotations

import datetime

import pytest

from lockstep.core.replay import ReportStamp, StampError
from lockstep.core.report import Freshness

BOOT = "2026-11-25T10:00:00+00:00"


def _stamp(boot_id: str = "a" * 32, sequence: int = 5, boot_time: str = BOOT) -> ReportStamp:
    return ReportStamp.of(Freshness(boot_id, boot_time, sequence, boot_time))


def test_the_same_process_must_count_up() -> None:
    last = _stamp(sequence=5)
    assert _stamp(sequence=6).replays(last) is None
    assert "accepted already" in (_stamp(sequence=5).replays(last) or "")
    assert "accepted already" in (_stamp(sequence=1).replays(last) or "")


def test_another_process_must_have_started_later() -> None:
    last = _stamp(sequence=900)
    later = _stamp("b" * 32, sequence=0, boot_time="2026-11-25T10:00:01+00:00")
    earlier = _stamp("b" * 32, sequence=10_000, boot_time="2026-11-25T09:59:59+00:00")
    assert later.replays(last) is None
    assert "started before" in (earlier.replays(last) or "")


def test_the_annotation_round_trips() -> None:
    stamp = _stamp(sequence=17)
    assert ReportStamp.from_annotation(stamp.to_annotation()) == stamp
    naive = _stamp(boot_time="2026-11-25T10:00:00")
    assert naive.boot_time.tzinfo is datetime.UTC


@pytest.mark.parametrize("text", ["", "[]", "{", '{"bootId": "x"}', '{"bootId": "x", "sequence": -1, "bootTime": "%s"}' % BOOT,
                                  '{"bootId": "x", "sequence": true, "bootTime": "%s"}' % BOOT,
                                  '{"bootId": "x", "sequence": 1, "bootTime": "yesterday"}'])
def test_an_annotation_someone_else_wrote_is_an_error(text: str) -> None:
    with pytest.raises(StampError):
        ReportStamp.from_annotation(text)
