"""The records between the operator and the sidecar (lockstep.core.wire): each written and read by one
class, read strictly, and the proxy's part of the answer taken whole or not at all."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lockstep.core.digest import ComponentDigest
from lockstep.core.gate import ComponentGate, GateReason
from lockstep.core.model import ComponentKind, Interface
from lockstep.core.names import SIDECAR_ENV
from lockstep.core.revision import Revision
from lockstep.core.wire import (
    AnswerError,
    AnswerVerdict,
    ApprovedComponents,
    ReplicaAddress,
    ReportAnswer,
    SettingsError,
    SidecarEnv,
)

TOOL = {"name": "get_forecast", "description": "Forecast for a city.",
        "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}
OTHER = {"name": "get_alerts", "description": "Weather alerts."}


def as_container_sees_it(env: list[dict[str, str]]) -> dict[str, str]:
    """The container's environment: a variable without a value is the empty string."""
    return {entry["name"]: entry.get("value", "") for entry in env}


@pytest.mark.parametrize("record", [
    SidecarEnv("https://op:8443"),
    SidecarEnv("https://lockstep.lockstep-system.svc:8443", mcp_port=3000, mcp_path="sse", transport="sse",
               interface="weather", interval=2.5, timeout=0.25, token_path="/run/token", operator_ca="PEM",
               headers_dir="/etc/lockstep/headers", port=9091, proxy_port=8090,
               client_capabilities=("sampling", "roots")),
    SidecarEnv("https://op", mcp_url="http://127.0.0.1:1/x", client_capabilities=()),
])
def test_what_to_env_writes_from_env_reads_back(record: SidecarEnv) -> None:
    env = record.to_env()
    assert [entry["name"] for entry in env] == list(SIDECAR_ENV)  # every variable, in one order
    assert all(entry.get("value") != "" for entry in env)  # an empty one as the API server stores it
    assert SidecarEnv.from_env(as_container_sees_it(env)) == record


def test_unset_and_empty_variables_take_the_defaults() -> None:
    record = SidecarEnv.from_env({"LOCKSTEP_OPERATOR_URL": "https://op/"})
    assert record == SidecarEnv("https://op")
    assert record.endpoint == "http://127.0.0.1:8080/mcp"
    assert SidecarEnv.from_env({name: "" for name in SIDECAR_ENV} | {"LOCKSTEP_OPERATOR_URL": "https://op"}) \
        == record


