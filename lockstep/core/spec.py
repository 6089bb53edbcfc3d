"""An MCPServerInterface's spec as the operator reads it: the endpoint, the probe's timing, the proxy's
port. Pure parsing, shared by the mutating webhook (what it injects, ``operator/injection.py``) and
the judge (``spec.probe.staleAfter``, ``spec.proxy.port``, ``operator/judge.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lockstep.core.capabilities import parse_client_capabilities

__all__ = [
    "DEFAULT_ENDPOINT",
    "DEFAULT_INTERVAL",
    "DEFAULT_PATH",
    "DEFAULT_PORT",
    "DEFAULT_PROXY_PORT",
    "DEFAULT_STALE_AFTER",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TRANSPORT",
    "PROXIED_ENFORCEMENTS",
    "STALE_INTERVALS",
    "TRANSPORTS",
    "Binding",
    "BindingError",
    "parse_duration",
    "probe_client_capabilities",
    "probe_interval",
    "probe_stale_after",
    "probe_timeout",
    "proxy_port",
]

#: ``spec.endpoint``'s defaults, and the transports the sidecar speaks.
DEFAULT_PORT = 8080
DEFAULT_PATH = "/mcp"
DEFAULT_TRANSPORT = "streamable-http"
TRANSPORTS = ("streamable-http", "sse")
DEFAULT_ENDPOINT = {"port": DEFAULT_PORT, "path": DEFAULT_PATH, "transport": DEFAULT_TRANSPORT}
#: ``spec.probe``'s defaults (seconds); staleAfter is at least STALE_INTERVALS intervals.
DEFAULT_INTERVAL = 60.0
DEFAULT_TIMEOUT = 10.0
DEFAULT_STALE_AFTER = 180.0
STALE_INTERVALS = 3
#: ``spec.proxy.port``'s default (enforcement Isolate and Quarantine).
DEFAULT_PROXY_PORT = 8090
#: The enforcements whose pods get the sidecar's in-line proxy on every agent-facing path (issue 28).
PROXIED_ENFORCEMENTS = ("Isolate", "Quarantine")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class BindingError(ValueError):
    """An MCPServerInterface whose endpoint or probe settings cannot be used."""


@dataclass(frozen=True)
class Binding:
    """The MCPServerInterface that applies to a pod, as far as the sidecar needs it.

    ``interface`` is empty when none selects the pod: the sidecar then still runs
    and reports, and the pod stays out of Services until one does (fail closed).
    """

    interface: str = ""
    port: int | str = DEFAULT_PORT  # a number, or the name of a container port
    path: str = DEFAULT_PATH
    transport: str = DEFAULT_TRANSPORT
    interval_seconds: float = DEFAULT_INTERVAL
    timeout_seconds: float = DEFAULT_TIMEOUT
    headers_secret: str | None = None
    #: Enforcement Isolate and Quarantine: the sidecar also runs the in-line proxy on this port (``lockstep-mcp``).
    proxy_port: int | None = None
    #: ``spec.enforcement`` (Isolate when absent, as the judge reads it).
    enforcement: str = "Isolate"
    #: ``spec.probe.clientCapabilities``: what the probe announces (None: the sidecar's default).
    client_capabilities: tuple[str, ...] | None = None

    @classmethod
    def from_interface(cls, interface: Mapping[str, Any]) -> Binding:
        """Read the endpoint and probe settings of an MCPServerInterface object."""
        spec = interface.get("spec") or {}
        endpoint = spec.get("endpoint") or {}
        probe = spec.get("probe") or {}
        transport = str(endpoint.get("transport", DEFAULT_TRANSPORT))
        if transport not in TRANSPORTS:
            raise BindingError(f"unknown transport {transport!r}")
        headers = endpoint.get("headersFrom") or {}
        return cls(
            interface=str((interface.get("metadata") or {}).get("name", "")),
            port=endpoint.get("port", DEFAULT_PORT),
            path=str(endpoint.get("path", DEFAULT_PATH)),
            transport=transport,
            interval_seconds=probe_interval(probe),
            timeout_seconds=probe_timeout(probe),
            headers_secret=headers.get("secretName") if isinstance(headers, Mapping) else None,
            proxy_port=proxy_port(spec) if spec.get("enforcement", "Isolate") in PROXIED_ENFORCEMENTS else None,
            enforcement=str(spec.get("enforcement") or "Isolate"),
            client_capabilities=probe_client_capabilities(probe),
        )


# The CRD defaults only `interval`: the API server applies defaults before CEL, so a fixed default
# timeout of 10s would refuse `probe: {interval: 5s}`. The other two follow the interval here.
def probe_interval(probe: Mapping[str, Any]) -> float:
    return parse_duration(probe.get("interval", DEFAULT_INTERVAL))


def probe_client_capabilities(probe: Mapping[str, Any]) -> tuple[str, ...] | None:
    """``spec.probe.clientCapabilities`` (None when absent: the sidecar announces its default)."""
    if "clientCapabilities" not in probe:
        return None
    try:
        return parse_client_capabilities(probe["clientCapabilities"] or [])
    except (TypeError, ValueError) as error:
        raise BindingError(f"spec.probe.clientCapabilities: {error}") from None


def probe_timeout(probe: Mapping[str, Any]) -> float:
    """``spec.probe.timeout``, by default 10 s or the interval when that is shorter."""
    if "timeout" in probe:
        return parse_duration(probe["timeout"])
    return min(DEFAULT_TIMEOUT, probe_interval(probe))


def probe_stale_after(probe: Mapping[str, Any]) -> float:
    """``spec.probe.staleAfter``, by default 180 s or three intervals when that is longer."""
    if "staleAfter" in probe:
        return parse_duration(probe["staleAfter"])
    return max(DEFAULT_STALE_AFTER, STALE_INTERVALS * probe_interval(probe))


def parse_duration(value: Any) -> float:
    """Seconds in a Kubernetes-style duration (``90s``, ``1m30s``, ``250ms``) or a plain number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    if not text or _DURATION.sub("", text):
        raise BindingError(f"not a duration: {value!r}")
    return sum(float(amount) * _UNIT_SECONDS[unit] for amount, unit in _DURATION.findall(text))


def proxy_port(spec: Mapping[str, Any]) -> int:
    """``spec.proxy.port`` of an MCPServerInterface (enforcement Quarantine), or its default."""
    port = (spec.get("proxy") or {}).get("port", DEFAULT_PROXY_PORT)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise BindingError(f"spec.proxy.port {port!r} is not a port number")
    return port
