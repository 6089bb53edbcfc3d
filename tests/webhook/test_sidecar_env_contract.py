"""The contract between the webhook and the sidecar: what the injection writes into the pod's sidecar
container is what the sidecar reads, field by field (both go through lockstep.core.wire.SidecarEnv)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lockstep.operator.injection import Binding, InjectionSettings, plan_injection
from lockstep.sidecar.settings import SidecarSettings

from lockstep.core.capabilities import DEFAULT_CLIENT_CAPABILITIES
from lockstep.core.names import HEADERS_DIR, SIDECAR_ENV, SIDECAR_NAME, TOKEN_PATH
from lockstep.core.wire import SidecarEnv

CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
OPERATOR = InjectionSettings(image="ghcr.io/lockstep-dev/lockstep:0.1.0",
                             report_url="https://lockstep.lockstep-system.svc:8443", operator_ca=CA_PEM)


def pod(*ports: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "weather-0", "namespace": "tools"},
            "spec": {"containers": [{"name": "server", "image": "weather", "ports": list(ports)}]}}


def planned_sidecar(pod_body: dict[str, Any], settings: InjectionSettings,
                    binding: Binding) -> dict[str, Any]:
    """The sidecar container the webhook's JSON Patch adds to the pod."""
    [sidecar] = [value for op in plan_injection(pod_body, settings, binding)
                 for value in (op["value"] if isinstance(op["value"], list) else [op["value"]])
                 if isinstance(value, dict) and value.get("name") == SIDECAR_NAME]
    return sidecar


def injected_env(sidecar: dict[str, Any]) -> dict[str, str]:
    """The sidecar container's environment as the kubelet gives it (a variable without a value is "")."""
    assert [entry["name"] for entry in sidecar["env"]] == list(SIDECAR_ENV)
    return {entry["name"]: entry.get("value", "") for entry in sidecar["env"]}


CASES = {
    "defaults": (pod(), OPERATOR, Binding(interface="weather")),
    "no interface, no CA": (pod(), InjectionSettings(image="i", report_url="https://op:8443"), Binding()),
    "quarantine, headers, named port, capabilities": (
        pod({"name": "mcp", "containerPort": 3000}),
        InjectionSettings(image="i", report_url="https://op", port=9100),
        Binding(interface="weather", port="mcp", path="sse", transport="sse", interval_seconds=2.5,
                timeout_seconds=0.25, headers_secret="weather-headers", proxy_port=8090,
                client_capabilities=("sampling", "roots"), enforcement="Quarantine")),
    "isolate: the proxy refuses": (
        pod(), OPERATOR, Binding(interface="weather", proxy_port=8090, enforcement="Isolate")),
    "no capabilities, sidecar port taken": (
        pod({"containerPort": 9090}), OPERATOR, Binding(interface="w", port=8000, client_capabilities=())),
}


@pytest.mark.parametrize("case", CASES)
def test_what_the_webhook_writes_is_what_the_sidecar_reads(case: str) -> None:
    pod_body, settings, binding = CASES[case]
    sidecar = planned_sidecar(pod_body, settings, binding)
    env = injected_env(sidecar)
    mcp_port = 3000 if binding.port == "mcp" else int(binding.port)
    taken = [port["containerPort"] for port in pod_body["spec"]["containers"][0]["ports"]]
    sidecar_port = settings.port + 1 if settings.port in taken else settings.port

    record = SidecarEnv.from_env(env)
    assert record == SidecarEnv(
        operator_url=settings.report_url, mcp_port=mcp_port, mcp_path=binding.path, mcp_url="",
        transport=binding.transport, interface=binding.interface, interval=binding.interval_seconds,
        timeout=binding.timeout_seconds, token_path=TOKEN_PATH, operator_ca=settings.operator_ca,
        headers_dir=HEADERS_DIR if binding.headers_secret else None, port=sidecar_port,
        proxy_port=binding.proxy_port, client_capabilities=binding.client_capabilities,
        proxy_mode="isolate" if binding.proxy_port and binding.enforcement == "Isolate" else "quarantine")
    assert record.to_env() == sidecar["env"]
    # the pod's IP comes from the downward API: the kubelet fills it in
    assert sidecar["env"][-1] == {"name": "LOCKSTEP_POD_IP",
                                  "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}

    read = SidecarSettings.from_env(env)  # what the sidecar process makes of it
    assert read == SidecarSettings(
        mcp_url=f"http://127.0.0.1:{mcp_port}/{binding.path.lstrip('/')}",
        transport=binding.transport,
        interface=binding.interface,
        interval=binding.interval_seconds,
        timeout=binding.timeout_seconds,
        operator_url=settings.report_url,
        token_path=Path(TOKEN_PATH),
        operator_ca=settings.operator_ca,
        headers_dir=Path(HEADERS_DIR) if binding.headers_secret else None,
        port=sidecar_port,
        proxy_port=binding.proxy_port,
        client_capabilities=(binding.client_capabilities if binding.client_capabilities is not None
                             else DEFAULT_CLIENT_CAPABILITIES),
        proxy_mode="isolate" if binding.proxy_port and binding.enforcement == "Isolate" else "quarantine",
    )
    assert read.report_url == f"{settings.report_url}/v1/reports"


def test_every_field_of_the_record_is_a_variable_the_webhook_sets() -> None:
    """A field added to SidecarEnv without a variable (or the reverse) fails here."""
    fields = SidecarEnv.__dataclass_fields__
    assert len(fields) == len(SIDECAR_ENV)
    changed = SidecarEnv("https://a", mcp_port=1, mcp_path="/p", mcp_url="http://x", transport="sse",
                         interface="i", interval=1.5, timeout=2.5, token_path="/t", operator_ca="ca",
                         headers_dir="/h", port=2, proxy_port=3, client_capabilities=("roots",),
                         proxy_mode="isolate", pod_ip="10.0.0.7")
    default = SidecarEnv("https://b")
    assert all(getattr(changed, name) != getattr(default, name) for name in fields)
    written = {entry["name"]: entry.get("value", "") for entry in changed.to_env()}
    assert all(written.values()) and SidecarEnv.from_env(written) == changed
