"""What the mutating webhook adds to a pod: pure planning, no I/O.

:func:`plan_injection` takes the pod as the API server sent it, the operator's
sidecar settings and the endpoint of the MCPServerInterface that applies, and
returns RFC 6902 JSON Patch operations that add, each only when it is missing:

* the readiness gate ``lockstep.dev/interface-verified``;
* a projected service-account token volume (audience ``lockstep.dev``), mounted
  into the sidecar only, and a Secret volume of MCP request headers when the
  interface names one;
* the native sidecar: an init container with ``restartPolicy: Always``, appended
  after the pod's own init containers, non-root, read-only root filesystem, no
  capabilities, no privilege escalation, seccomp ``RuntimeDefault``. In
  enforcement Isolate and Quarantine it also runs the in-line proxy: it declares
  the container port ``lockstep-mcp`` and gets ``LOCKSTEP_PROXY_PORT`` and
  ``LOCKSTEP_PROXY_MODE``; every sidecar gets the pod's IP (downward API) to check
  that the MCP server cannot be reached past the proxy.

:func:`hardening_ops` closes raw networking in the application's containers (security
review 2, S6-10): each container that does not drop ``NET_RAW`` (or ``ALL``) gets
``NET_RAW`` added to ``capabilities.drop``, and one that does not say
``allowPrivilegeEscalation`` gets ``false``. A container that says
``allowPrivilegeEscalation: true`` (or adds NET_RAW) is not rewritten: the pod is
refused with the field named (lockstep.operator.admission_policy), since the author
asked for what Lockstep cannot allow and a silent rewrite would break it at run time.

Planning twice gives nothing the second time: every piece is found by its name
(container, volume) or its condition type (gate) before it is added, and a hardened
container needs nothing more. The pod's own security context is never touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lockstep.core.conditions import CONDITION_TYPE
from lockstep.core.names import (
    ENV_PROXY_MODE,
    HEADERS_DIR,
    INJECT_LABEL,
    INTERFACE_ANNOTATION,
    PROXY_PORT_NAME,
    SIDECAR_NAME,
    TOKEN_AUDIENCE,
    TOKEN_DIR,
    TOKEN_PATH,
)
from lockstep.core.selection import selector_matches
from lockstep.core.spec import (
    Binding,
    BindingError,
    parse_duration,
    probe_interval,
    probe_stale_after,
    probe_timeout,
    proxy_port,
)
from lockstep.core.wire import DEFAULT_SIDECAR_PORT, SettingsError, SidecarEnv

__all__ = [
    "DEFAULT_SIDECAR_PORT",
    "HEADERS_DIR",
    "HEADERS_VOLUME",
    "INJECT_LABEL",
    "INTERFACE_ANNOTATION",
    "PROXY_PORT_NAME",
    "READINESS_GATE",
    "SIDECAR_NAME",
    "SIDECAR_PORT_NAME",
    "TOKEN_AUDIENCE",
    "TOKEN_DIR",
    "TOKEN_VOLUME",
    "AdmittedBinding",
    "Binding",
    "BindingError",
    "InjectionSettings",
    "admitted_binding",
    "drops_raw_network",
    "hardening_ops",
    "parse_duration",
    "plan_injection",
    "planned_sidecar",
    "planned_token_volume",
    "probe_interval",
    "probe_stale_after",
    "probe_timeout",
    "proxy_port",
    "selector_matches",
]

# Names (INJECT_LABEL, SIDECAR_NAME, TOKEN_DIR...) are lockstep.core.names', the spec's parsing (Binding,
# parse_duration, proxy_port...) lockstep.core.spec's, selector_matches lockstep.core.selection's; all stay
# importable from here.
READINESS_GATE = CONDITION_TYPE  # the gate waits for the condition the operator writes
SIDECAR_PORT_NAME = "lockstep-http"  # the sidecar's /healthz and /metrics
TOKEN_VOLUME = "lockstep-token"
HEADERS_VOLUME = "lockstep-headers"
NO_API_TOKEN_VOLUME = "lockstep-no-api-token"
API_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
NONROOT_ID = 65532  # the image's numeric user, so runAsNonRoot can verify it
#: World-readable: without an fsGroup, or one runAsUser shared by every container, the kubelet writes
#: projected and Secret volume files as root:root with this mode, and the sidecar runs as NONROOT_ID.
#: Only the sidecar mounts these volumes, so no other container can read them whatever the mode.
SIDECAR_FILE_MODE = 0o444
MIN_TOKEN_EXPIRATION = 600  # the API server refuses projected tokens shorter than 10 minutes

JSONPatchOp = dict[str, Any]


@dataclass(frozen=True)
class InjectionSettings:
    """Operator-wide settings of the injected sidecar (its environment is lockstep.core.wire.SidecarEnv)."""

    image: str
    report_url: str
    operator_ca: str = ""  # PEM text of the CA that signs the operator's report endpoint
    resources: Mapping[str, Any] = field(default_factory=dict)
    token_expiration_seconds: int = 3600
    port: int = DEFAULT_SIDECAR_PORT
    image_pull_policy: str = "IfNotPresent"


def plan_injection(pod: Mapping[str, Any], settings: InjectionSettings, binding: Binding) -> list[JSONPatchOp]:
    """JSON Patch operations that inject Lockstep into ``pod``; empty when it is already injected."""
    spec = pod.get("spec") or {}
    gates = [] if _has_gate(spec) else [{"conditionType": READINESS_GATE}]
    volumes = _missing_volumes(spec, settings, binding)
    sidecars = [] if _has_named(spec.get("initContainers"), SIDECAR_NAME) else [
        _sidecar_container(spec, settings, binding)]
    ops: list[JSONPatchOp] = []
    ops += _append_ops(spec, "readinessGates", gates)
    ops += _append_ops(spec, "volumes", volumes)
    ops += _append_ops(spec, "initContainers", sidecars)
    return ops


#: Capabilities whose drop closes raw and packet sockets (``ALL`` includes NET_RAW).
RAW_NETWORK_DROPS = frozenset({"NET_RAW", "ALL"})
CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")


def drops_raw_network(security: Mapping[str, Any]) -> bool:
    """Whether a container's securityContext drops NET_RAW (or ALL)."""
    drops = (security.get("capabilities") or {}).get("drop") or []
    return any(str(cap).upper().removeprefix("CAP_") in RAW_NETWORK_DROPS for cap in drops)


