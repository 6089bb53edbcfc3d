"""What a pod in an opted-in scope may not do: pure checks, no I/O, used by the pod webhooks.

Each check closes a side door by which a pod author could get a pod Ready without a genuine verified
report (docs/threat-model.md):

* opting out (``lockstep.dev/inject: disabled``) where the platform does not allow it;
* a container that claims the sidecar's name but is not exactly what Lockstep injects (it would be
  skipped by the injection and report the approved digests with a real token);
* a projected token for audience ``lockstep.dev`` anywhere but the injected sidecar (the application
  could authenticate as the pod's sidecar);
* ``shareProcessNamespace`` (the application could read the sidecar's token through /proc);
* ``hostNetwork`` (the sidecar would probe whatever listens on the node's loopback);
* on UPDATE: a changed sidecar (a pod's image is mutable), and ephemeral containers that mount the
  token or target the sidecar;
* raw networking (:func:`raw_network_violations`): a container that keeps NET_RAW, or may gain privileges (a
  file capability through exec), can read the agents' packets on the pod's interface and forge the MCP
  server's answer past the in-line proxy (security review 2, S6-10); the webhook adds the drop and
  ``allowPrivilegeEscalation: false`` where they are absent (lockstep.operator.injection.hardening_ops);
* Lockstep's markers on a pod it does not inject (:func:`lockstep_markers`): an opted-out pod may not carry
  the readiness gate ``lockstep.dev/interface-verified``, a container named ``lockstep-sidecar`` or a
  ``lockstep.dev`` token (it would gate itself on a counterfeit's reports, S6-9), and an injected pod may not
  opt out later; the operator never verifies an opted-out pod (:func:`pod_violations`);
* anything the Pod Security Standards' ``baseline`` profile forbids (:func:`baseline_violations`): host
  namespaces, ``hostPath`` volumes, privileged containers, added capabilities beyond the baseline list,
  ``hostPort``, ``procMount: Unmasked``, Windows host processes, unconfined seccomp or AppArmor, custom
  SELinux users, roles and types, unsafe sysctls. Each reaches the sidecar's files or the node: a
  container beside the sidecar could read its token.

:func:`pod_violations` judges a live pod body (one admitted while the webhook was off, say): the operator
never judges such a pod verified.

The binding rule (:func:`weaker_than`): the ``lockstep.dev/interface`` annotation may pick an interface
only if it is at least as strict as every interface whose selector matches the pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockstep.operator.injection import (
    CONTAINER_KINDS,
    INJECT_LABEL,
    PROXY_PORT_NAME,
    READINESS_GATE,
    SIDECAR_NAME,
    TOKEN_AUDIENCE,
    TOKEN_VOLUME,
    drops_raw_network,
)

from lockstep.core.enforcement import strictness as rank
from lockstep.core.selection import is_stricter

__all__ = ["BASELINE_CAPABILITIES", "AdmissionPolicy", "as_injected", "baseline_violations", "lockstep_markers",
           "opted_out", "pod_violations", "raw_network_violations", "strictness", "update_violations", "violations",
           "weaker_than"]

#: What every refusal of the baseline rules starts with (after the field).
BASELINE = "Lockstep enforces Pod Security baseline on pods it guards"
#: Capabilities a container may add under the Pod Security Standards' baseline profile.
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
#: Sysctls the baseline profile allows (the "safe" set of Kubernetes 1.32).
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
APPARMOR_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


@dataclass(frozen=True)
class AdmissionPolicy:
    """The platform's settings (chart values ``webhook.allowOptOut``, operator ``--allow-opt-out``)."""

    #: Namespaces where a pod may opt out with ``lockstep.dev/inject: disabled``; "*" allows every one.
    allow_opt_out: frozenset[str] = frozenset()

    def may_opt_out(self, namespace: str) -> bool:
        return "*" in self.allow_opt_out or namespace in self.allow_opt_out


