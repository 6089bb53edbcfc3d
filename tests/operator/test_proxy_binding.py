"""Security review 2 on the operator's side, against the real operator on kmock.

S6-6: an Isolate or Quarantine pod whose sidecar runs no proxy (admitted while no proxied interface selected it,
then relabelled) or was admitted for another interface, endpoint or proxy port/mode is never verified, whatever
it reports: ProxyMissing / BindingMismatch, with the fix in the message.
S6-9: a pod that opted out is never verified, even when it carries the gate and a sidecar of its own.
S6-4: a Service that selects guarded pods on another port than the proxy's is reported (status, Event, metric).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from lockstep_testing.kmock_support import (
    NAMESPACE,
    TOOLS,
    Emulator,
    TlsFiles,
    TokenBook,
    create_objects,
    events_of,
    make_pod,
    make_resource,
    operator_config,
    resource_status,
    run_operator,
    sidecar_for,
    verdict_of,
)
from lockstep_testing.polling import eventually
from lockstep_testing.reports import report_body

from lockstep.operator.injection import Binding, InjectionSettings, planned_sidecar

pytestmark = pytest.mark.kmock(cls=Emulator)

GOOD = {"tools": TOOLS}
SETTINGS = InjectionSettings(image="ghcr.io/lockstep-dev/lockstep:0.1.0", report_url="https://lockstep.example:8443")


def _with_sidecar(pod: dict[str, Any], binding: Binding) -> dict[str, Any]:
    """``pod`` as the webhook would have injected it for ``binding`` (a container of its own dropping ALL)."""
    pod["spec"]["containers"] = [{"name": "server", "image": "weather:1", "ports": [
        {"name": "mcp", "containerPort": 8000}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]
    pod["spec"]["initContainers"] = [planned_sidecar(pod, SETTINGS, binding)]
    return pod


def _bound(resource: dict[str, Any], **changes: Any) -> Binding:
    return Binding(**{**Binding.from_interface(resource).__dict__, **changes})


@pytest.mark.parametrize("enforcement", ["Isolate", "Quarantine"])
async def test_a_pod_admitted_without_the_proxy_is_never_verified(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles, enforcement: str) -> None:
    resource = make_resource([GOOD], enforcement=enforcement, endpoint={"port": 8000})
    late = _with_sidecar(make_pod("late"), Binding())  # admitted while no interface selected it
    genuine = _with_sidecar(make_pod("genuine"), Binding.from_interface(resource))
    await create_objects(kmock, resource, late, genuine)
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        status, answer = await sidecar_for(operator, tokens, tls_files, "late").post(report_body(at="now", document=GOOD))
        assert (status, answer["verdict"]["reason"]) == (202, "ProxyMissing")
        assert "rollout restart" in answer["verdict"]["message"]
        assert verdict_of(kmock, "late") == ("False", "ProxyMissing")
        status, answer = await sidecar_for(operator, tokens, tls_files, "genuine").post(
            {**report_body(at="now", document=GOOD), "proxy": {"withheld": [], "dropped": 0}})
        assert (status, answer["verdict"]["reason"]) == (202, "Verified")


@pytest.mark.parametrize(("change", "named"), [
    ({"interface": "another"}, "interface another (the interface asks for weather)"),
    ({"proxy_port": 8091}, "proxy port 8091 (the interface asks for 8090)"),
    ({"enforcement": "Quarantine"}, "proxy mode quarantine (the interface asks for isolate)"),
    ({"port": 8001}, "endpoint port 8001 (the interface asks for 8000)"),
])
async def test_a_sidecar_admitted_for_another_binding_is_never_verified(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles, change: dict[str, Any], named: str) -> None:
    resource = make_resource([GOOD], enforcement="Isolate", endpoint={"port": 8000})
    pod = _with_sidecar(make_pod("p1"), _bound(resource, **change))
    await create_objects(kmock, resource, pod)
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        status, answer = await sidecar_for(operator, tokens, tls_files, "p1").post(
            {**report_body(at="now", document=GOOD), "proxy": {"withheld": [], "dropped": 0}})
        assert (status, answer["verdict"]["reason"]) == (202, "BindingMismatch")
        assert named in answer["verdict"]["message"]
        assert verdict_of(kmock, "p1") == ("False", "BindingMismatch")


async def test_audit_needs_no_proxy(kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    resource = make_resource([GOOD], enforcement="Audit", endpoint={"port": 8000})
    await create_objects(kmock, resource, _with_sidecar(make_pod("p1"), Binding.from_interface(resource)))
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        status, answer = await sidecar_for(operator, tokens, tls_files, "p1").post(report_body(at="now", document=GOOD))
        assert (status, answer["verdict"]["status"]) == (202, "True")


async def test_an_opted_out_pod_with_a_gate_and_a_sidecar_of_its_own_is_never_verified(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """The route of poc_opt_out_counterfeit.py: admitted untouched where opt-out is allowed, gated by itself, its
    counterfeit reporting the approved interface with the pod's real lockstep.dev token."""
    resource = make_resource([GOOD], enforcement="Isolate", endpoint={"port": 8000})
    pod = _with_sidecar(make_pod("p1", {"app": "weather", "lockstep.dev/inject": "disabled"}),
                        Binding.from_interface(resource))
    pod["spec"]["initContainers"][0]["image"] = "evil.example.com/always-approved:1"
    await create_objects(kmock, resource, pod)
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        status, answer = await sidecar_for(operator, tokens, tls_files, "p1").post(
            {**report_body(at="now", document=GOOD), "proxy": {"withheld": [], "dropped": 0}})
        assert (status, answer["verdict"]["reason"]) == (202, "PodOutsidePolicy")
        assert "opted out" in answer["verdict"]["message"]
        assert verdict_of(kmock, "p1") == ("False", "PodOutsidePolicy")


