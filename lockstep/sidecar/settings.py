"""The sidecar's settings, read from the ``LOCKSTEP_*`` environment the webhook sets.

See the table "Sidecar environment" in ``docs/architecture.md``.
``LOCKSTEP_OPERATOR_CA`` holds either the PEM text of the CA bundle (what the
webhook injects) or the path of a file that holds it.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lockstep.core.capabilities import DEFAULT_CLIENT_CAPABILITIES, parse_client_capabilities

__all__ = ["SettingsError", "SidecarSettings"]

TRANSPORTS = ("streamable-http", "sse")
DEFAULT_TOKEN_PATH = "/var/run/secrets/lockstep.dev/token"


class SettingsError(ValueError):
    """A ``LOCKSTEP_*`` variable the sidecar cannot use."""


@dataclass(frozen=True)
class SidecarSettings:
    mcp_url: str
    transport: str
    interface: str
    interval: float
    timeout: float
    operator_url: str
    token_path: Path
    operator_ca: str
    headers_dir: Path | None
    port: int
    #: Enforcement Quarantine: the in-line proxy's port (``lockstep-mcp``); None runs the probe only.
    proxy_port: int | None = None
    #: What the probe announces at initialize (``spec.probe.clientCapabilities``; see docs/reader.md).
    client_capabilities: tuple[str, ...] = DEFAULT_CLIENT_CAPABILITIES

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SidecarSettings:
        transport = env.get("LOCKSTEP_MCP_TRANSPORT") or "streamable-http"
        if transport not in TRANSPORTS:
            raise SettingsError(f"LOCKSTEP_MCP_TRANSPORT must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
        port = _number(env, "LOCKSTEP_MCP_PORT", 8080)
        path = env.get("LOCKSTEP_MCP_PATH") or "/mcp"
        url = env.get("LOCKSTEP_MCP_URL") or f"http://127.0.0.1:{int(port)}/{path.lstrip('/')}"
        operator_url = env.get("LOCKSTEP_OPERATOR_URL", "").rstrip("/")
        if not operator_url:
            raise SettingsError("LOCKSTEP_OPERATOR_URL is not set")
        headers_dir = env.get("LOCKSTEP_HEADERS_DIR")
        return cls(
            mcp_url=url,
            transport=transport,
            interface=env.get("LOCKSTEP_INTERFACE", ""),
            interval=_positive(env, "LOCKSTEP_PROBE_INTERVAL", 60.0),
            timeout=_positive(env, "LOCKSTEP_PROBE_TIMEOUT", 10.0),
            operator_url=operator_url,
            token_path=Path(env.get("LOCKSTEP_TOKEN_PATH") or DEFAULT_TOKEN_PATH),
            operator_ca=env.get("LOCKSTEP_OPERATOR_CA", ""),
            headers_dir=Path(headers_dir) if headers_dir else None,
            port=int(_number(env, "LOCKSTEP_SIDECAR_PORT", 9090)),
            proxy_port=_proxy_port(env),
            client_capabilities=_client_capabilities(env),
        )

    @property
    def report_url(self) -> str:
        return f"{self.operator_url}/v1/reports"

    def ssl_context(self) -> ssl.SSLContext:
        """TLS verification for the report endpoint: the operator's CA, or the system's when none is set."""
        ca = self.operator_ca.strip()
        if not ca:
            return ssl.create_default_context()
        if ca.startswith("-----BEGIN"):
            return ssl.create_default_context(cadata=ca)
        return ssl.create_default_context(cafile=ca)

    def mcp_headers(self) -> dict[str, str]:
        """Headers for the MCP server: one file per header in LOCKSTEP_HEADERS_DIR, read on every call."""
        if self.headers_dir is None or not self.headers_dir.is_dir():
            return {}
        return {entry.name: entry.read_text().strip() for entry in sorted(self.headers_dir.iterdir())
                if entry.is_file() and not entry.name.startswith(".")}


def _client_capabilities(env: Mapping[str, str]) -> tuple[str, ...]:
    """``LOCKSTEP_PROBE_CLIENT_CAPABILITIES``: ``sampling,elicitation,roots``, ``none``; empty: the default."""
    raw = env.get("LOCKSTEP_PROBE_CLIENT_CAPABILITIES", "").strip()
    if not raw:
        return DEFAULT_CLIENT_CAPABILITIES
    try:
        return parse_client_capabilities(raw)
    except ValueError as error:
        raise SettingsError(f"LOCKSTEP_PROBE_CLIENT_CAPABILITIES: {error}") from None


def _proxy_port(env: Mapping[str, str]) -> int | None:
    if not env.get("LOCKSTEP_PROXY_PORT"):
        return None
    port = _number(env, "LOCKSTEP_PROXY_PORT", 0)
    if port != int(port) or not 0 < port < 65536:
        raise SettingsError(f"LOCKSTEP_PROXY_PORT must be a port number, not {env['LOCKSTEP_PROXY_PORT']!r}")
    return int(port)


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, not {raw!r}") from None


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    value = _number(env, name, default)
    if value <= 0:
        raise SettingsError(f"{name} must be positive, not {value}")
    return value
