"""Security review 2, through kopf's admission engine as the operator serves it.

S6-10: with NET_RAW (containerd's default set; baseline only checks *added* capabilities) a container reads the
agents' packets on the pod's interface and forges the MCP server's answer past the in-line proxy. Every container
of a guarded pod drops NET_RAW and may not gain privileges: added where absent, refused where asked otherwise.

S6-9: a pod that opts out may not carry Lockstep's readiness gate, a container named like the sidecar or a
lockstep.dev token (it would gate itself on a counterfeit's reports); an injected pod may not opt out later."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from lockstep.operator.admission_policy import pod_violations
from lockstep_testing.webhook_pods import NAMESPACE, plain_pod, weather_interface

HARDENED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["NET_RAW"]}}
RULE = "Lockstep requires capabilities.drop to contain NET_RAW"


def refusal(admitted: Any) -> str:
    response = admitted.response["response"]
    assert response["allowed"] is False, response
    return str(response["status"]["message"])


def _bare_pod() -> dict[str, Any]:
    """A pod as most charts write it: no container securityContext at all (NET_RAW kept by the runtime)."""
    pod = plain_pod()
    del pod["spec"]["containers"][0]["securityContext"]
    pod["spec"]["initContainers"] = [{"name": "migrate", "image": "example.com/weather-mcp:1.4"}]
    return pod


async def test_every_container_is_made_to_drop_net_raw_and_not_gain_privileges(admit: Any,
                                                                               interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = _bare_pod()
    pod["spec"]["containers"].append({"name": "cache", "image": "redis:7",
                                      "securityContext": {"runAsUser": 1000, "capabilities": {"drop": ["CHOWN"]}}})
    pod["spec"]["containers"].append({"name": "tail", "image": "busybox",
                                      "securityContext": {"capabilities": {"add": ["CHOWN"]}}})
    admitted = await admit(pod)
    assert admitted.response["response"]["allowed"] is True
    spec = admitted.pod["spec"]
    assert spec["initContainers"][0]["securityContext"] == HARDENED
    assert spec["containers"][0]["securityContext"] == HARDENED
    assert spec["containers"][1]["securityContext"] == {"runAsUser": 1000, "allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["CHOWN", "NET_RAW"]}}
    assert spec["containers"][2]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"add": ["CHOWN"], "drop": ["NET_RAW"]}}
    assert pod_violations(admitted.pod) == []
    assert (await admit(admitted.pod)).ops == []  # a reinvocation adds nothing


async def test_a_pod_that_already_drops_all_is_left_as_it_is(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    admitted = await admit(pod)
    assert admitted.pod["spec"]["containers"] == pod["spec"]["containers"]


@pytest.mark.parametrize(("security", "expected"), [
    ({"allowPrivilegeEscalation": True}, "allowPrivilegeEscalation is not false"),
    ({"capabilities": {"add": ["NET_RAW"]}}, "capabilities.add (NET_RAW)"),
    ({"capabilities": {"add": ["CAP_NET_RAW"]}, "allowPrivilegeEscalation": False}, "capabilities.add (CAP_NET_RAW)"),
])
async def test_a_container_that_asks_for_raw_networking_is_refused_not_rewritten(
        admit: Any, interfaces: list[Any], security: dict[str, Any], expected: str) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["containers"][0]["securityContext"] = security
    message = refusal(await admit(pod))
    assert "spec.containers[0].securityContext" in message and expected in message


async def _injected(admit: Any, interfaces: list[Any]) -> dict[str, Any]:
    interfaces.append(weather_interface())
    pod = (await admit(plain_pod())).pod
    pod["metadata"]["name"] = "weather-7d9f-abcde"
    return dict(pod)


async def test_an_ephemeral_container_keeping_net_raw_is_refused(admit: Any, interfaces: list[Any]) -> None:
    """`kubectl debug` without --profile=restricted adds a container with the runtime's default capabilities."""
    old = await _injected(admit, interfaces)
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox", "targetContainerName": "server"}]
    message = refusal(await admit(new, webhook="validate-pods", operation="UPDATE", old=old,
                                  sub_resource="ephemeralcontainers"))
    assert "spec.ephemeralContainers[0].securityContext (capabilities.drop lacks NET_RAW" in message
    assert RULE in message


async def test_a_live_pod_keeping_net_raw_is_never_verified_but_takes_metadata_updates(
        admit: Any, interfaces: list[Any]) -> None:
    """Admitted while the webhook was off (or before this rule): the operator's pod_violations names it; an UPDATE
    that adds nothing new is still allowed (finalizers, owner references)."""
    old = await _injected(admit, interfaces)
    del old["spec"]["containers"][0]["securityContext"]
    assert any(RULE in problem and "spec.containers[0]" in problem for problem in pod_violations(old))
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    assert (await admit(new, webhook="validate-pods", operation="UPDATE", old=old)
            ).response["response"]["allowed"] is True


# ---------------------------------------------------------------- opting out (S6-9)

def _counterfeit(pod: dict[str, Any], genuine: dict[str, Any]) -> dict[str, Any]:
    fake = copy.deepcopy(genuine["spec"]["initContainers"][-1])
    fake["image"] = "evil.example.com/always-approved:1"
    pod["spec"]["initContainers"] = [fake]
    pod["spec"]["volumes"] += [v for v in genuine["spec"]["volumes"] if v["name"].startswith("lockstep-")]
    pod["spec"]["readinessGates"] = [{"conditionType": "lockstep.dev/interface-verified"}]
    return pod


@pytest.mark.parametrize("marker", ["gate", "sidecar", "token", "all"])
async def test_an_opted_out_pod_may_not_carry_lockstep_markers(config: Any, admit: Any, interfaces: list[Any],
                                                               marker: str) -> None:
    config.allow_opt_out = (NAMESPACE,)
    interfaces.append(weather_interface())
    genuine = (await admit(plain_pod())).pod
    pod = _counterfeit(plain_pod(**{"lockstep.dev/inject": "disabled"}), genuine)
    if marker == "gate":
        del pod["spec"]["initContainers"]
        pod["spec"]["volumes"] = pod["spec"]["volumes"][:1]
    elif marker == "sidecar":
        del pod["spec"]["readinessGates"]
        pod["spec"]["volumes"] = pod["spec"]["volumes"][:1]
    elif marker == "token":
        del pod["spec"]["readinessGates"], pod["spec"]["initContainers"]
    message = refusal(await admit(pod))
    assert "it opts out" in message
    expected = {"gate": "spec.readinessGates", "sidecar": "spec.initContainers[0].name",
                "token": "spec.volumes[1] (lockstep-token)", "all": "spec.readinessGates"}[marker]
    assert expected in message
    plain = plain_pod(**{"lockstep.dev/inject": "disabled"})
    assert (await admit(plain)).response["response"]["allowed"] is True  # the control: opting out itself is fine


async def test_an_opted_out_pod_is_never_verified_by_the_operator() -> None:
    pod = plain_pod(**{"lockstep.dev/inject": "disabled"})
    assert any("opted out" in problem for problem in pod_violations(pod))


async def test_an_injected_pod_may_not_opt_out_later(admit: Any, interfaces: list[Any]) -> None:
    old = await _injected(admit, interfaces)
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["lockstep.dev/inject"] = "disabled"
    assert "cannot opt out" in refusal(await admit(new, webhook="validate-pods", operation="UPDATE", old=old))