def _service(name: str, *ports: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"selector": {"app": "weather"},
                     "ports": [{"name": f"p{index}", "port": 80 + index, "targetPort": port}
                               for index, port in enumerate(ports)]}}


async def test_a_service_on_any_port_but_the_proxys_is_reported(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """The real-node route of issue 32: the deployer's second server on 8081 and its own Service to it."""
    resource = make_resource([GOOD], enforcement="Isolate", endpoint={"port": 8000})
    pod = _with_sidecar(make_pod("p1"), Binding.from_interface(resource))
    await create_objects(kmock, resource, pod)
    for service in (_service("weather", "lockstep-mcp"), _service("numbered", 8090),
                    _service("second", 8081), _service("metrics", "lockstep-http", 9100)):
        async with kmock.post(f"/api/v1/namespaces/{NAMESPACE}/services", json=copy.deepcopy(service)) as answer:
            assert answer.status < 300, await answer.text()
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        await sidecar_for(operator, tokens, tls_files, "p1").post(report_body(at="now", document=GOOD))
        await eventually(lambda: (resource_status(kmock).get("proxy") or {}).get("bypassingServices")
                         == ["metrics:9100", "second:8081"], what="the bypassing Services in status")
        conditions = {c["type"]: c for c in resource_status(kmock)["conditions"]}
        assert conditions["ProxyBypassed"]["status"] == "True"
        await eventually(lambda: events_of(kmock, "MCPServerInterface", "weather").count("ServiceBypassesProxy") == 2,
                         what="one Event per bypassing Service port")


async def test_a_listener_that_opens_after_the_first_report_is_judged_on_a_digest_only_report(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """Found on the real node: the sidecar reports the socket tables' change with the same interface, so digests
    only; the operator took the held full report's exposure (none) and the pod stayed Verified."""
    resource = make_resource([GOOD], enforcement="Isolate", endpoint={"port": 8000})
    await create_objects(kmock, resource, _with_sidecar(make_pod("p1"), Binding.from_interface(resource)))
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        full = {**report_body(at="now", document=GOOD), "serverExposed": False}
        assert (await sidecar.post(full))[1]["verdict"]["reason"] == "Verified"
        exposed = {**report_body(at="now", document=GOOD, digests_only=True), "serverExposed": True,
                   "exposedAt": "0.0.0.0:8081", "exposedSockets": ["tcp 0.0.0.0:8081"]}
        status, answer = await sidecar.post(exposed)
        assert (status, answer["verdict"]["reason"]) == (202, "ServerExposed")
        assert "tcp 0.0.0.0:8081" in answer["verdict"]["message"]
        assert verdict_of(kmock, "p1") == ("False", "ServerExposed")


async def test_a_pod_injected_before_0_2_0_is_left_to_the_upgrades_restart(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """An operator upgrade must not cut every running pod at once (docs/upgrades.md: the restart brings the proxy
    and the hardening). A 0.1.0 webhook wrote no LOCKSTEP_PROXY_MODE, gave Isolate no proxy and left NET_RAW; a
    current sidecar without the variable is no sidecar Lockstep injects (refused at admission)."""
    resource = make_resource([GOOD], enforcement="Isolate", endpoint={"port": 8000})
    legacy = _with_sidecar(make_pod("legacy"), Binding(interface="weather", port=8000))  # 0.1.0: no proxy
    sidecar = legacy["spec"]["initContainers"][0]
    sidecar["env"] = [item for item in sidecar["env"] if item["name"] not in ("LOCKSTEP_PROXY_MODE", "LOCKSTEP_POD_IP")]
    del legacy["spec"]["containers"][0]["securityContext"]
    current = _with_sidecar(make_pod("current"), Binding(interface="weather", port=8000))
    del current["spec"]["containers"][0]["securityContext"]
    await create_objects(kmock, resource, legacy, current)
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        status, answer = await sidecar_for(operator, tokens, tls_files, "legacy").post(report_body(at="now", document=GOOD))
        assert (status, answer["verdict"]["reason"]) == (202, "Verified")
        status, answer = await sidecar_for(operator, tokens, tls_files, "current").post(
            report_body(at="now", document=GOOD))
        assert (status, answer["verdict"]["reason"]) == (202, "PodOutsidePolicy")
        assert "NET_RAW" in answer["verdict"]["message"]
