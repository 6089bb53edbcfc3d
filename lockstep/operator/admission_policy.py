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
  token or target the sidecar.

The binding rule (:func:`weaker_than`): the ``lockstep.dev/interface`` annotation may pick an interface
only if it is at least as strict as every interface whose selector matches the pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockstep.operator.injection import (
    INJECT_LABEL,
    PROXY_PORT_NAME,
    SIDECAR_NAME,
    TOKEN_AUDIENCE,
    TOKEN_VOLUME,
)

from lockstep.core.enforcement import strictness as rank
from lockstep.core.selection import is_stricter

__all__ = ["AdmissionPolicy", "as_injected", "opted_out", "strictness", "update_violations", "violations", "weaker_than"]

CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")


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
        audiences = [source["serviceAccountToken"].get("audience")
                     for source in (volume.get("projected") or {}).get("sources") or []
                     if isinstance(source, Mapping) and isinstance(source.get("serviceAccountToken"), Mapping)]
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
    problems += [problem for problem in violations(new, planned_sidecar=sidecar(old) or None,
                                                    planned_token_volume=None)
                 if not problem.startswith("spec.hostNetwork") and not problem.startswith("spec.shareProcess")]
    return problems


def strictness(interface: Mapping[str, Any]) -> tuple[int, int]:
    """The order the judge uses (lockstep.core.enforcement): Isolate over Quarantine over Audit."""
    spec = interface.get("spec") or {}
    return rank(str(spec.get("enforcement", "Isolate")), str(spec.get("approval", "Manual")))


def weaker_than(chosen: Mapping[str, Any], selecting: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names of the label-selecting interfaces that are stricter, on some axis, than ``chosen``."""
    mine = strictness(chosen)
    return sorted(str(other["metadata"]["name"]) for other in selecting if is_stricter(strictness(other), mine))
