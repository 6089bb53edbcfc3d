"""The proxy section of a report, as the operator parses it: what a forged or hostile one cannot do."""

from __future__ import annotations

import json
from typing import Any

import pytest
from lockstep.operator.reports import ReportRejected, parse_report

from lockstep.core.report import MAX_PROXY_ENTRIES, ProxyReport, ReportError

ENTRY = {"component": "tool/get_alerts", "reason": "Changed", "digest": "sha256:" + "a" * 64,
         "action": "withheld", "client": "claude-code", "count": 3}


def test_a_report_without_a_proxy_section_is_not_proxied() -> None:
    assert ProxyReport.from_dict({"digest": "x"}) is None


def test_a_proxy_section_round_trips() -> None:
    report = ProxyReport.from_dict({"proxy": {"withheld": [ENTRY], "dropped": 2}})
    assert report is not None and report.dropped == 2 and report.withheld[0].to_dict() == ENTRY
    assert ProxyReport.from_dict(report.to_dict()) == report


@pytest.mark.parametrize("section", [
    "not an object",
    {"withheld": "tool/x"},
    {"withheld": [ENTRY] * (MAX_PROXY_ENTRIES + 1)},
    {"withheld": [{**ENTRY, "reason": "Approved"}]},  # nothing approved is "withheld"
    {"withheld": [{**ENTRY, "action": "deleted"}]},
    {"withheld": [{**ENTRY, "count": 0}]},
    {"withheld": [{**ENTRY, "count": True}]},
    {"withheld": [{**ENTRY, "client": "x" * 301}]},
    {"withheld": [ENTRY], "dropped": -1},
])
def test_a_malformed_proxy_section_is_refused(section: Any) -> None:
    with pytest.raises(ReportError):
        ProxyReport.from_dict({"proxy": section})


def test_the_report_endpoint_answers_a_malformed_proxy_section_with_400() -> None:
    body = {"observedAt": "2026-11-24T10:00:00Z", "view": "default", "failure": "ServerUnreachable",
            "message": "x", "bootId": "0" * 32, "bootTime": "2026-11-24T10:00:00Z", "sequence": 0,
            "sentAt": "2026-11-24T10:00:00Z", "proxy": {"withheld": [{**ENTRY, "reason": "Approved"}]}}
    with pytest.raises(ReportRejected) as refused:
        parse_report(json.dumps(body).encode())
    assert refused.value.status == 400 and refused.value.reason == "BadReport"
