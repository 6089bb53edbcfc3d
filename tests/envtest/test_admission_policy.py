"""The side doors of issue 10, tried through a real kube-apiserver's admission chain: the operator's
pod webhooks (as the chart registers them) refuse each one, and an ordinary pod still gets in."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from lockstep_testing.cluster_objects import weather_pod
from lockstep.demo.control_plane import ControlPlane, ControlPlaneError
from lockstep_testing.lockstep_install import Installation, api_path, apply

STRICT = {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface",
          "spec": {"selector": {"matchLabels": {"app": "weather"}}, "approval": "FirstSeen"}}


def refused(plane: ControlPlane, body: dict[str, Any]) -> str:
    with pytest.raises(ControlPlaneError, match="HTTP 403") as error:
        apply(plane, body)
    return str(error.value)


def _interface(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(STRICT)
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"].update(spec)
    return body


async def test_pod_side_doors_are_refused_by_the_real_admission_chain(
        control_plane: ControlPlane, lockstep: Installation, namespace: str) -> None:
    plane = control_plane
    apply(plane, _interface(namespace, "weather"))
    genuine = apply(plane, weather_pod(namespace, "genuine"))
    sidecar = next(c for c in genuine["spec"]["initContainers"] if c["name"] == "lockstep-sidecar")

    opted_out = weather_pod(namespace, "opted-out")
    opted_out["metadata"]["labels"]["lockstep.dev/inject"] = "disabled"
    assert "may not opt out" in refused(plane, opted_out)

    counterfeit = weather_pod(namespace, "counterfeit")
    fake = copy.deepcopy(sidecar)
    fake["image"] = "evil.example.com/always-approved:1"
    counterfeit["spec"]["initContainers"] = [fake]
    assert "that Lockstep did not inject" in refused(plane, counterfeit)

    thief = weather_pod(namespace, "thief")
    thief["spec"]["volumes"] = [{"name": "t", "projected": {"sources": [
        {"serviceAccountToken": {"audience": "lockstep.dev", "path": "token", "expirationSeconds": 600}}]}}]
    thief["spec"]["containers"][0]["volumeMounts"] = [{"name": "t", "mountPath": "/t"}]
    assert "for the injected sidecar only" in refused(plane, thief)

    for field in ("shareProcessNamespace", "hostNetwork"):
        pod = weather_pod(namespace, field.lower())
        pod["spec"][field] = True
        assert f"spec.{field}" in refused(plane, pod)

    apply(plane, _interface(namespace, "lenient", selector={"matchLabels": {"app": "lenient"}},
                            enforcement="Audit"))
    escaping = weather_pod(namespace, "escaping")
    escaping["metadata"]["annotations"] = {"lockstep.dev/interface": "lenient"}
    assert "less strict than weather" in refused(plane, escaping)


async def test_updates_and_debug_containers_may_not_reach_the_sidecar(
        control_plane: ControlPlane, lockstep: Installation, namespace: str) -> None:
    plane = control_plane
    apply(plane, _interface(namespace, "weather"))
    pod = apply(plane, weather_pod(namespace, "weather-0"))
    index = [c["name"] for c in pod["spec"]["initContainers"]].index("lockstep-sidecar")
    swap = [{"op": "replace", "path": f"/spec/initContainers/{index}/image", "value": "evil.example.com/fake:1"}]
    with pytest.raises(ControlPlaneError, match="HTTP 403") as error:
        await asyncio.to_thread(plane.call, "PATCH", api_path("Pod", namespace, "weather-0"), swap,
                                content_type="application/json-patch+json")
    assert "the injected sidecar cannot be changed" in str(error.value)

    current = plane.call("GET", api_path("Pod", namespace, "weather-0"))
    current["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox",
                                               "targetContainerName": "lockstep-sidecar"}]
    with pytest.raises(ControlPlaneError, match="HTTP 403") as error:
        plane.call("PUT", api_path("Pod", namespace, "weather-0") + "/ephemeralcontainers", current)
    assert "no container may join the sidecar" in str(error.value)

    relabel = {"metadata": {"labels": {"release": "canary"}}}
    patched = plane.call("PATCH", api_path("Pod", namespace, "weather-0"), relabel,
                         content_type="application/merge-patch+json")
    assert patched["metadata"]["labels"]["release"] == "canary"
