"""The side doors a pod author tried, each as a real AdmissionReview through kopf's admission engine:
every one is refused with a message that names the field (issue: close the bypasses)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from lockstep_testing.webhook_pods import NAMESPACE, plain_pod, weather_interface

TOKEN_SOURCE = {"serviceAccountToken": {"audience": "lockstep.dev", "path": "token", "expirationSeconds": 900}}


def refusal(admitted: Any) -> str:
    response = admitted.response["response"]
    assert response["allowed"] is False, response
    return str(response["status"]["message"])


async def test_a_pod_may_not_opt_out_in_an_opted_in_namespace_by_default(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    message = refusal(await admit(plain_pod(**{"lockstep.dev/inject": "disabled"})))
    assert "may not opt out" in message and "webhook.allowOptOut" in message


async def test_opting_out_where_the_platform_allows_it(config: Any, admit: Any, interfaces: list[Any]) -> None:
    config.allow_opt_out = (NAMESPACE,)
    interfaces.append(weather_interface())
    pod = plain_pod(**{"lockstep.dev/inject": "disabled"})
    admitted = await admit(pod)
    assert admitted.response["response"]["allowed"] is True and admitted.pod == pod


async def test_a_counterfeit_sidecar_is_refused(admit: Any, interfaces: list[Any]) -> None:
    """Before: the webhook skipped injection when a container had the sidecar's name, but still added
    the gate and the token volume, and a report of the approved digests with that token was accepted."""
    interfaces.append(weather_interface())
    genuine = (await admit(plain_pod())).pod["spec"]["initContainers"][-1]
    fake = copy.deepcopy(genuine)
    fake["image"] = "evil.example.com/always-approved:1"
    pod = plain_pod()
    pod["spec"]["initContainers"] = [fake]
    message = refusal(await admit(pod))
    assert "lockstep-sidecar that Lockstep did not inject (differs in image)" in message


async def test_the_sidecar_name_on_an_app_container_is_refused(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["containers"].append({"name": "lockstep-sidecar", "image": "evil.example.com/fake:1"})
    assert "spec.containers[1].name: lockstep-sidecar is reserved" in refusal(await admit(pod))


async def test_the_proxy_port_name_on_an_app_container_is_refused(admit: Any, interfaces: list[Any]) -> None:
    """A Service targeting lockstep-mcp could otherwise resolve to the server itself, past the proxy."""
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["containers"][0].setdefault("ports", []).append({"name": "lockstep-mcp", "containerPort": 8080})
    assert "spec.containers[0].ports: the port name lockstep-mcp is reserved" in refusal(await admit(pod))


async def test_a_lockstep_token_for_the_app_is_refused(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["volumes"] = [{"name": "stolen", "projected": {"sources": [TOKEN_SOURCE]}}]
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "stolen", "mountPath": "/tok"})
    assert "projected token for audience lockstep.dev is for the injected sidecar only" in \
        refusal(await admit(pod))


async def test_mounting_the_injected_token_volume_into_the_app_is_refused(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "lockstep-token", "mountPath": "/tok"})
    assert "spec.containers[0].volumeMounts: only the sidecar may mount lockstep-token" in refusal(await admit(pod))


@pytest.mark.parametrize(("field", "expected"), [("shareProcessNamespace", "read the sidecar's token"),
                                                  ("hostNetwork", "node's loopback")])
async def test_pod_level_settings_that_reach_the_sidecar_are_refused(admit: Any, interfaces: list[Any],
                                                                    field: str, expected: str) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"][field] = True
    message = refusal(await admit(pod))
    assert f"spec.{field}" in message and expected in message


def _lax(name: str, **spec: Any) -> dict[str, Any]:
    interface = weather_interface()
    interface["metadata"]["name"] = name
    interface["spec"].update(spec)
    return interface


@pytest.mark.parametrize("lax", [{"enforcement": "Audit"}, {"approval": "FirstSeen"}])
async def test_the_annotation_may_not_choose_a_weaker_interface(admit: Any, interfaces: list[Any],
                                                               lax: dict[str, str]) -> None:
    interfaces += [weather_interface(), _lax("lenient", selector={"matchLabels": {"app": "other"}}, **lax)]
    pod = plain_pod()
    pod["metadata"]["annotations"] = {"lockstep.dev/interface": "lenient"}
    message = refusal(await admit(pod))
    assert "names 'lenient', which is less strict than weather" in message


async def test_the_annotation_may_choose_an_equally_strict_interface(admit: Any, interfaces: list[Any]) -> None:
    interfaces += [weather_interface(), _lax("weather-v2", selector={"matchLabels": {"app": "other"}})]
    pod = plain_pod()
    pod["metadata"]["annotations"] = {"lockstep.dev/interface": "weather-v2"}
    admitted = await admit(pod)
    assert admitted.response["response"]["allowed"] is True
    [sidecar] = admitted.pod["spec"]["initContainers"]
    assert {"name": "LOCKSTEP_INTERFACE", "value": "weather-v2"} in sidecar["env"]


async def test_reinvocation_of_a_genuinely_injected_pod_is_allowed(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    once = await admit(plain_pod())
    again = await admit(once.pod)
    assert again.response["response"]["allowed"] is True and again.ops == []


# ---------------------------------------------------------------- UPDATE and ephemeral containers


async def _injected(admit: Any, interfaces: list[Any]) -> dict[str, Any]:
    interfaces.append(weather_interface())
    pod = (await admit(plain_pod())).pod
    pod["metadata"]["name"] = "weather-7d9f-abcde"
    return dict(pod)


async def test_an_update_that_swaps_the_sidecar_image_is_refused(admit: Any, interfaces: list[Any]) -> None:
    """A pod's container images are mutable: an UPDATE could replace the sidecar with a fake."""
    old = await _injected(admit, interfaces)
    new = copy.deepcopy(old)
    new["spec"]["initContainers"][-1]["image"] = "evil.example.com/always-approved:1"
    message = refusal(await admit(new, webhook="validate-pods", operation="UPDATE", old=old))
    assert "the injected sidecar cannot be changed" in message


async def test_an_ephemeral_container_may_not_reach_the_sidecar(admit: Any, interfaces: list[Any]) -> None:
    old = await _injected(admit, interfaces)
    for debug, expected in (
            ({"name": "debug", "image": "busybox", "targetContainerName": "lockstep-sidecar"},
             "targetContainerName: no container may join the sidecar's process namespace"),
            ({"name": "debug", "image": "busybox", "volumeMounts": [{"name": "lockstep-token", "mountPath": "/t"}]},
             "spec.ephemeralContainers[0].volumeMounts: only the sidecar may mount lockstep-token")):
        new = copy.deepcopy(old)
        new["spec"]["ephemeralContainers"] = [debug]
        admitted = await admit(new, webhook="validate-pods", operation="UPDATE", old=old,
                               sub_resource="ephemeralcontainers")
        assert expected in refusal(admitted)


async def test_an_ordinary_update_and_a_harmless_debug_container_are_allowed(admit: Any,
                                                                            interfaces: list[Any]) -> None:
    old = await _injected(admit, interfaces)
    labelled = copy.deepcopy(old)
    labelled["metadata"]["labels"]["release"] = "canary"
    assert (await admit(labelled, webhook="validate-pods", operation="UPDATE", old=old)
            ).response["response"]["allowed"] is True
    debugged = copy.deepcopy(old)
    debugged["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox", "targetContainerName": "server"}]
    assert (await admit(debugged, webhook="validate-pods", operation="UPDATE", old=old,
                        sub_resource="ephemeralcontainers")).response["response"]["allowed"] is True
