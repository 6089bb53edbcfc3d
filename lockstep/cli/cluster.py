"""Reading MCPServerInterface resources from a cluster, and ``lockstep diff RESOURCE``.

Credentials come from a kubeconfig (``--kubeconfig``, else ``$KUBECONFIG``, else
``~/.kube/config``; ``--context`` picks a context), or from the pod's service
account when the command runs inside a cluster without a kubeconfig. The
namespace is ``-n``, else the context's, else ``default``, as with kubectl.

Every failure becomes a :class:`~lockstep.cli.targets.UsageError` (exit 2) with
a one-line cause.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import click

from lockstep.cli.kube_options import ClusterTarget, cluster_options
from lockstep.cli.output import dump_json
from lockstep.cli.targets import UsageError, is_url
from lockstep.core import Interface, InterfaceDigest, LockstepError
from lockstep.core.approval import ObservedRevision, observed_revisions
from lockstep.core.diff import (
    Finding,
    closest_revision,
    diff_revisions,
    max_severity,
    render_json,
    render_text,
)
from lockstep.core.conditions import CONDITION_TYPE as CONDITION
from lockstep.core.conditions import DRIFT_REASONS
from lockstep.core.names import GROUP, KIND, PLURAL, POLICY_KIND, POLICY_PLURAL, SHORT_NAME, VERSION
from lockstep.core.revision import Revision

__all__ = ["Cluster", "ClusterTarget", "cluster_options", "diff_resource", "parse_resource", "with_referenced_definitions"]

RESOURCE_PREFIXES = frozenset({SHORT_NAME, KIND.lower(), PLURAL, f"{KIND.lower()}.{GROUP}", f"{PLURAL}.{GROUP}"})
REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read (seconds)
FIELD_MANAGER = "lockstep-cli"
_BOLD, _RESET = "\x1b[1m", "\x1b[0m"


class ClusterError(UsageError):
    """The cluster cannot be reached, refuses the request, or lacks the resource."""


def parse_resource(text: str) -> str:
    """The resource name from ``NAME`` or ``mcpi/NAME`` (kubectl style)."""
    prefix, separator, name = text.rpartition("/")
    if separator and prefix.lower() not in RESOURCE_PREFIXES:
        raise UsageError(f"{text!r} is not an MCPServerInterface; use NAME or mcpi/NAME")
    if not name:
        raise UsageError("the resource name is empty")
    return name


class Cluster:
    """A connection to one cluster, namespace-bound, for MCPServerInterface reads and patches."""

    def __init__(self, target: ClusterTarget) -> None:
        import kubernetes

        self._kubernetes = kubernetes
        configuration, context_namespace = _load_configuration(target)
        self.namespace = target.namespace or context_namespace or "default"
        self.host = str(configuration.host)
        self._api = kubernetes.client.ApiClient(configuration)
        self._objects = kubernetes.client.CustomObjectsApi(self._api)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    def get_interface(self, name: str) -> dict[str, Any]:
        """The MCPServerInterface ``name`` of this namespace, as a plain dict."""
        found = self._call("get", name, lambda: self._objects.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, _request_timeout=REQUEST_TIMEOUT))
        return dict(found)

    def patch_interface(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) of the resource: lists such as spec.approved are replaced whole."""
        patched = self._call("patch", name, lambda: self._objects.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, dict(patch), field_manager=FIELD_MANAGER,
            _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT))
        return dict(patched)

    def approval_policies(self) -> list[dict[str, Any]]:
        """Every MCPApprovalPolicy (cluster-scoped); none when the CRD is not installed or they may not be read."""
        try:
            found = self._call("list", POLICY_PLURAL, lambda: self._objects.list_cluster_custom_object(
                GROUP, VERSION, POLICY_PLURAL, _request_timeout=REQUEST_TIMEOUT), kind=POLICY_KIND)
        except ClusterError:
            return []
        return [dict(item) for item in found.get("items") or []]

    def get_configmap_data(self, name: str) -> dict[str, str]:
        """The ``data`` of the ConfigMap ``name`` of this namespace."""
        core = self._kubernetes.client.CoreV1Api(self._api)
        found = self._call("get", name, lambda: core.read_namespaced_config_map(
            name, self.namespace, _request_timeout=REQUEST_TIMEOUT), kind="ConfigMap")
        return dict(found.data or {})

    def drifted_pods(self, selector: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(pod, reason) of the selected pods that the operator holds out for their interface."""
        core = self._kubernetes.client.CoreV1Api(self._api)
        pods = self._call("list", "pods", lambda: core.list_namespaced_pod(
            self.namespace, label_selector=label_selector(selector), _request_timeout=REQUEST_TIMEOUT), kind="Pod")
        return [(pod.metadata.name, condition.reason) for pod in pods.items
                for condition in pod.status.conditions or []
                if condition.type == CONDITION and condition.status == "False" and condition.reason in DRIFT_REASONS]

    def _call(self, verb: str, name: str, request: Any, *, kind: str = KIND) -> Any:
        exceptions = self._kubernetes.client.exceptions
        where = f"{kind} {self.namespace}/{name}"
        try:
            return request()
        except exceptions.ApiException as error:
            raise ClusterError(_api_error(verb, where, error)) from None
        except Exception as error:  # noqa: BLE001  # urllib3 connection errors carry no common base we can name
            cause = str(getattr(error, "reason", "") or error).splitlines()[0][:200]
            raise ClusterError(f"cannot reach the cluster at {self.host}: {cause}") from None


def label_selector(selector: Mapping[str, Any]) -> str:
    """A LabelSelector as the API's label selector string (kubectl's syntax)."""
    terms = [f"{key}={value}" for key, value in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        terms.append({"In": f"{key} in ({','.join(values)})", "NotIn": f"{key} notin ({','.join(values)})",
                      "Exists": f"{key}", "DoesNotExist": f"!{key}"}.get(str(operator), ""))
    return ",".join(term for term in terms if term)


def _api_error(verb: str, where: str, error: Any) -> str:
    status = int(getattr(error, "status", 0) or 0)
    if status == 404:
        return f"{where} not found"
    if status in (401, 403):
        return f"not allowed to {verb} {where} (HTTP {status}); check your credentials and RBAC"
    if status == 409:
        return f"{where} changed while it was being updated (HTTP 409); run the command again"
    if status == 422:
        return f"the cluster refused the change to {where}: {_status_message(error)}"
    return f"cannot {verb} {where}: HTTP {status} {_status_message(error)}".rstrip()


def _status_message(error: Any) -> str:
    try:
        return str(json.loads(error.body).get("message", ""))[:500]
    except (TypeError, ValueError, AttributeError):
        return str(getattr(error, "reason", "") or "")


def _load_configuration(target: ClusterTarget) -> tuple[Any, str | None]:
    import kubernetes

    configuration = kubernetes.client.Configuration()
    kubeconfig = target.kubeconfig or _default_kubeconfig()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except kubernetes.config.ConfigException as error:
            raise ClusterError(f"no kubeconfig and no usable in-cluster credentials: {error}") from None
        return configuration, _incluster_namespace()
    if kubeconfig is None:
        raise ClusterError("no kubeconfig found: pass --kubeconfig FILE or set KUBECONFIG")
    try:
        kubernetes.config.load_kube_config(config_file=kubeconfig, context=target.context,
                                           client_configuration=configuration, persist_config=False)  # type: ignore[no-untyped-call]
        contexts, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except (kubernetes.config.ConfigException, OSError, ValueError) as error:
        raise ClusterError(f"kubeconfig {kubeconfig}: {str(error).splitlines()[0]}") from None
    chosen = next((item for item in contexts if item.get("name") == target.context), active) \
        if target.context else active
    return configuration, ((chosen or {}).get("context") or {}).get("namespace")


def _default_kubeconfig() -> str | None:
    from_environment = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if from_environment:
        return from_environment
    home = Path.home() / ".kube" / "config"
    return str(home) if home.exists() else None


def _incluster_namespace() -> str | None:
    try:
        return Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip() or None
    except OSError:
        return None


# --------------------------------------------------------------------------- definitions kept in ConfigMaps

def with_referenced_definitions(cluster: Cluster, resource: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The resource with the definitions that the operator keeps in ConfigMaps (``definitionsRef`` of a
    ``status.observed[]`` entry too large for status) put into their entries, and a note for each one that
    cannot be read. Nothing is trusted here: the definitions are digested again wherever they are used."""
    resolved: dict[str, Any] = copy.deepcopy(dict(resource))
    notes = []
    for entry in (resolved.get("status") or {}).get("observed") or []:
        if not isinstance(entry, dict) or entry.get("definitions") is not None:
            continue
        ref = entry.get("definitionsRef")
        if entry.get("definitionsOmitted"):
            notes.append(f"the operator keeps no definitions of {entry.get('digest')}: {entry['definitionsOmitted']}")
        if not isinstance(ref, Mapping):
            continue
        try:
            entry["definitions"] = _read_definitions(cluster, ref)
        except ClusterError as error:
            notes.append(f"the definitions of {entry.get('digest')} cannot be read: {error}")
    return resolved, notes