def hardening_ops(pod: Mapping[str, Any]) -> list[JSONPatchOp]:
    """JSON Patch operations that make every container of ``pod`` but the sidecar drop NET_RAW and set
    ``allowPrivilegeEscalation: false`` where it is absent; empty when none needs it."""
    spec = pod.get("spec") or {}
    ops: list[JSONPatchOp] = []
    for kind in CONTAINER_KINDS:
        for index, container in enumerate(spec.get(kind) or []):
            if container.get("name") != SIDECAR_NAME:
                ops += _hardening(f"/spec/{kind}/{index}/securityContext", container.get("securityContext"))
    return ops


def _hardening(path: str, security: Mapping[str, Any] | None) -> list[JSONPatchOp]:
    if security is None:
        return [{"op": "add", "path": path,
                 "value": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["NET_RAW"]}}}]
    ops: list[JSONPatchOp] = []
    if security.get("allowPrivilegeEscalation") is None:
        ops.append({"op": "add", "path": f"{path}/allowPrivilegeEscalation", "value": False})
    if not drops_raw_network(security):
        capabilities = security.get("capabilities")
        if capabilities is None:
            ops.append({"op": "add", "path": f"{path}/capabilities", "value": {"drop": ["NET_RAW"]}})
        elif capabilities.get("drop") is None:
            ops.append({"op": "add", "path": f"{path}/capabilities/drop", "value": ["NET_RAW"]})
        else:
            ops.append({"op": "add", "path": f"{path}/capabilities/drop/-", "value": "NET_RAW"})
    return ops


