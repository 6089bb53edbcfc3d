"""The records that cross between the operator and the sidecar, each written and read by one class.

- :class:`SidecarEnv`: the sidecar's ``LOCKSTEP_*`` environment. The mutating webhook writes it into
  the sidecar container (``to_env``); the sidecar reads it at start (``from_env``).
- :class:`ReportAnswer`: the operator's 202 answer to a report (``POST /v1/reports``)::

      {"verdict": {"status": "True", "reason": "Verified", "message": "..."},
       "digests": true,                                  # it takes digest-only reports
       "approved": {"ignore": ["/tools/*/description"],  # only to a sidecar that runs the proxy
                    "components": [{"kind": "tool", "name": "get_forecast", "digest": "sha256:..."}]},
       "reportTo": "10.244.0.7:8443",                    # with several replicas: the one that judged
       "staleAfter": 180}                                # seconds a True stands without another one


- :class:`VerdictNotice`: the operator's answer to a sidecar's verdict watch (``GET /v1/verdicts``, a long
  poll): the pod's current verdict and approved components, named by an ``etag`` the next watch waits past.
- :class:`ApprovedComponents`: that ``approved`` part, every approved component digest and the ignore
  rules: what the sidecar's in-line proxy may let through (its :class:`~lockstep.core.gate.ComponentGate`).

The report itself is :mod:`lockstep.core.report`. Reading is strict: a value the reader cannot use
raises a :class:`WireError` that names it, and the answer's ``approved`` part is taken whole or not
at all (the proxy then keeps its gate: a malformed answer never widens what it lets through).
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lockstep.core.capabilities import format_client_capabilities, parse_client_capabilities
from lockstep.core.digest import ComponentDigest
from lockstep.core.errors import LockstepError
from lockstep.core.gate import ComponentGate
from lockstep.core.ignore import parse_ignore_rules
from lockstep.core.model import ComponentKind
from lockstep.core.replica_address import AddressError, ReplicaAddress, replica_host
from lockstep.core.names import (
    ENV_HEADERS_DIR,
    ENV_INTERFACE,
    ENV_MCP_PATH,
    ENV_MCP_PORT,
    ENV_MCP_TRANSPORT,
    ENV_MCP_URL,
    ENV_OPERATOR_CA,
    ENV_OPERATOR_URL,
    ENV_POD_IP,
    ENV_PROBE_CLIENT_CAPABILITIES,
    ENV_PROBE_INTERVAL,
    ENV_PROBE_TIMEOUT,
    ENV_PROXY_MODE,
    ENV_PROXY_PORT,
    ENV_SIDECAR_PORT,
    ENV_TOKEN_PATH,
    TOKEN_PATH,
)
from lockstep.core.revision import Revision
from lockstep.core.spec import (
    DEFAULT_INTERVAL,
    DEFAULT_PATH,
    DEFAULT_PORT,
    DEFAULT_TIMEOUT,
    DEFAULT_TRANSPORT,
    TRANSPORTS,
)

# AddressError, ReplicaAddress and replica_host are lockstep.core.replica_address's (importable from here too).
__all__ = [
    "DEFAULT_SIDECAR_PORT",
    "VERDICTS_PATH",
    "AddressError",
    "AnswerError",
    "AnswerVerdict",
    "ApprovedComponents",
    "ReplicaAddress",
    "ReportAnswer",
    "SettingsError",
    "SidecarEnv",
    "VerdictNotice",
    "WireError",
    "replica_host",
]

#: The sidecar's own port (/healthz, /metrics) unless the operator is configured otherwise.
DEFAULT_SIDECAR_PORT = 9090
#: The verdict watch on the report endpoint: a proxy sidecar learns of a change of its pod's verdict or approved
#: components at once, not at its next report (``?since=<etag>``: answered once the answer differs, or after a wait).
VERDICTS_PATH = "/v1/verdicts"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class WireError(LockstepError, ValueError):
    """A record between the operator and the sidecar that its reader cannot use."""


class SettingsError(WireError):
    """A ``LOCKSTEP_*`` variable the sidecar cannot use; the message names it."""


class AnswerError(WireError):
    """An answer of the operator the sidecar cannot use; the message names the part."""


# ---------------------------------------------------------------- the sidecar's environment


@dataclass(frozen=True)
class SidecarEnv:
    """The sidecar's settings as its ``LOCKSTEP_*`` environment carries them (one variable a field).

    The defaults are those the sidecar assumes for a variable that is unset or empty: the spec's
    (lockstep.core.spec), which the webhook writes out in full anyway.
    """

    #: LOCKSTEP_OPERATOR_URL: the operator's report endpoint base (required; no trailing slash).
    operator_url: str
    #: LOCKSTEP_MCP_PORT and LOCKSTEP_MCP_PATH: the MCP server in the pod, on 127.0.0.1.
    mcp_port: int = DEFAULT_PORT
    mcp_path: str = DEFAULT_PATH
    #: LOCKSTEP_MCP_URL: the whole MCP URL instead of port and path ("" : from port and path).
    mcp_url: str = ""
    #: LOCKSTEP_MCP_TRANSPORT: one of TRANSPORTS.
    transport: str = DEFAULT_TRANSPORT
    #: LOCKSTEP_INTERFACE: the MCPServerInterface's name ("" when none selected the pod at admission).
    interface: str = ""
    #: LOCKSTEP_PROBE_INTERVAL and LOCKSTEP_PROBE_TIMEOUT, seconds.
    interval: float = DEFAULT_INTERVAL
    timeout: float = DEFAULT_TIMEOUT
    #: LOCKSTEP_TOKEN_PATH: the projected service-account token.
    token_path: str = TOKEN_PATH
    #: LOCKSTEP_OPERATOR_CA: the PEM text of the CA of the report endpoint, or a file that holds it
    #: ("": the system's CAs).
    operator_ca: str = ""
    #: LOCKSTEP_HEADERS_DIR: one file per MCP request header (None: no headers).
    headers_dir: str | None = None
    #: LOCKSTEP_SIDECAR_PORT: the sidecar's /healthz and /metrics (0: any free port).
    port: int = DEFAULT_SIDECAR_PORT
    #: LOCKSTEP_PROXY_PORT: enforcement Quarantine, the in-line proxy's port (None: the probe only).
    proxy_port: int | None = None
    #: LOCKSTEP_PROBE_CLIENT_CAPABILITIES: what the probe announces (None: the sidecar's default).
    client_capabilities: tuple[str, ...] | None = None
    #: LOCKSTEP_PROXY_MODE: what the in-line proxy does with what is not approved: ``quarantine`` (withhold
    #: it) or ``isolate`` (refuse the answer, and every request while the pod's verdict is not True).
    proxy_mode: str = "quarantine"
    #: LOCKSTEP_POD_IP: the pod's own IP (the downward API's ``status.podIP``; "" when not known): the
    #: sidecar checks that the MCP server cannot be reached on it, past the proxy.
    pod_ip: str = ""

    @property
    def endpoint(self) -> str:
        """The MCP server's URL: LOCKSTEP_MCP_URL, or 127.0.0.1 at the port and path."""
        return self.mcp_url or f"http://127.0.0.1:{self.mcp_port}/{self.mcp_path.lstrip('/')}"

    def to_env(self) -> list[dict[str, str]]:
        """The container's ``env``: every variable the sidecar reads, empty ones included, in the order of
        ``lockstep.core.names.SIDECAR_ENV``. The kubelet's Service links inject ``<SERVICE>_PORT=tcp://...``
        for every Service in the namespace (a Service ``lockstep-proxy`` gives ``LOCKSTEP_PROXY_PORT``),
        and only a variable the container sets itself takes precedence over them. An empty one is written
        as the API server stores it (``EnvVar.value`` is omitempty), so that a re-invoked webhook finds
        exactly what it planned; the kubelet sets it to the empty string."""
        values = {
            ENV_MCP_URL: self.mcp_url,
            ENV_MCP_PORT: str(self.mcp_port),
            ENV_MCP_PATH: self.mcp_path,
            ENV_MCP_TRANSPORT: self.transport,
            ENV_INTERFACE: self.interface,
            ENV_PROBE_INTERVAL: _seconds(self.interval),
            ENV_PROBE_TIMEOUT: _seconds(self.timeout),
            ENV_OPERATOR_URL: self.operator_url,
            ENV_TOKEN_PATH: self.token_path,
            ENV_OPERATOR_CA: self.operator_ca,
            ENV_HEADERS_DIR: self.headers_dir or "",
            ENV_SIDECAR_PORT: str(self.port),
            ENV_PROXY_PORT: str(self.proxy_port) if self.proxy_port is not None else "",
            ENV_PROBE_CLIENT_CAPABILITIES: (format_client_capabilities(self.client_capabilities)
                                            if self.client_capabilities is not None else ""),
            ENV_PROXY_MODE: self.proxy_mode if self.proxy_port is not None else "",
            ENV_POD_IP: self.pod_ip,
        }
        env = [{"name": name, "value": value} if value else {"name": name} for name, value in values.items()]
        if not self.pod_ip:  # the kubelet fills it in: the webhook cannot know the pod's IP
            env[-1] = {"name": ENV_POD_IP, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SidecarEnv:
        """Read the environment (``os.environ``, or a container's ``env`` as a mapping); an unset or empty
        variable takes its default. Raises SettingsError naming the first variable it cannot use."""
        transport = env.get(ENV_MCP_TRANSPORT) or DEFAULT_TRANSPORT
        if transport not in TRANSPORTS:
            raise SettingsError(f"{ENV_MCP_TRANSPORT} must be one of {', '.join(TRANSPORTS)}, "
                                f"not {transport!r}")
        operator_url = env.get(ENV_OPERATOR_URL, "").rstrip("/")
        if not operator_url:
            raise SettingsError(f"{ENV_OPERATOR_URL} is not set")
        return cls(
            operator_url=operator_url,
            mcp_port=_port(env, ENV_MCP_PORT, DEFAULT_PORT),
            mcp_path=env.get(ENV_MCP_PATH) or DEFAULT_PATH,
            mcp_url=env.get(ENV_MCP_URL) or "",
            transport=transport,
            interface=env.get(ENV_INTERFACE, ""),
            interval=_positive(env, ENV_PROBE_INTERVAL, DEFAULT_INTERVAL),
            timeout=_positive(env, ENV_PROBE_TIMEOUT, DEFAULT_TIMEOUT),
            token_path=env.get(ENV_TOKEN_PATH) or TOKEN_PATH,
            operator_ca=env.get(ENV_OPERATOR_CA, ""),
            headers_dir=env.get(ENV_HEADERS_DIR) or None,
            port=_port(env, ENV_SIDECAR_PORT, DEFAULT_SIDECAR_PORT, lowest=0),  # 0: any free port (tests)
            proxy_port=_port(env, ENV_PROXY_PORT, None),
            client_capabilities=_client_capabilities(env),
            proxy_mode=_proxy_mode(env),
            pod_ip=_pod_ip(env),
        )


def _seconds(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def _number(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name)
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, not {raw!r}") from None
    if not math.isfinite(value):
        raise SettingsError(f"{name} must be a finite number, not {raw!r}")
    return value


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    value = _number(env, name)
    if value is None:
        return default
    if value <= 0:
        raise SettingsError(f"{name} must be positive, not {value}")
    return value


def _port(env: Mapping[str, str], name: str, default: int | None, *, lowest: int = 1) -> Any:
    value = _number(env, name)
    if value is None:
        return default
    if value != int(value) or not lowest <= value < 65536:
        raise SettingsError(f"{name} must be a port number, not {env[name]!r}")
    return int(value)


PROXY_MODES = ("quarantine", "isolate")


def _proxy_mode(env: Mapping[str, str]) -> str:
    mode = env.get(ENV_PROXY_MODE) or "quarantine"
    if mode not in PROXY_MODES:
        raise SettingsError(f"{ENV_PROXY_MODE} must be one of {', '.join(PROXY_MODES)}, not {mode!r}")
    return mode


def _pod_ip(env: Mapping[str, str]) -> str:
    raw = env.get(ENV_POD_IP, "").strip()
    if not raw:
        return ""
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        raise SettingsError(f"{ENV_POD_IP} must be an IP address, not {raw!r:.80}") from None


def _client_capabilities(env: Mapping[str, str]) -> tuple[str, ...] | None:
    """``sampling,elicitation,roots`` or ``none``; unset or empty: None (the sidecar's default)."""
    raw = env.get(ENV_PROBE_CLIENT_CAPABILITIES, "").strip()
    if not raw:
        return None
    try:
        return parse_client_capabilities(raw)
    except ValueError as error:
        raise SettingsError(f"{ENV_PROBE_CLIENT_CAPABILITIES}: {error}") from None


# ---------------------------------------------------------------- the operator's answer


@dataclass(frozen=True)
class ApprovedComponents:
    """What a pod's in-line proxy may let through: every component digest of the approved revisions (several
    per key when views differ), sorted, and the resource's ignore rules."""

    components: tuple[ComponentDigest, ...] = ()
    ignore: tuple[str, ...] = ()

    @classmethod
    def of(cls, revisions: Iterable[Revision], ignore: Iterable[str] = ()) -> ApprovedComponents:
        unique = {(c.kind.value, c.name, c.digest): c
                  for revision in revisions for c in revision.digest.components}
        return cls(tuple(unique[key] for key in sorted(unique)), tuple(ignore))

    def gate(self) -> ComponentGate:
        """The proxy's gate: a component passes when its digest is one of its key's approved digests."""
        return ComponentGate.of_components(self.components, self.ignore)

    def to_dict(self) -> dict[str, Any]:
        return {"ignore": list(self.ignore), "components": [entry.to_dict() for entry in self.components]}

    @classmethod
    def from_dict(cls, body: Any) -> ApprovedComponents:
        """Parse ``approved`` whole or not at all: AnswerError for anything but an object with a list of
        ``{kind, name, digest}`` entries (a known kind, strings, a sha256 digest) and a list of valid ignore
        rules."""
        if not isinstance(body, Mapping):
            raise AnswerError(f"approved must be an object, not {type(body).__name__}")
        entries, ignore = body.get("components"), body.get("ignore", [])
        if not isinstance(entries, list):
            raise AnswerError("approved.components must be a list of {kind, name, digest}")
        components = [_approved_component(entry) for entry in entries]
        if ignore is None:
            ignore = []
        if not isinstance(ignore, list) or not all(isinstance(pointer, str) for pointer in ignore):
            raise AnswerError("approved.ignore must be a list of JSON pointers")
        try:
            parse_ignore_rules(ignore)
        except LockstepError as error:
            raise AnswerError(f"approved.ignore: {error}") from None
        return cls(tuple(components), tuple(ignore))


def _approved_component(entry: Any) -> ComponentDigest:
    if not isinstance(entry, Mapping) or set(entry) != {"kind", "name", "digest"}:
        raise AnswerError(f"an approved component must be {{kind, name, digest}}, not {entry!r:.200}")
    kind, name, digest = entry["kind"], entry["name"], entry["digest"]
    if not isinstance(name, str) or not isinstance(digest, str) or not _DIGEST.match(digest):
        raise AnswerError(f"an approved component needs a name string and a sha256 digest, "
                          f"not {entry!r:.200}")
    try:
        return ComponentDigest(ComponentKind(kind), name, digest)
    except ValueError:
        raise AnswerError(f"unknown component kind {kind!r:.50} in approved") from None


@dataclass(frozen=True)
class AnswerVerdict:
    """The pod condition the report led to (``lockstep.dev/interface-verified``)."""

    status: str
    reason: str
    message: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason, "message": self.message}

    @classmethod
    def from_dict(cls, body: Any) -> AnswerVerdict:
        if not isinstance(body, Mapping):
            raise AnswerError("verdict must be an object {status, reason, message}")
        status, reason, message = body.get("status"), body.get("reason"), body.get("message", "")
        if not all(isinstance(value, str) for value in (status, reason, message)):
            raise AnswerError("verdict needs status, reason and message strings")
        return cls(str(status), str(reason), str(message))


@dataclass(frozen=True)
class ReportAnswer:
    """The operator's 202 answer to a report."""

    verdict: AnswerVerdict
    #: The operator takes digest-only reports (an older one, or one after a rollback, does not say so).
    digests: bool = False
    #: To a sidecar that runs the in-line proxy: what it may let through (None: keep the gate it has).
    approved: ApprovedComponents | None = None
    #: With several operator replicas: the address (``ip:port``) of the one that owns the pod and judged
    #: this report. The sidecar sends its next report straight there, verifying the same certificate
    #: name as the Service's, and goes back to the Service when that fails (None: through the Service).
    report_to: ReplicaAddress | None = None
    #: Seconds the verdict stands without another True (the resource's ``spec.probe.staleAfter``): a proxy that
    #: has had no True answer for this long isolates itself, as the operator marks the pod ReportStale. None:
    #: an operator that does not say (the sidecar assumes the spec's default for its interval).
    stale_after: float | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"verdict": self.verdict.to_dict(), "digests": self.digests}
        if self.approved is not None:
            body["approved"] = self.approved.to_dict()
        if self.report_to is not None:
            body["reportTo"] = str(self.report_to)
        if self.stale_after is not None:
            body["staleAfter"] = self.stale_after
        return body

    @classmethod
    def from_dict(cls, body: Any) -> ReportAnswer:
        """Parse an answer; AnswerError when any part of it cannot be used."""
        if not isinstance(body, Mapping):
            raise AnswerError("the answer must be a JSON object")
        digests = body.get("digests", False)
        if not isinstance(digests, bool):
            raise AnswerError(f"digests must be true or false, not {digests!r:.50}")
        approved = body.get("approved")
        return cls(AnswerVerdict.from_dict(body.get("verdict")), digests,
                   None if approved is None else ApprovedComponents.from_dict(approved),
                   _report_to(body.get("reportTo")), _stale_after(body.get("staleAfter")))


