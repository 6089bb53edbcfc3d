"""The sidecar's settings, read from the ``LOCKSTEP_*`` environment the webhook sets.

The variables, their defaults and their checks are those of :class:`lockstep.core.wire.SidecarEnv`, the
record the webhook writes (``to_env``) and the sidecar reads (``from_env``); see the table "Sidecar
environment" in ``docs/architecture.md``. This class adds what only a running sidecar needs: resolved
values (the MCP URL, paths, the default client capabilities) and the files it reads (the operator's CA,
the MCP request headers). ``LOCKSTEP_OPERATOR_CA`` holds either the PEM text of the CA bundle (what the
webhook injects) or the path of a file that holds it.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lockstep.core.capabilities import DEFAULT_CLIENT_CAPABILITIES
from lockstep.core.names import REPORT_PATH
from lockstep.core.wire import SettingsError, SidecarEnv

__all__ = ["SettingsError", "SidecarSettings"]


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
    #: Enforcement Isolate and Quarantine: the in-line proxy's port (``lockstep-mcp``); None runs the probe only.
    proxy_port: int | None = None
    #: What the probe announces at initialize (``spec.probe.clientCapabilities``; see docs/reader.md).
    client_capabilities: tuple[str, ...] = DEFAULT_CLIENT_CAPABILITIES
    #: The proxy's mode: ``quarantine`` (withhold what is not approved) or ``isolate`` (refuse the answer,
    #: and every request while the operator's last verdict for this pod is not True).
    proxy_mode: str = "quarantine"
    #: The pod's own IP ("" : not known): each probe checks that the MCP server does not answer on it.
    pod_ip: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SidecarSettings:
        """Raises SettingsError naming the first variable it cannot use."""
        return cls.of(SidecarEnv.from_env(env))

    @classmethod
    def of(cls, env: SidecarEnv) -> SidecarSettings:
        return cls(
            mcp_url=env.endpoint,
            transport=env.transport,
            interface=env.interface,
            interval=env.interval,
            timeout=env.timeout,
            operator_url=env.operator_url,
            token_path=Path(env.token_path),
            operator_ca=env.operator_ca,
            headers_dir=Path(env.headers_dir) if env.headers_dir else None,
            port=env.port,
            proxy_port=env.proxy_port,
            client_capabilities=(env.client_capabilities if env.client_capabilities is not None
                                 else DEFAULT_CLIENT_CAPABILITIES),
            proxy_mode=env.proxy_mode,
            pod_ip=env.pod_ip,
        )

    @property
    def report_url(self) -> str:
        return f"{self.operator_url}{REPORT_PATH}"

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