@dataclass(frozen=True)
class AdmittedBinding:
    """What a pod's injected sidecar was planned for at admission, read back from its environment: the operator
    compares it with the interface that selects the pod now (a pod relabelled into an Isolate interface after
    being admitted without one has no proxy, S6-6)."""

    interface: str
    mcp_port: int
    #: None: the sidecar runs no in-line proxy.
    proxy_port: int | None
    proxy_mode: str
    #: The environment could not be read (someone else's sidecar, or a newer one): never matches.
    unreadable: str = ""
    #: Injected by a Lockstep before 0.2.0 (no LOCKSTEP_PROXY_MODE at all: that webhook gave Isolate no proxy and
    #: the application's containers no NET_RAW drop). Such a pod predates the upgrade and is replaced by the
    #: restart the upgrade asks for (docs/upgrades.md); until then it is judged as that release judged it.
    legacy: bool = False


def admitted_binding(pod: Mapping[str, Any]) -> AdmittedBinding | None:
    """The binding of ``pod``'s sidecar (its init container named SIDECAR_NAME); None when it has none."""
    for container in (pod.get("spec") or {}).get("initContainers") or []:
        if isinstance(container, Mapping) and container.get("name") == SIDECAR_NAME:
            env = {str(item.get("name")): str(item.get("value", "")) for item in container.get("env") or []
                   if isinstance(item, Mapping) and "valueFrom" not in item}
            try:
                read = SidecarEnv.from_env(env)
            except SettingsError as error:
                return AdmittedBinding("", 0, None, "", unreadable=str(error))
            return AdmittedBinding(read.interface, read.mcp_port, read.proxy_port,
                                   read.proxy_mode if read.proxy_port is not None else "",
                                   legacy=not any(isinstance(item, Mapping) and item.get("name") == ENV_PROXY_MODE
                                                  for item in container.get("env") or []))
    return None


def planned_sidecar(pod: Mapping[str, Any], settings: InjectionSettings, binding: Binding) -> dict[str, Any]:
    """The exact sidecar container Lockstep injects into ``pod`` (planned as if none were there)."""
    spec = dict(pod.get("spec") or {})
    spec["initContainers"] = [c for c in spec.get("initContainers") or [] if c.get("name") != SIDECAR_NAME]
    return _sidecar_container(spec, settings, binding)


def planned_token_volume(settings: InjectionSettings) -> dict[str, Any]:
    return _token_volume(settings)


def _append_ops(spec: Mapping[str, Any], key: str, items: Sequence[Any]) -> list[JSONPatchOp]:
    if not items:
        return []
    if spec.get(key) is None:
        return [{"op": "add", "path": f"/spec/{key}", "value": list(items)}]
    return [{"op": "add", "path": f"/spec/{key}/-", "value": item} for item in items]


def _has_gate(spec: Mapping[str, Any]) -> bool:
    return any(gate.get("conditionType") == READINESS_GATE for gate in spec.get("readinessGates") or [])


def _has_named(entries: Sequence[Mapping[str, Any]] | None, name: str) -> bool:
    return any(entry.get("name") == name for entry in entries or [])


def _missing_volumes(spec: Mapping[str, Any], settings: InjectionSettings,
                     binding: Binding) -> list[dict[str, Any]]:
    wanted = [_token_volume(settings), _no_api_token_volume()]
    if binding.headers_secret:
        wanted.append({"name": HEADERS_VOLUME,
                       "secret": {"secretName": binding.headers_secret, "defaultMode": SIDECAR_FILE_MODE}})
    return [volume for volume in wanted if not _has_named(spec.get("volumes"), volume["name"])]