def _stale_after(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise AnswerError(f"staleAfter must be a positive number of seconds, not {value!r:.50}")
    return float(value)


@dataclass(frozen=True)
class VerdictNotice:
    """The answer to a verdict watch: the pod's verdict as the operator holds it now, and what its proxy may let
    through (None: none or several resources select the pod, the proxy withholds everything). ``etag`` names
    this answer; a watch that sends it back is answered when the answer differs."""

    verdict: AnswerVerdict
    approved: ApprovedComponents | None
    etag: str

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"verdict": self.verdict.to_dict(), "etag": self.etag}
        if self.approved is not None:
            body["approved"] = self.approved.to_dict()
        return body

    @classmethod
    def from_dict(cls, body: Any) -> VerdictNotice:
        """AnswerError when any part cannot be used (the notice is then ignored whole)."""
        if not isinstance(body, Mapping):
            raise AnswerError("the notice must be a JSON object")
        etag, approved = body.get("etag"), body.get("approved")
        if not isinstance(etag, str) or not 0 < len(etag) <= 128:
            raise AnswerError("the notice needs an etag string")
        return cls(AnswerVerdict.from_dict(body.get("verdict")),
                   None if approved is None else ApprovedComponents.from_dict(approved), etag)


def _report_to(value: Any) -> ReplicaAddress | None:
    """An IP address and port, as a replica publishes its own (a name would send reports through DNS)."""
    if value is None:
        return None
    try:
        return ReplicaAddress.parse(value)
    except AddressError as error:
        raise AnswerError(f"reportTo: {error}") from None