def opted_out(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(INJECT_LABEL) == "disabled"


def violations(pod: Mapping[str, Any], *, planned_sidecar: Mapping[str, Any] | None,
               planned_token_volume: Mapping[str, Any] | None) -> list[str]:
    """Why ``pod`` (as it will be stored, after injection) may not run in an opted-in scope; empty when
    it may. ``planned_*`` is what Lockstep injects for this pod (None: compare names only)."""
    spec = pod.get("spec") or {}
    problems: list[str] = []
    if spec.get("hostNetwork"):
        problems.append("spec.hostNetwork: a host-network pod shares the node's loopback, so its sidecar "
                        "would probe whatever listens on the node; Lockstep refuses it")
    if spec.get("shareProcessNamespace"):
        problems.append("spec.shareProcessNamespace: the application's containers could read the sidecar's "
                        "token through /proc; Lockstep refuses it")
    problems += _container_problems(spec, planned_sidecar)
    problems += _token_problems(spec, planned_token_volume)
    problems += raw_network_violations(pod)
    problems += baseline_violations(pod)
    return problems


def pod_violations(pod: Mapping[str, Any], *, legacy_sidecar: bool = False) -> list[str]:
    """Why a live pod (as stored) cannot be trusted to hold the sidecar's token alone, or is not Lockstep's to
    verify; empty when it can be verified.

    The same rules as admission, without the comparison to what Lockstep would inject today (a live
    pod's sidecar was planned with the settings of its admission): for the operator, which never judges
    such a pod verified, whatever admitted it (a webhook that was off, or set to Ignore). A pod that opted
    out is never verified either, whatever it carries. ``legacy_sidecar``: a pod injected before 0.2.0
    (lockstep.operator.injection.AdmittedBinding.legacy), admitted before the raw-network rule existed: it is
    left to the restart the upgrade asks for."""
    problems = violations(pod, planned_sidecar=None, planned_token_volume=None)
    if legacy_sidecar:
        raw = set(raw_network_violations(pod))
        problems = [problem for problem in problems if problem not in raw]
    if opted_out(pod):
        problems.insert(0, f"metadata.labels[{INJECT_LABEL}]: the pod opted out of Lockstep, which never verifies "
                           "it")
    return problems


#: Why every container of a guarded pod drops NET_RAW and may not gain privileges.
RAW_NETWORK = ("Lockstep requires capabilities.drop to contain NET_RAW (or ALL) and allowPrivilegeEscalation: false "
               "in every container of a pod it guards (with NET_RAW, or a capability gained through exec, a "
               "container can read the agents' packets and forge the MCP server's answer past the in-line proxy)")


def raw_network_violations(pod: Mapping[str, Any]) -> list[str]:
    """The containers (init, regular, ephemeral) of ``pod`` that keep NET_RAW or may gain privileges."""
    problems = []
    for kind, index, container in _containers(pod.get("spec") or {}):
        security = container.get("securityContext") or {}
        missing = ([] if drops_raw_network(security) else ["capabilities.drop lacks NET_RAW"]) + (
            [] if security.get("allowPrivilegeEscalation") is False else ["allowPrivilegeEscalation is not false"])
        if missing:
            problems.append(f"spec.{kind}[{index}].securityContext ({', '.join(missing)}): {RAW_NETWORK}")
    return problems


def lockstep_markers(pod: Mapping[str, Any]) -> list[str]:
    """What only a pod Lockstep injects may carry, found in ``pod``: the readiness gate, a container named like
    the sidecar, the token volume or any projected token for audience lockstep.dev."""
    spec = pod.get("spec") or {}
    found = []
    if any(gate.get("conditionType") == READINESS_GATE for gate in spec.get("readinessGates") or []):
        found.append(f"spec.readinessGates: {READINESS_GATE} is Lockstep's readiness gate")
    found += [f"spec.{kind}[{index}].name: {SIDECAR_NAME} is the name of the sidecar Lockstep injects"
              for kind, index, container in _containers(spec) if container.get("name") == SIDECAR_NAME]
    for index, volume in enumerate(spec.get("volumes") or []):
        if volume.get("name") == TOKEN_VOLUME or TOKEN_AUDIENCE in _audiences(volume):
            found.append(f"spec.volumes[{index}] ({volume.get('name')}): a token for audience {TOKEN_AUDIENCE} is "
                         "for the sidecar Lockstep injects")
    return found


def _audiences(volume: Mapping[str, Any]) -> list[Any]:
    return [source["serviceAccountToken"].get("audience")
            for source in (volume.get("projected") or {}).get("sources") or []
            if isinstance(source, Mapping) and isinstance(source.get("serviceAccountToken"), Mapping)]


def _refuse(where: str, rule: str) -> str:
    return f"{where}: {BASELINE}: {rule}"


def baseline_violations(pod: Mapping[str, Any]) -> list[str]:
    """What the Pod Security Standards' ``baseline`` profile forbids in ``pod`` (hostNetwork is refused
    by :func:`violations` with its own reason), each naming the field and the rule."""
    spec = pod.get("spec") or {}
    problems: list[str] = []
    for field in ("hostPID", "hostIPC"):
        if spec.get(field):
            problems.append(_refuse(f"spec.{field}", "host namespaces are not allowed (a container could reach "
                                                     "the sidecar's processes and files through the host's)"))
    for index, volume in enumerate(spec.get("volumes") or []):
        if isinstance(volume, Mapping) and volume.get("hostPath") is not None:
            path = (volume.get("hostPath") or {}).get("path", "")
            problems.append(_refuse(f"spec.volumes[{index}].hostPath ({volume.get('name')}: {path})",
                                    "hostPath volumes are not allowed (the node's files include every pod's "
                                    "projected tokens)"))
    context = spec.get("securityContext") or {}
    problems += _context_problems("spec.securityContext", context)
    for index, (name, value) in enumerate((item.get("name"), item.get("value"))
                                          for item in context.get("sysctls") or [] if isinstance(item, Mapping)):
        if name not in SAFE_SYSCTLS:
            problems.append(_refuse(f"spec.securityContext.sysctls[{index}] ({name}={value})",
                                    f"only the safe sysctls are allowed ({', '.join(sorted(SAFE_SYSCTLS))})"))
    for key, value in ((pod.get("metadata") or {}).get("annotations") or {}).items():
        if str(key).startswith(APPARMOR_PREFIX) and value not in ("runtime/default", "") \
                and not str(value).startswith("localhost/"):
            problems.append(_refuse(f"metadata.annotations[{key}]", "AppArmor may not be unconfined"))
    for kind, index, container in _containers(spec):
        where = f"spec.{kind}[{index}]"
        security = container.get("securityContext") or {}
        if security.get("privileged"):
            problems.append(_refuse(f"{where}.securityContext.privileged", "privileged containers are not "
                                                                           "allowed"))
        added = [str(cap) for cap in (security.get("capabilities") or {}).get("add") or []]
        beyond = [cap for cap in added if cap.upper().removeprefix("CAP_") not in BASELINE_CAPABILITIES]
        if beyond:
            problems.append(_refuse(f"{where}.securityContext.capabilities.add ({', '.join(beyond)})",
                                    "only these capabilities may be added: "
                                    + ", ".join(sorted(BASELINE_CAPABILITIES))))
        if security.get("procMount") not in (None, "", "Default"):
            problems.append(_refuse(f"{where}.securityContext.procMount ({security.get('procMount')})",
                                    "procMount must be Default (an unmasked /proc exposes the node)"))
        problems += _context_problems(f"{where}.securityContext", security)
        for port_index, port in enumerate(container.get("ports") or []):
            if isinstance(port, Mapping) and port.get("hostPort"):
                problems.append(_refuse(f"{where}.ports[{port_index}].hostPort ({port.get('hostPort')})",
                                        "host ports are not allowed"))
    return problems


def _context_problems(where: str, context: Mapping[str, Any]) -> list[str]:
    """The rules a pod's and a container's securityContext share."""
    problems = []
    if (context.get("windowsOptions") or {}).get("hostProcess"):
        problems.append(_refuse(f"{where}.windowsOptions.hostProcess", "Windows host processes are not allowed"))
    if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
        problems.append(_refuse(f"{where}.seccompProfile.type", "seccomp may not be Unconfined"))
    if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
        problems.append(_refuse(f"{where}.appArmorProfile.type", "AppArmor may not be Unconfined"))
    selinux = context.get("seLinuxOptions") or {}
    if selinux.get("type", "") not in SELINUX_TYPES:
        problems.append(_refuse(f"{where}.seLinuxOptions.type ({selinux.get('type')})",
                                "the SELinux type must be one of " + ", ".join(sorted(SELINUX_TYPES - {""}))))
    for field in ("user", "role"):
        if selinux.get(field):
            problems.append(_refuse(f"{where}.seLinuxOptions.{field}", "a custom SELinux user or role is not "
                                                                       "allowed"))
    return problems


def _containers(spec: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    return [(kind, index, container) for kind in CONTAINER_KINDS
            for index, container in enumerate(spec.get(kind) or [])]


def _container_problems(spec: Mapping[str, Any], planned: Mapping[str, Any] | None) -> list[str]:
    problems = []
    for kind, index, container in _containers(spec):
        where = f"spec.{kind}[{index}]"
        if container.get("name") == SIDECAR_NAME:
            if kind != "initContainers":
                problems.append(f"{where}.name: {SIDECAR_NAME} is reserved for the sidecar Lockstep injects")
            elif planned is not None and not as_injected(container, planned):
                differing = sorted(key for key in {*container, *planned}
                                   if not _defaulted(container.get(key), planned.get(key), key))
                problems.append(f"{where}: a container named {SIDECAR_NAME} that Lockstep did not inject "
                                f"(differs in {', '.join(differing)})")
        elif container.get("targetContainerName") == SIDECAR_NAME:
            problems.append(f"{where}.targetContainerName: no container may join the sidecar's process namespace")
        if container.get("name") != SIDECAR_NAME and any(
                isinstance(port, Mapping) and port.get("name") == PROXY_PORT_NAME for port in container.get("ports") or []):
            # A Service that targets the name could reach this container instead of the in-line proxy.
            problems.append(f"{where}.ports: the port name {PROXY_PORT_NAME} is reserved for the sidecar's proxy")
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") == TOKEN_VOLUME and container.get("name") != SIDECAR_NAME:
                problems.append(f"{where}.volumeMounts: only the sidecar may mount {TOKEN_VOLUME}")
    return problems


def _token_problems(spec: Mapping[str, Any], planned: Mapping[str, Any] | None) -> list[str]:
    problems = []
    for index, volume in enumerate(spec.get("volumes") or []):
        audiences = _audiences(volume)
        if volume.get("name") == TOKEN_VOLUME:
            if planned is not None and not as_injected(volume, planned):
                problems.append(f"spec.volumes[{index}]: a volume named {TOKEN_VOLUME} that Lockstep did not inject")
        elif TOKEN_AUDIENCE in audiences:
            problems.append(f"spec.volumes[{index}] ({volume.get('name')}): a projected token for audience "
                            f"{TOKEN_AUDIENCE} is for the injected sidecar only")
    return problems


#: Top-level container fields the API server fills in when they are absent (object defaulting runs
#: between mutating webhooks, so a reinvoked webhook sees them on the sidecar it injected).
SERVER_DEFAULTED = {"terminationMessagePath": "/dev/termination-log", "resources": {}}


def as_injected(actual: Mapping[str, Any], planned: Mapping[str, Any]) -> bool:
    """``actual`` is ``planned`` as the API server stores it: every planned field, values that only gain
    defaulted nested fields, and no other top-level field than the server's own defaults. A ``command``
    or ``envFrom`` added to a sidecar-named container would redirect it, so those are differences."""
    return all(_defaulted(actual.get(key), planned.get(key), key) for key in {*actual, *planned})


def _defaulted(actual: Any, planned: Any, key: str = "") -> bool:
    """``actual`` equals ``planned`` up to fields the API server adds: top-level ones named in
    SERVER_DEFAULTED, and any nested field (probe thresholds, ``httpGet.scheme``)."""
    if planned is None:
        return key in SERVER_DEFAULTED and actual in (None, SERVER_DEFAULTED[key])
    if isinstance(planned, Mapping):
        return isinstance(actual, Mapping) and all(_defaulted(actual.get(k), v) for k, v in planned.items())
    if isinstance(planned, list):
        return isinstance(actual, list) and len(actual) == len(planned) and \
            all(_defaulted(a, b) for a, b in zip(actual, planned))
    return bool(actual == planned)


def update_violations(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why an UPDATE (or an ephemeral-containers change) of an injected pod is refused."""
    def sidecar(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
        for container in (pod.get("spec") or {}).get("initContainers") or []:
            if container.get("name") == SIDECAR_NAME:
                return dict(container)
        return None

    problems = []
    if sidecar(old) != sidecar(new):
        problems.append(f"spec.initContainers ({SIDECAR_NAME}): the injected sidecar cannot be changed "
                        "(re-create the pod instead)")
    if sidecar(old) is not None and opted_out(new) and not opted_out(old):
        problems.append(f"metadata.labels[{INJECT_LABEL}]: a pod Lockstep injected cannot opt out (re-create it "
                        "without the sidecar instead)")
    # The baseline and raw-network rules refuse what an UPDATE adds (a privileged ephemeral container, say), not
    # what the pod had already: a pod admitted before them must still take its controllers' metadata updates
    # (finalizers, owner references). The operator never judges such a pod verified (pod_violations).
    before = set(baseline_violations(old)) | set(raw_network_violations(old))
    problems += [problem for problem in violations(new, planned_sidecar=sidecar(old) or None,
                                                    planned_token_volume=None)
                 if not problem.startswith("spec.hostNetwork") and not problem.startswith("spec.shareProcess")
                 and problem not in before]
    return problems


def strictness(interface: Mapping[str, Any]) -> tuple[int, int]:
    """The order the judge uses (lockstep.core.enforcement): Isolate over Quarantine over Audit."""
    spec = interface.get("spec") or {}
    return rank(str(spec.get("enforcement", "Isolate")), str(spec.get("approval", "Manual")))


def weaker_than(chosen: Mapping[str, Any], selecting: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names of the label-selecting interfaces that are stricter, on some axis, than ``chosen``."""
    mine = strictness(chosen)
    return sorted(str(other["metadata"]["name"]) for other in selecting if is_stricter(strictness(other), mine))