def _read_definitions(cluster: Cluster, ref: Mapping[str, Any]) -> Any:
    name, key = str(ref.get("configMap") or ""), str(ref.get("key") or "")
    if not name or not key:
        raise ClusterError(f"definitionsRef {dict(ref)} names no ConfigMap and key")
    text = cluster.get_configmap_data(name).get(key)
    if text is None:
        raise ClusterError(f"ConfigMap {cluster.namespace}/{name} has no key {key}")
    try:
        return json.loads(text)
    except ValueError as error:
        raise ClusterError(f"ConfigMap {cluster.namespace}/{name} key {key} is not JSON: {error}") from None


# --------------------------------------------------------------------------- diff RESOURCE

@dataclass(frozen=True)
class ObservedDrift:
    """One observed revision and its drift against the closest approved revision."""

    observed: ObservedRevision
    closest: str | None
    findings: tuple[Finding, ...]
    field_level: bool
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        worst = max_severity(self.findings)
        return {
            "digest": self.observed.digest, "approved": self.observed.approved,
            "pods": list(self.observed.pods), "podCount": self.observed.pod_count,
            "firstSeen": self.observed.first_seen, "closestApproved": self.closest,
            "fieldLevel": self.field_level, "maxSeverity": worst.value if worst else None,
            "notes": list(self.notes), "findings": render_json(self.findings),
        }


