"""Admission and judging rank interfaces by one order (lockstep.core.enforcement).

They once disagreed: admission ranked Audit < Isolate and took Quarantine for Isolate, the judge ranked
Audit < Quarantine < Isolate. A pod whose annotation chose a Quarantine interface while its labels
selected an Isolate one was admitted, then judged Conflict and never Ready, with no word at admission.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from lockstep.operator.admission_policy import weaker_than
from lockstep.operator.cache import ResourceRecord, _stricter
from lockstep.operator.judge import Policy

ENFORCEMENTS = ("Audit", "Quarantine", "Isolate")
APPROVALS = ("FirstSeen", "Manual")
SPECS = list(itertools.product(ENFORCEMENTS, APPROVALS))


def interface(name: str, enforcement: str, approval: str) -> dict[str, Any]:
    return {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface",
            "metadata": {"name": name, "namespace": "agents", "uid": name, "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "weather"}}, "enforcement": enforcement,
                     "approval": approval, "endpoint": {"port": 8080}}}


@pytest.mark.parametrize(("chosen", "selecting"), list(itertools.product(SPECS, SPECS)),
                         ids=lambda spec: "-".join(spec))
def test_admission_refuses_exactly_what_the_judge_calls_a_weaker_choice(chosen: tuple[str, str],
                                                                       selecting: tuple[str, str]) -> None:
    annotated, labelled = interface("chosen", *chosen), interface("selecting", *selecting)
    refused_at_admission = bool(weaker_than(annotated, [labelled]))
    judged_conflict = _stricter(ResourceRecord(Policy.from_resource(labelled)),
                                ResourceRecord(Policy.from_resource(annotated)))
    assert refused_at_admission == judged_conflict


def test_quarantine_is_between_audit_and_isolate_at_admission() -> None:
    assert weaker_than(interface("q", "Quarantine", "Manual"), [interface("i", "Isolate", "Manual")]) == ["i"]
    assert weaker_than(interface("a", "Audit", "Manual"), [interface("q", "Quarantine", "Manual")]) == ["q"]
    assert weaker_than(interface("q", "Quarantine", "Manual"), [interface("a", "Audit", "Manual")]) == []