def _no_api_token_volume() -> dict[str, Any]:
    """An empty, read-only volume over the API token path in the sidecar. The service-account admission
    plugin (which runs after the webhooks) mounts ``kube-api-access`` into every container that does not
    already mount that path; this keeps the sidecar free of any Kubernetes API credential without
    touching the application's containers or ``automountServiceAccountToken``."""
    return {"name": NO_API_TOKEN_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Ki"}}


def _token_volume(settings: InjectionSettings) -> dict[str, Any]:
    token = {"audience": TOKEN_AUDIENCE, "path": "token",
             "expirationSeconds": max(MIN_TOKEN_EXPIRATION, settings.token_expiration_seconds)}
    return {"name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": token}],
                                                "defaultMode": SIDECAR_FILE_MODE}}


def _sidecar_container(spec: Mapping[str, Any], settings: InjectionSettings,
                       binding: Binding) -> dict[str, Any]:
    mcp_port = _resolve_port(spec, binding.port)
    if binding.proxy_port is not None and binding.proxy_port in {mcp_port, *_declared_ports(spec).values()}:
        raise BindingError(f"spec.proxy.port {binding.proxy_port} is a port of the pod already; the proxy needs "
                           "its own (the MCP server listens on 127.0.0.1 at the endpoint port)")
    port = _free_port(spec, settings.port, avoid=mcp_port, also=binding.proxy_port)
    mounts = [{"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True},
              {"name": NO_API_TOKEN_VOLUME, "mountPath": API_TOKEN_DIR, "readOnly": True}]
    if binding.headers_secret:
        mounts.append({"name": HEADERS_VOLUME, "mountPath": HEADERS_DIR, "readOnly": True})
    container: dict[str, Any] = {
        "name": SIDECAR_NAME,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": ["sidecar"],
        "restartPolicy": "Always",
        "env": _sidecar_env(settings, binding, mcp_port, port),
        "ports": [{"name": SIDECAR_PORT_NAME, "containerPort": port, "protocol": "TCP"}],
        # Liveness only: a startup or readiness probe that waited for the MCP server would hold the
        # application's containers back (they start after the sidecar has started) and deadlock.
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": port},
                          "periodSeconds": 20, "timeoutSeconds": 3, "failureThreshold": 3},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NONROOT_ID,
            "runAsGroup": NONROOT_ID,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if binding.proxy_port is not None:
        container["ports"].append({"name": PROXY_PORT_NAME, "containerPort": binding.proxy_port, "protocol": "TCP"})
    if settings.resources:
        container["resources"] = dict(settings.resources)
    return container


def _sidecar_env(settings: InjectionSettings, binding: Binding, mcp_port: int,
                 port: int) -> list[dict[str, str]]:
    """Every variable the sidecar reads, empty ones included (SidecarEnv.to_env says why)."""
    return SidecarEnv(
        operator_url=settings.report_url,
        mcp_port=mcp_port,
        mcp_path=binding.path,
        transport=binding.transport,
        interface=binding.interface,
        interval=binding.interval_seconds,
        timeout=binding.timeout_seconds,
        token_path=TOKEN_PATH,
        operator_ca=settings.operator_ca,
        headers_dir=HEADERS_DIR if binding.headers_secret else None,
        port=port,
        proxy_port=binding.proxy_port,
        client_capabilities=binding.client_capabilities,
        proxy_mode="isolate" if binding.proxy_port is not None and binding.enforcement == "Isolate" else "quarantine",
    ).to_env()


def _declared_ports(spec: Mapping[str, Any]) -> dict[str, int]:
    """Container ports of the pod, by name (unnamed ones under their number)."""
    ports: dict[str, int] = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for port in container.get("ports") or []:
            number = int(port.get("containerPort", 0))
            ports[str(port.get("name") or number)] = number
    return ports


def _resolve_port(spec: Mapping[str, Any], port: int | str) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    named = _declared_ports(spec)
    if port not in named:
        raise BindingError(f"the pod declares no container port named {port!r}")
    return named[port]


def _free_port(spec: Mapping[str, Any], preferred: int, avoid: int, also: int | None = None) -> int:
    """The sidecar's port: ``preferred`` unless the MCP server, the proxy or a container of the pod uses it."""
    taken = set(_declared_ports(spec).values()) | {avoid} | ({also} if also is not None else set())
    port = preferred
    while port in taken:
        port += 1
    return port