def approved_revisions(resource: Mapping[str, Any]) -> tuple[list[Revision], list[str]]:
    """The parsed ``spec.approved[]`` revisions, and a note for each one that does not parse."""
    spec = resource.get("spec") or {}
    ignore = list(spec.get("ignore") or [])
    revisions, notes = [], []
    for index, entry in enumerate(spec.get("approved") or []):
        try:
            revisions.append(Revision.from_spec(entry, ignore))
        except LockstepError as error:
            notes.append(f"spec.approved[{index}] is unusable: {error}")
    trusted = (resource.get("status") or {}).get("trusted")
    if spec.get("approval") == "FirstSeen" and isinstance(trusted, Mapping):
        try:  # the operator verifies pods against it as if it were approved
            revisions.append(Revision.from_spec({key: trusted[key] for key in
                                                 ("digest", "formula", "components", "definitions") if key in trusted},
                                                ignore))
        except LockstepError as error:
            notes.append(f"status.trusted is unusable: {error}")
    return revisions, notes


def drift_of(resource: Mapping[str, Any]) -> list[ObservedDrift]:
    """Per observed revision of the resource's status, the findings against the closest approved one."""
    ignore = list((resource.get("spec") or {}).get("ignore") or [])
    approved, _ = approved_revisions(resource)
    return [_drift_of_one(entry, approved, ignore) for entry in observed_revisions(resource)]


