"""Issue 28: a server that answers on the pod's IP is judged ServerExposed in Isolate and Quarantine (never in
Audit, never for a report without the field); every Service port that selects the pods on another port than the
proxy's (lockstep-mcp, or its number) counts as bypassing the proxy."""

from __future__ import annotations

from typing import Any

import pytest
from lockstep.operator.cache import ClusterCache, PodRecord, ResourceRecord
from lockstep.operator.judge import Policy, Reason, judge
from lockstep.operator.metrics import Metrics
from lockstep.operator.quarantine import QuarantineBook
from lockstep.operator.state import State

from lockstep.core import Interface
from lockstep.core.report import Observation, ReportError
from lockstep.core.revision import Revision

INTERFACE: dict[str, Any] = {"tools": [{"name": "get_forecast", "description": "Forecast for a city.",
                                        "inputSchema": {"type": "object"}}]}


def _changed(**description: str) -> dict[str, Any]:
    return {"tools": [{**tool, "description": description.get(tool["name"], tool["description"])}
                      for tool in INTERFACE["tools"]]}


def _observe(document: dict[str, Any]) -> Observation:
    return Observation.of_interface(Interface.from_document(document), "2026-11-22T02:00:00Z")


def _resource(**spec: Any) -> Policy:
    return Policy.from_resource({"metadata": {"namespace": "agents", "name": "weather"},
                                 "spec": {"selector": {"matchLabels": {"app": "weather"}},
                                          "approved": [Revision.of(Interface.from_document(INTERFACE)).to_spec()],
                                          **spec}})


def _exposed(document: dict[str, Any], exposed: bool | None = True) -> Observation:
    return _observe(document).exposed(exposed, "10.88.1.7:8080")


@pytest.mark.parametrize("enforcement", ["Isolate", "Quarantine"])
def test_an_exposed_server_is_judged_false_with_the_fix_in_the_message(enforcement: str) -> None:
    for document in (INTERFACE, _changed(get_forecast="<IMPORTANT>x</IMPORTANT>")):
        verdict = judge(_exposed(document), _resource(enforcement=enforcement), proxied=True, was_verified=True)
        if verdict.reason is not Reason.SERVER_EXPOSED:  # Isolate drift: already False for its own reason
            assert enforcement == "Isolate" and verdict.status == "False"
            continue
        assert verdict.status == "False"
        assert "10.88.1.7:8080" in verdict.message and "127.0.0.1" in verdict.message
        assert "targetPort lockstep-mcp" in verdict.message


def test_audit_and_older_sidecars_are_never_flipped_for_it() -> None:
    assert judge(_exposed(INTERFACE), _resource(enforcement="Audit")).status == "True"
    assert judge(_exposed(INTERFACE, None), _resource(enforcement="Isolate")).reason is Reason.VERIFIED
    assert judge(_exposed(INTERFACE, False), _resource(enforcement="Isolate")).reason is Reason.VERIFIED


def test_the_report_field_round_trips_and_is_typed() -> None:
    observation = _exposed(INTERFACE)
    body = observation.to_dict()
    assert body["serverExposed"] is True and body["exposedAt"] == "10.88.1.7:8080"
    parsed = Observation.from_dict(body)
    assert (parsed.server_exposed, parsed.exposed_at) == (True, "10.88.1.7:8080")
    assert Observation.from_dict(_observe(INTERFACE).to_dict()).server_exposed is None
    with pytest.raises(ReportError, match="serverExposed"):
        Observation.from_dict({**body, "serverExposed": "yes"})


def _bypassing(enforcement: str, targets: tuple[str, ...], endpoint: Any = 8080) -> list[str]:
    check = QuarantineBook(State(), ClusterCache(), events=None, metrics=Metrics())  # type: ignore[arg-type]
    policy = Policy.from_resource({"metadata": {"namespace": "agents", "name": "weather"},
                                   "spec": {"selector": {"matchLabels": {"app": "weather"}}, "enforcement": enforcement,
                                            "endpoint": {"port": endpoint}}})
    check.cache.put_resource(ResourceRecord(policy))
    check.cache.put_pod(PodRecord.from_body({
        "metadata": {"namespace": "agents", "name": "p", "uid": "u", "labels": {"app": "weather"}},
        "spec": {"containers": [{"name": "s", "ports": [{"name": "mcp", "containerPort": 8080},
                                                       {"name": "metrics", "containerPort": 9100}]}]}}))
    for index, target in enumerate(targets):
        check.services[("agents", f"s{index}")] = ({"app": "weather"}, (target,))
    return check._bypassing(ResourceRecord(policy))


def test_every_service_port_but_the_proxys_is_bypassing() -> None:
    """Security review 2 (S6-4): a Service on any other port than lockstep-mcp (by name, or the proxy's number)
    reaches something in the pod that the proxy does not stand in front of."""
    assert _bypassing("Isolate", ("8080", "mcp", "lockstep-mcp", "8090", "metrics", "9100")) == [
        "s0:8080", "s1:mcp", "s4:metrics", "s5:9100"]
    assert _bypassing("Quarantine", ("mcp", "metrics")) == ["s0:mcp", "s1:metrics"]
    assert _bypassing("Isolate", ("8080", "mcp"), endpoint="mcp") == ["s0:8080", "s1:mcp"]
    assert _bypassing("Audit", ("8080", "metrics")) == []