@pytest.mark.parametrize(("name", "value"), [
    ("LOCKSTEP_MCP_TRANSPORT", "websocket"),
    ("LOCKSTEP_MCP_PORT", "0"),
    ("LOCKSTEP_MCP_PORT", "http"),
    ("LOCKSTEP_SIDECAR_PORT", "65536"),
    ("LOCKSTEP_PROXY_PORT", "8090.5"),
    ("LOCKSTEP_PROXY_PORT", "tcp://10.0.0.1:8090"),  # the kubelet's Service link, had the webhook not set it
    ("LOCKSTEP_PROBE_INTERVAL", "0"),
    ("LOCKSTEP_PROBE_INTERVAL", "nan"),
    ("LOCKSTEP_PROBE_TIMEOUT", "ten"),
    ("LOCKSTEP_PROBE_TIMEOUT", "inf"),
    ("LOCKSTEP_PROBE_CLIENT_CAPABILITIES", "telepathy"),
    ("LOCKSTEP_OPERATOR_URL", ""),
])
def test_an_unusable_variable_is_named(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        SidecarEnv.from_env({"LOCKSTEP_OPERATOR_URL": "https://op", name: value})


def revision(*tools: dict[str, Any], ignore: list[str] | None = None) -> Revision:
    return Revision.of(Interface.from_document({"tools": [copy.deepcopy(tool) for tool in tools]}), ignore)


def test_approved_components_round_trip_and_give_the_gate_of_the_revisions() -> None:
    ignore = ["/tools/*/description"]
    revisions = [revision(TOOL, ignore=ignore), revision(TOOL, OTHER, ignore=ignore)]
    approved = ApprovedComponents.of(revisions, ignore)
    assert len(approved.components) == 2  # one per (kind, name, digest), sorted
    assert approved.to_dict() == {"ignore": ignore, "components": sorted(
        ({"kind": "tool", "name": c.name, "digest": c.digest} for c in revisions[1].digest.components),
        key=lambda entry: entry["name"])}
    assert ApprovedComponents.from_dict(approved.to_dict()) == approved
    gate, reference = approved.gate(), ComponentGate.of(revisions, ignore)
    for tool in (TOOL, OTHER, {**TOOL, "description": "changed, and ignored"}, {**TOOL, "inputSchema": {}},
                 {"name": "new"}):
        assert gate.check(ComponentKind.TOOL, tool) == reference.check(ComponentKind.TOOL, tool)


def test_the_answer_round_trips_and_an_older_operators_answer_reads() -> None:
    answer = ReportAnswer(AnswerVerdict("True", "Verified", "ok"), digests=True,
                          approved=ApprovedComponents.of([revision(TOOL)]))
    assert ReportAnswer.from_dict(answer.to_dict()) == answer
    assert ReportAnswer.from_dict(answer.to_dict()).to_dict() == answer.to_dict()
    older = ReportAnswer.from_dict({"verdict": {"status": "False", "reason": "InterfaceChanged"}})
    assert older == ReportAnswer(AnswerVerdict("False", "InterfaceChanged", ""), digests=False, approved=None)
    assert "approved" not in older.to_dict()


GOOD = ApprovedComponents.of([revision(TOOL, OTHER)]).to_dict()
ENTRY = GOOD["components"][0]


@pytest.mark.parametrize(("approved", "said"), [
    ([ENTRY], "must be an object"),
    ({"ignore": []}, "approved.components"),
    ({"components": {"tool": ENTRY}}, "approved.components"),
    ({"components": [*GOOD["components"], {**ENTRY, "approved": True}]}, "{kind, name, digest}"),
    ({"components": [*GOOD["components"], {"kind": "tool", "name": "x"}]}, "{kind, name, digest}"),
    ({"components": [{**ENTRY, "kind": "Tool"}]}, "unknown component kind"),
    ({"components": [{**ENTRY, "name": 7}]}, "name string"),
    ({"components": [{**ENTRY, "digest": "*"}]}, "sha256 digest"),
    ({"components": [{**ENTRY, "digest": ENTRY["digest"].upper()}]}, "sha256 digest"),
    ({"components": GOOD["components"], "ignore": "/tools/*/description"}, "approved.ignore"),
    ({"components": GOOD["components"], "ignore": [""]}, "approved.ignore"),
    ({"components": GOOD["components"], "ignore": ["/tools"]}, "approved.ignore"),
])
def test_a_malformed_approved_part_is_refused_whole_and_named(approved: Any, said: str) -> None:
    body = {"verdict": {"status": "True", "reason": "Verified", "message": ""}, "digests": True,
            "approved": approved}
    with pytest.raises(AnswerError, match=said.replace("{", r"\{").replace("}", r"\}").replace("*", r"\*")):
        ReportAnswer.from_dict(body)


@pytest.mark.parametrize("body", [
    None, [], "202",
    {"verdict": None},
    {"verdict": {"status": True, "reason": "Verified"}},
    {"verdict": {"status": "True", "reason": "Verified"}, "digests": "yes"},
])
def test_a_malformed_answer_is_refused(body: Any) -> None:
    with pytest.raises(AnswerError):
        ReportAnswer.from_dict(body)


@pytest.mark.parametrize("address", ["10.244.0.7:8443", "[fd00::7]:8443"])
def test_the_replica_an_answer_names_round_trips(address: str) -> None:
    answer = ReportAnswer(AnswerVerdict("True", "Verified", "ok"), digests=True, report_to=ReplicaAddress.parse(address))
    assert answer.to_dict()["reportTo"] == address
    assert ReportAnswer.from_dict(answer.to_dict()) == answer


@pytest.mark.parametrize("address", [
    "operator.example.com:8443",  # a name: the sidecar would resolve it through whatever DNS says
    "fd00::7:8443", "[10.0.0.1]:8443", "10.0.0.1", "10.0.0.1:0", "10.0.0.1:65536", "10.0.0.1:\u0668443",
    "10.0.0.1:8443/v1/reports?x=", "user@10.0.0.1:8443", 8443, ["10.0.0.1:8443"], "",
])
def test_an_answer_naming_anything_but_an_address_and_port_is_refused(address: Any) -> None:
    """The sidecar builds a URL from it: a name, a path or credentials in it would go to another place."""
    with pytest.raises(AnswerError, match="reportTo"):
        ReportAnswer.from_dict({"verdict": {"status": "True", "reason": "Verified"}, "reportTo": address})


def test_the_gate_passes_only_what_is_listed() -> None:
    gate = ApprovedComponents.from_dict({"components": [ENTRY]}).gate()
    listed = next(tool for tool in (TOOL, OTHER) if tool["name"] == ENTRY["name"])
    unlisted = next(tool for tool in (TOOL, OTHER) if tool["name"] != ENTRY["name"])
    assert gate.check(ComponentKind.TOOL, listed).approved
    assert gate.check(ComponentKind.TOOL, unlisted).reason is GateReason.UNAPPROVED
    assert ApprovedComponents.from_dict({"components": []}).gate().check(ComponentKind.TOOL, listed).reason \
        is GateReason.UNAPPROVED
    listed_digest = ComponentDigest(ComponentKind.TOOL, ENTRY["name"], ENTRY["digest"])
    assert ComponentGate.of_components([listed_digest]).check(ComponentKind.TOOL, listed).approved