def _drift_of_one(entry: ObservedRevision, approved: Sequence[Revision], ignore: Sequence[str]) -> ObservedDrift:
    if entry.approved:
        return ObservedDrift(entry, entry.digest, (), True, ())
    notes: list[str] = []
    try:
        observed = entry.revision(ignore)
    except LockstepError as error:
        notes.append(f"the definitions in status (or its ConfigMap) do not match the digest ({error}); "
                     "they are not shown")
        observed = _digest_only(entry, ignore)
    if observed.interface is None:
        notes.append("status carries no definitions for this revision (too large to keep, even in a ConfigMap): "
                     "component-level diff only")
    baseline = list(approved) or [Revision.of(Interface(()), ignore)]
    if not approved:
        notes.append("no revision is approved yet: everything is new")
    closest = closest_revision(baseline, observed)
    findings = tuple(diff_revisions(closest, observed, ignore))
    field_level = observed.interface is not None and closest.interface is not None
    if observed.interface is not None and closest.interface is None:
        notes.append(f"approved revision {closest.aggregate} carries digests only: component-level diff only")
    return ObservedDrift(entry, closest.aggregate if approved else None, findings, field_level, tuple(notes))


def _digest_only(entry: ObservedRevision, ignore: Sequence[str]) -> Revision:
    try:
        return dataclasses.replace(entry, definitions=None).revision(ignore)
    except LockstepError:
        return Revision(InterfaceDigest(entry.digest, (), entry.formula))


def diff_resource(resource_arg: str, target: ClusterTarget, *, as_json: bool, color: bool) -> int:
    """``lockstep diff RESOURCE``: print the drift of every observed revision; 1 when any is unapproved."""
    if is_url(resource_arg) or resource_arg.endswith((".yaml", ".yml", ".json")) or Path(resource_arg).is_file():
        raise UsageError(f"{resource_arg} is a URL or a file: compare it with another one "
                         "(lockstep diff OLD NEW), or name an MCPServerInterface to read from the cluster")
    name = parse_resource(resource_arg)
    with Cluster(target) as cluster:
        resource, unread = with_referenced_definitions(cluster, cluster.get_interface(name))
        drifts = drift_of(resource)
        unapproved = [drift for drift in drifts if not drift.observed.approved]
        # The operator writes a pod's condition at once and the resource's status within seconds: a pod
        # held out for drift that the status does not show yet is drift all the same (exit 1, not 0).
        held_out = [] if unapproved else _held_out(cluster, resource)
        policies = cluster.approval_policies()
    _, notes = approved_revisions(resource)
    notes += unread
    notes += [f"pod {pod} is held out ({reason}) with a revision the status does not show yet; the operator "
              "writes it within seconds: run this again for the diff" for pod, reason in held_out]
    if as_json:
        click.echo(dump_json(_diff_document(resource, drifts, notes, policies)), nl=False)
    else:
        # click.echo strips ANSI codes when stdout is no terminal, unless told otherwise (--color always)
        click.echo(render_resource_drift(resource, drifts, notes, color=color, policies=policies), nl=False,
                   color=color or None)
    return 1 if unapproved or held_out else 0


def _held_out(cluster: Cluster, resource: Mapping[str, Any]) -> list[tuple[str, str]]:
    selector = (resource.get("spec") or {}).get("selector") or {}
    try:
        return cluster.drifted_pods(selector) if selector else []
    except ClusterError:  # no right to list pods: the status is all there is to go by
        return []


