"""The mutating admission webhook that injects the Lockstep sidecar into pods.

Opt-in happens in the webhook configuration, not here: the API server sends a
pod to ``/mutate-pods`` only when its namespace carries ``lockstep.dev/inject:
enabled`` (the configuration's namespaceSelector) or the pod itself does (a
second webhook entry with an objectSelector); ``docs/sidecar.md`` holds the
configuration. The handler therefore injects every pod it is sent, except a
pod labelled ``lockstep.dev/inject: disabled`` and pods of the operator's own
namespace and ``kube-system`` (a guard in case the configuration is too wide).
An opted-out pod may not carry Lockstep's readiness gate, a container named
like the sidecar or a ``lockstep.dev`` token. Every container of an injected pod
drops NET_RAW and runs with ``allowPrivilegeEscalation: false`` (added where
absent, refused where the pod asks otherwise).

The pod is bound to the MCPServerInterface named by its ``lockstep.dev/interface``
annotation, or else to the one whose selector matches its labels. A pod that no
interface selects still gets the sidecar and the readiness gate, so it stays out
of Services until one is applied (fail closed); a Warning Event and an admission
warning say so.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode
from typing import Any, Protocol

import jsonpatch
import kopf
from kopf._cogs.clients import api as kopf_api  # the operator's own credentials; no second client
from kopf._cogs.clients import errors as kopf_errors
from lockstep.operator.admission_policy import (
    AdmissionPolicy,
    lockstep_markers,
    opted_out,
    strictness,
    update_violations,
    violations,
)
from lockstep.operator.events import build_event
from lockstep.operator.injection import (
    Binding,
    BindingError,
    InjectionSettings,
    hardening_ops,
    plan_injection,
    planned_sidecar,
    planned_token_volume,
)

from lockstep.core.names import GROUP, INJECT_LABEL, INTERFACE_ANNOTATION, PLURAL, VERSION
from lockstep.core.selection import select
from lockstep.core.wire import DEFAULT_SIDECAR_PORT

__all__ = ["InterfaceLookup", "KopfApiLookup", "Resolution", "register_webhooks", "resolve_binding"]

logger = logging.getLogger(__name__)

WEBHOOK_ID = "mutate-pods"  # kopf serves it at /mutate-pods
VALIDATE_ID = "validate-pods"  # pod UPDATEs and ephemeral containers, at /validate-pods
ALWAYS_EXCLUDED_NAMESPACES = frozenset({"kube-system"})

EventPoster = Callable[[Mapping[str, str], str, str], Awaitable[None] | None]


class InterfaceLookup(Protocol):
    """Where the webhook finds the MCPServerInterfaces of a namespace."""

    def __call__(self, namespace: str) -> Awaitable[Sequence[Mapping[str, Any]]]: ...


class KopfApiLookup:
    """Lists MCPServerInterfaces with the running operator's own credentials (kopf's login and vault);
    with a shard's ``--watch-label-selector``, only the shard's (another shard's resources never bind a
    pod this release injects)."""

    def __init__(self, label_selector: str = "") -> None:
        self.label_selector = label_selector

    def list_path(self, namespace: str) -> str:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
        return f"{path}?{urlencode({'labelSelector': self.label_selector})}" if self.label_selector else path

    async def __call__(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        found = await kopf_api.get(self.list_path(namespace), settings=_api_settings(), logger=logger)
        return list(found.get("items") or [])


_PENDING_EVENTS: set[asyncio.Task[None]] = set()
POD_APPEARS_TIMEOUT = 15.0


async def post_kopf_api_event(ref: Mapping[str, str], reason: str, message: str) -> None:
    """Post a Warning Event with the operator's credentials; a failure is logged, never raised.

    A bare pod has no uid while it is admitted, and an Event without one is not shown by ``kubectl
    describe pod``: such an Event is posted in the background once the API server has stored the pod.
    """
    if ref.get("kind") == "Pod" and not ref.get("uid"):
        task = asyncio.create_task(_post_once_stored(dict(ref), reason, message))
        _PENDING_EVENTS.add(task)
        task.add_done_callback(_PENDING_EVENTS.discard)
        return
    await _post_event_now(ref, reason, message)


async def _post_once_stored(ref: dict[str, str], reason: str, message: str) -> None:
    deadline = asyncio.get_running_loop().time() + POD_APPEARS_TIMEOUT
    path = f"/api/v1/namespaces/{ref['namespace']}/pods/{ref['name']}"
    while asyncio.get_running_loop().time() < deadline:
        try:
            pod = await kopf_api.get(path, settings=_api_settings(), logger=logger)
        except kopf_errors.APINotFoundError:
            await asyncio.sleep(0.25)  # not stored yet (admission is still running), or refused later
            continue
        except Exception as error:  # noqa: BLE001 - an Event is not worth more than a log line
            logger.warning("Cannot read pod %s/%s for Event %s: %s", ref["namespace"], ref["name"], reason, error)
            return
        ref["uid"] = str((pod.get("metadata") or {}).get("uid") or "")
        await _post_event_now(ref, reason, message)
        return
    logger.info("Pod %s/%s was never stored; Event %s not posted", ref["namespace"], ref["name"], reason)


async def _post_event_now(ref: Mapping[str, str], reason: str, message: str) -> None:
    try:
        await kopf_api.post(f"/api/v1/namespaces/{ref['namespace']}/events",
                            payload=build_event(ref, "Warning", reason, message),
                            settings=_api_settings(), logger=logger)
    except Exception as error:  # noqa: BLE001 - an Event is not worth failing an admission
        logger.warning("Cannot post Event %s about %s/%s: %s", reason, ref.get("namespace"), ref.get("name"), error)


def _api_settings() -> kopf.OperatorSettings:
    """Short timeouts and one retry: the API server waits for the webhook only a few seconds."""
    settings = kopf.OperatorSettings()
    settings.networking.request_timeout = 4.0
    settings.networking.connect_timeout = 2.0
    settings.networking.error_backoffs = [0.5]
    return settings


@dataclass(frozen=True)
class Resolution:
    """The binding chosen for a pod, and what is wrong with it (``reason`` and ``problem`` empty when nothing is)."""

    binding: Binding
    problem: str = ""
    reason: str = ""


def resolve_binding(pod: Mapping[str, Any], interfaces: Sequence[Mapping[str, Any]]) -> Resolution:
    """Pick the MCPServerInterface that applies to ``pod``: its annotation first, then selectors."""
    metadata = pod.get("metadata") or {}
    by_name = {str(item["metadata"]["name"]): item for item in interfaces}
    selection = select(metadata.get("annotations") or {}, metadata.get("labels") or {}, by_name,
                       selector=lambda item: (item.get("spec") or {}).get("selector"), strictness=strictness)
    named = selection.named
    if named:
        if selection.chosen is None:
            return Resolution(Binding(), f"its annotation {INTERFACE_ANNOTATION} names {named!r}, "
                                         f"which does not exist in this namespace", "InterfaceNotFound")
        if selection.stricter:
            return Resolution(Binding(interface=named), f"its annotation {INTERFACE_ANNOTATION} names {named!r}, "
                              f"which is less strict than {', '.join(selection.stricter)} that its labels select "
                              "(an annotation may not choose a weaker interface)", "InterfaceWeaker")
        return _bind(selection.chosen)
    selecting = selection.by_labels
    if not selecting:
        return Resolution(Binding(), "no MCPServerInterface selects it", "InterfaceNotFound")
    resolution = _bind(by_name[selecting[0]])
    if len(selecting) > 1 and not resolution.problem:
        problem = (f"several MCPServerInterfaces select it ({', '.join(selecting)}); "
                   f"the sidecar probes the endpoint of {selecting[0]!r}")
        return Resolution(resolution.binding, problem, "InterfaceAmbiguous")
    return resolution


def _bind(interface: Mapping[str, Any]) -> Resolution:
    try:
        return Resolution(Binding.from_interface(interface))
    except BindingError as error:
        name = str(interface["metadata"]["name"])
        return Resolution(Binding(interface=name), f"MCPServerInterface {name!r} is unusable: {error}",
                          "InterfaceUnusable")


def sidecar_settings(config: Any) -> InjectionSettings:
    """The sidecar settings from the operator's configuration (the CA is read again on every call)."""
    ca_path = getattr(config, "operator_ca_path", None)
    return InjectionSettings(
        image=config.sidecar_image,
        report_url=config.report_url,
        operator_ca=Path(ca_path).read_text() if ca_path else "",
        resources=getattr(config, "sidecar_resources", None) or {},
        token_expiration_seconds=int(getattr(config, "token_expiration_seconds", 3600)),
        port=int(getattr(config, "sidecar_port", DEFAULT_SIDECAR_PORT)),
    )


