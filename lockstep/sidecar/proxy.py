"""The sidecar's in-line proxy (enforcement Quarantine): the product's ``lockstep proxy`` in front of the
MCP server in this pod, with the operator as the source of what is approved.

The gate starts empty, so until the operator's first answer every component is withheld (fail
closed). Each report's answer carries every approved component digest and the ignore rules
(lockstep.core.wire.ApprovedComponents); lockstep.sidecar.app replaces the gate with it. What the
proxy withholds is counted here and sent with the next report.
"""

from __future__ import annotations

from lockstep.core.report import MAX_PROXY_ENTRIES, ProxyReport, WithheldComponent
from lockstep.proxy.policy import Finding

__all__ = ["WithheldLog"]

_Key = tuple[str, str, str, str, str]  # component, reason, digest, action, client


class WithheldLog:
    """Findings counted since the last delivered report; a failed delivery puts them back."""

    def __init__(self) -> None:
        self._counts: dict[_Key, int] = {}
        self._dropped = 0

    def add(self, finding: Finding) -> bool:
        """Count one finding; True when it is the first since the last report (time to send one)."""
        first = not self._counts
        verdict = finding.verdict
        self._count((verdict.ref, verdict.reason.value, verdict.digest, finding.action, finding.client), 1)
        return first

    def drain(self) -> ProxyReport:
        report = ProxyReport(tuple(WithheldComponent(*key, count) for key, count in self._counts.items()),
                             self._dropped)
        self._counts, self._dropped = {}, 0
        return report

    def restore(self, report: ProxyReport) -> None:
        for entry in report.withheld:
            self._count((entry.component, entry.reason, entry.digest, entry.action, entry.client), entry.count)
        self._dropped += report.dropped

    def _count(self, key: _Key, count: int) -> None:
        if key in self._counts or len(self._counts) < MAX_PROXY_ENTRIES:
            self._counts[key] = self._counts.get(key, 0) + count
        else:
            self._dropped += count  # a report holds at most MAX_PROXY_ENTRIES entries