def _diff_document(resource: Mapping[str, Any], drifts: Sequence[ObservedDrift],
                   notes: Sequence[str], policies: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    metadata = resource.get("metadata") or {}
    status = resource.get("status") or {}
    return {
        "name": metadata.get("name"), "namespace": metadata.get("namespace"),
        "phase": status.get("phase"), "podsReady": status.get("podsReady"),
        "approved": [str(entry.get("digest")) for entry in (resource.get("spec") or {}).get("approved") or []],
        "signatures": {digest: line for digest, line in signature_lines(resource, policies).items()},
        "notes": list(notes), "observed": [drift.to_dict() for drift in drifts],
    }


def signature_lines(resource: Mapping[str, Any], policies: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Approved revision -> who signed it: the approvers' names and whether the policies trust it, where the
    MCPApprovalPolicy objects could be read; else the statement's sequence and the signing key ids."""
    from lockstep.core.signed_approval import ATTESTATION_FIELD, MalformedAttestationError, SignedApproval
    from lockstep.core.trust_policy import decide_trust, parse_policy

    metadata = resource.get("metadata") or {}
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    entries = (resource.get("spec") or {}).get("approved") or []
    parsed = [parse_policy(body) for body in policies]
    decision = decide_trust(entries, namespace, name, parsed, datetime.datetime.now(datetime.UTC)) if parsed else None
    lines: dict[str, str] = {}
    for entry in entries:
        digest = str(entry.get("digest"))
        try:
            signed = SignedApproval.from_dict(entry[ATTESTATION_FIELD]) if entry.get(ATTESTATION_FIELD) else None
            statement = signed.statement if signed is not None else None
        except MalformedAttestationError as error:
            lines[digest] = f"attestation unreadable: {error}"
            continue
        if decision is not None and decision.enforced and not decision.trusts(digest):
            lines[digest] = f"NOT TRUSTED: {decision.untrusted[digest]}"
        elif decision is not None and decision.signers.get(digest):
            lines[digest] = f"signed by {', '.join(decision.signers[digest])}" + (
                f" (sequence {statement.sequence}, until {statement.not_after:%Y-%m-%d})" if statement else "")
        elif signed is not None and statement is not None:
            keys = ", ".join(keyid[:12] for keyid in sorted(signed.envelope.signatures))
            lines[digest] = (f"signed (sequence {statement.sequence}, until {statement.not_after:%Y-%m-%d}) by key(s) "
                             f"{keys}")
        else:
            lines[digest] = "unsigned"
    return lines


def render_resource_drift(resource: Mapping[str, Any], drifts: Sequence[ObservedDrift], notes: Sequence[str],
                          *, color: bool, policies: Sequence[Mapping[str, Any]] = ()) -> str:
    """The text form of ``lockstep diff RESOURCE``."""
    metadata = resource.get("metadata") or {}
    status = resource.get("status") or {}
    approved = [str(entry.get("digest")) for entry in (resource.get("spec") or {}).get("approved") or []]
    bold = (lambda text: f"{_BOLD}{text}{_RESET}") if color else (lambda text: text)
    lines = [bold(f"{KIND} {metadata.get('namespace')}/{metadata.get('name')}") +
             f": {status.get('phase') or 'no status yet'}, {status.get('podsReady') or '0/0'} pods ready"]
    # Who signed what, once there is a policy or a statement to speak of (else the lines stay as they were).
    signatures = signature_lines(resource, policies)
    signed = bool(policies) or any(line != "unsigned" for line in signatures.values())
    lines += [f"approved: {digest}" + (f" ({signatures[digest]})" if signed and digest in signatures else "")
              for digest in approved] or ["approved: none"]
    trusted = status.get("trusted")
    if isinstance(trusted, Mapping) and trusted.get("digest"):
        lines.append(f"trusted on first use: {trusted['digest']} (pin it: lockstep approve "
                     f"{metadata.get('name')} -n {metadata.get('namespace')} --revision {str(trusted['digest'])[:19]})")
    lines += [f"note: {note}" for note in notes]
    if not drifts:
        lines.append("no observed revision yet: no selected pod has reported")
    ref = f"{metadata.get('name')} -n {metadata.get('namespace')}"
    for drift in sorted(drifts, key=lambda item: item.observed.approved):  # unapproved first
        lines.append("")
        lines += _drift_lines(drift, bold)
        if drift.findings:
            lines.append(render_text(drift.findings, color=color).rstrip("\n"))
        if not drift.observed.approved:
            lines.append(f"to approve: lockstep approve {ref} --revision {drift.observed.digest[:19]}")
    return "\n".join(lines) + "\n"


def _drift_lines(drift: ObservedDrift, bold: Any) -> list[str]:
    entry = drift.observed
    pods = ", ".join(entry.pods[:5]) + (f" and {entry.pod_count - 5} more" if entry.pod_count > 5 else "")
    state = "approved" if entry.approved else "NOT APPROVED"
    lines = [bold(f"observed {entry.digest}") + f" ({state}), {entry.pod_count} pod(s): {pods or '-'}"]
    if entry.first_seen:
        lines.append(f"  first seen {entry.first_seen}")
    if not entry.approved:
        worst = max_severity(drift.findings)
        against = f"against approved {drift.closest}" if drift.closest else "against nothing approved"
        lines.append(f"  {len(drift.findings)} finding(s) {against}"
                     + (f", worst {worst.value}" if worst else ""))
        lines += [f"  note: {note}" for note in drift.notes]
    return lines