def event_target(pod: Mapping[str, Any], namespace: str) -> dict[str, str]:
    """What an Event about a pod in admission refers to: its controller, since the pod has no name or uid yet."""
    metadata = pod.get("metadata") or {}
    for owner in metadata.get("ownerReferences") or []:
        if owner.get("controller"):
            return {"apiVersion": str(owner.get("apiVersion", "")), "kind": str(owner.get("kind", "")),
                    "namespace": namespace, "name": str(owner.get("name", "")), "uid": str(owner.get("uid", ""))}
    return {"apiVersion": "v1", "kind": "Pod", "namespace": namespace,
            "name": str(metadata.get("name") or metadata.get("generateName", "")), "uid": ""}


def register_webhooks(registry: kopf.OperatorRegistry, config: Any, *,
                      lookup: InterfaceLookup | None = None,
                      post_event: EventPoster = post_kopf_api_event,
                      metrics: Any = None) -> None:
    """Register the pod-mutating webhook (``/mutate-pods``) on ``registry``.

    ``lookup`` lists a namespace's MCPServerInterfaces and ``post_event`` posts a Warning
    Event; both default to API calls with the running operator's kopf credentials.
    ``metrics`` (the operator's, optional) counts requests in ``lockstep_webhook_requests_total``
    with ``webhook="mutate"`` and ``outcome`` ``injected``, ``unchanged``, ``skipped`` or ``refused``.
    """
    find_interfaces: InterfaceLookup = lookup or KopfApiLookup(str(getattr(config, "watch_label_selector", "") or ""))
    excluded = ALWAYS_EXCLUDED_NAMESPACES | {str(getattr(config, "own_namespace", "") or "")} - {""}

    def count(outcome: str) -> None:
        if metrics is not None:
            metrics.webhook_requests.labels("mutate", outcome).inc()

    def count_update(outcome: str) -> None:
        if metrics is not None:
            metrics.webhook_requests.labels("validate-pods", outcome).inc()

    @kopf.on.mutate("v1", "pods", id=WEBHOOK_ID, operations=["CREATE"], registry=registry)
    async def inject_sidecar(body: kopf.Body, patch: kopf.Patch, warnings: list[str],
                             dryrun: bool, **_: Any) -> None:
        pod = dict(body)
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        if namespace in excluded:
            logger.debug("Not injecting pod %s/%s: namespace %s is never injected", namespace, _pod_name(pod),
                         namespace)
            count("skipped")
            return
        if opted_out(pod):
            if AdmissionPolicy(frozenset(getattr(config, "allow_opt_out", ()) or ())).may_opt_out(namespace):
                markers = lockstep_markers(pod)
                if markers:  # it would gate itself on a counterfeit sidecar's reports
                    count("refused")
                    raise kopf.AdmissionError(
                        f"Lockstep refuses this pod: it opts out ({INJECT_LABEL}=disabled), so Lockstep never "
                        f"injects nor verifies it, yet it carries what only an injected pod may: {'; '.join(markers)}",
                        code=403)
                count("skipped")
                return
            count("refused")
            raise kopf.AdmissionError(
                f"Lockstep: pods in namespace {namespace} may not opt out ({INJECT_LABEL}=disabled); the platform "
                "allows it per namespace (chart value webhook.allowOptOut)", code=403)
        try:
            settings = sidecar_settings(config)
            interfaces = await find_interfaces(namespace)
        except Exception as error:  # noqa: BLE001  # any failure refuses the pod; its controller retries
            count("refused")
            raise kopf.AdmissionError(f"Lockstep cannot inject the sidecar: {error}", code=503) from None
        resolution = resolve_binding(pod, interfaces)
        ops, binding = _plan(pod, settings, resolution, warnings)
        ops = hardening_ops(pod) + ops
        problems = violations(jsonpatch.apply_patch(pod, ops), planned_sidecar=planned_sidecar(pod, settings, binding),
                              planned_token_volume=planned_token_volume(settings))
        if resolution.reason == "InterfaceWeaker":
            problems.insert(0, resolution.problem)
        if problems:
            count("refused")
            raise kopf.AdmissionError("Lockstep refuses this pod: " + "; ".join(problems), code=403)
        if not ops:  # injected already (a reinvocation): exactly what Lockstep injects, checked above
            count("unchanged")
            return
        patch.fns.append(lambda raw: jsonpatch.apply_patch(raw, ops, in_place=True))
        count("injected")
        if resolution.problem:
            await _warn(pod, namespace, resolution, warnings, None if dryrun else post_event)

    @kopf.on.validate("v1", "pods", id=VALIDATE_ID, operations=["UPDATE"], subresource="*", registry=registry)
    async def guard_pod_update(body: kopf.Body, old: Any, **_: Any) -> None:
        """A pod UPDATE (or a new ephemeral container) may not change or reach into the sidecar."""
        problems = update_violations(dict(old or {}), dict(body))
        count_update("refused" if problems else "allowed")
        if problems:
            raise kopf.AdmissionError("Lockstep refuses this change: " + "; ".join(problems), code=403)


async def _warn(pod: Mapping[str, Any], namespace: str, resolution: Resolution, warnings: list[str],
                post_event: EventPoster | None) -> None:
    """Say why the pod is not bound (cleanly): an admission warning, and an Event unless it is a dry run."""
    message = f"Pod {_pod_name(pod)} opted in to Lockstep but {resolution.problem}"
    if not resolution.binding.interface:
        message += "; it stays out of Services until an MCPServerInterface selects it"
    warnings.append(message)
    if post_event is not None:
        posted = post_event(event_target(pod, namespace), resolution.reason, message)
        if inspect.isawaitable(posted):
            await posted


def _plan(pod: Mapping[str, Any], settings: InjectionSettings, resolution: Resolution,
          warnings: list[str]) -> tuple[list[dict[str, Any]], Binding]:
    try:
        return plan_injection(pod, settings, resolution.binding), resolution.binding
    except BindingError as error:  # a named port the pod lacks: measure the default port, fail closed
        warnings.append(f"Lockstep: {error}; the sidecar probes the default endpoint")
        fallback = Binding(interface=resolution.binding.interface)
        return plan_injection(pod, settings, fallback), fallback


def _pod_name(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("name") or f"{metadata.get('generateName', '')}*")
