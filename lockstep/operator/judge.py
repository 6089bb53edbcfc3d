"""Judging: one pod's observation against its MCPServerInterface's policy gives a verdict.

Pure logic: no Kubernetes client, no clock. The reconciler feeds it parsed resources
(:class:`Policy`) and observations, and writes the :class:`Verdict` it returns.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lockstep.core import Interface, InterfaceError, LockstepError
from lockstep.core.conditions import CONDITION_TYPE, DRIFT_REASONS, PodState, Reason, state_of
from lockstep.core.enforcement import Approval, Enforcement, strictness
from lockstep.core.diff import closest_with_findings
from lockstep.core.digest import DIGEST_PREFIX
from lockstep.core.report import Observation
from lockstep.core.revision import Revision
from lockstep.core.spec import (
    DEFAULT_PORT,
    DEFAULT_PROXY_PORT,
    DEFAULT_STALE_AFTER,
    PROXIED_ENFORCEMENTS,
    BindingError,
    probe_stale_after,
    proxy_port,
)

if TYPE_CHECKING:
    from lockstep.operator.injection import AdmittedBinding

__all__ = [
    "CONDITION_TYPE",
    "Approval",
    "Enforcement",
    "PodState",
    "Policy",
    "Reason",
    "Verdict",
    "VerdictMemo",
    "judge",
    "judge_binding",
    "judge_conflict",
    "judge_outside_policy",
    "judge_stale",
    "observed_revision",
    "short_digest",
]

MESSAGE_LIMIT = 1024
FINDINGS_IN_MESSAGE = 5


def short_digest(digest: str) -> str:
    return digest[: len(DIGEST_PREFIX) + 12]


@dataclass(frozen=True)
class Policy:
    """What judging needs from one MCPServerInterface, parsed once per change of the resource."""

    namespace: str
    name: str
    uid: str = ""
    generation: int = 0
    selector: Mapping[str, Any] = field(default_factory=dict)
    enforcement: Enforcement = Enforcement.ISOLATE
    approval: Approval = Approval.MANUAL
    ignore: tuple[str, ...] = ()
    approved: tuple[Revision, ...] = ()
    stale_after: float = DEFAULT_STALE_AFTER
    #: The revision trusted on first use (approval FirstSeen), read back from status.
    trusted: Revision | None = None
    #: Why (part of) the spec is unusable: shown as the Stalled condition.
    problems: tuple[str, ...] = ()
    #: Enforcement Quarantine: the port of the in-line proxy (spec.proxy.port).
    proxy_port: int = DEFAULT_PROXY_PORT
    #: spec.endpoint.port: where the MCP server listens (a number, or a container port's name).
    endpoint_port: int | str = DEFAULT_PORT
    #: Approved revisions that no signed approval vouches for under an Enforce MCPApprovalPolicy (taken out of
    #: ``approved`` by lockstep.operator.approval_trust): digest -> why.
    untrusted: Mapping[str, str] = field(default_factory=dict)

    @property
    def strictness(self) -> tuple[int, int]:
        """(enforcement, approval), higher is stricter: Isolate over Quarantine over Audit, Manual over
        FirstSeen."""
        return strictness(self.enforcement.value, self.approval.value)

    @classmethod
    def from_resource(cls, body: Mapping[str, Any]) -> Policy:
        metadata = body.get("metadata") or {}
        spec = body.get("spec") or {}
        problems: list[str] = []
        ignore = tuple(str(pointer) for pointer in spec.get("ignore") or [])
        approved: list[Revision] = []
        for index, entry in enumerate(spec.get("approved") or []):
            try:
                approved.append(Revision.from_spec(entry, ignore=ignore))
            except LockstepError as error:
                problems.append(f"spec.approved[{index}]: {error}")
        proxy_port = _proxy_port(spec, problems)
        try:
            stale_after = probe_stale_after(spec.get("probe") or {})
        except BindingError as error:
            problems.append(f"spec.probe.staleAfter: {error}")
            stale_after = DEFAULT_STALE_AFTER
        return cls(
            namespace=str(metadata.get("namespace") or ""),
            name=str(metadata.get("name") or ""),
            uid=str(metadata.get("uid") or ""),
            generation=int(metadata.get("generation") or 0),
            selector=dict(spec.get("selector") or {}),
            enforcement=_enum(Enforcement, spec.get("enforcement"), Enforcement.ISOLATE, problems),
            approval=_enum(Approval, spec.get("approval"), Approval.MANUAL, problems),
            ignore=ignore,
            approved=tuple(approved),
            stale_after=stale_after,
            trusted=_trusted_from_status(body.get("status") or {}, ignore),
            proxy_port=proxy_port,
            endpoint_port=(spec.get("endpoint") or {}).get("port", DEFAULT_PORT),
            problems=tuple(problems),
        )

    @property
    def effective_approved(self) -> tuple[Revision, ...]:
        """The revisions a pod may match: spec's, plus the one trusted on first use."""
        if self.approval is Approval.FIRST_SEEN and self.trusted is not None:
            return (*self.approved, self.trusted)
        return self.approved

    @functools.cached_property
    def judging_key(self) -> tuple[Any, ...]:
        """What, when it changes, calls for judging every selected pod again (computed once: the policy is
        frozen, and a changed one is a new object)."""
        return (tuple(revision.aggregate for revision in self.approved), self.ignore, self.enforcement,
                self.approval, self.trusted.aggregate if self.trusted else None, self.stale_after,
                tuple(sorted(self.untrusted.items())))


#: Reasons the proxy answers for in enforcement Quarantine: drift, which it withholds component by component.
#: In Quarantine, a drift is served through the proxy (withheld), not held out.
QUARANTINED_REASONS = DRIFT_REASONS


def _proxy_port(spec: Mapping[str, Any], problems: list[str]) -> int:
    try:
        return proxy_port(spec)
    except BindingError as error:
        problems.append(str(error))
        return DEFAULT_PROXY_PORT


def _enum(kind: type[enum.Enum], value: Any, default: Any, problems: list[str]) -> Any:
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        problems.append(f"unknown {kind.__name__.lower()} {value!r}")
        return default


def _trusted_from_status(status: Mapping[str, Any], ignore: Sequence[str]) -> Revision | None:
    trusted = status.get("trusted")
    return trusted_revision(trusted, ignore) if isinstance(trusted, Mapping) else None


def trusted_revision(entry: Mapping[str, Any], ignore: Iterable[str]) -> Revision | None:
    """The trusted-on-first-use revision recorded in status (None when it cannot be read)."""
    try:
        return Revision.from_spec(entry, ignore=list(ignore))
    except LockstepError:
        return None


@dataclass(frozen=True)
class Verdict:
    """The pod condition Lockstep writes, and what led to it."""

    status: str  # "True" | "False"
    reason: Reason
    message: str
    state: PodState
    revision: Revision | None = None
    closest: str | None = None
    findings: tuple[dict[str, Any], ...] = ()
    #: FirstSeen: the revision this verdict trusts on first use (to be recorded in status).
    trusts: Revision | None = None

    @property
    def condition(self) -> tuple[str, str, str]:
        return (self.status, self.reason.value, self.message)


def observed_revision(observation: Observation, ignore: Sequence[str]) -> Revision:
    """The observed interface digested under the resource's ignore rules.

    A report is digested without ignore rules (the sidecar does not know them); with its
    definitions the operator digests it again under the rules. Without definitions the
    digests are compared as reported. Raises InterfaceError for unusable definitions."""
    assert observation.digest is not None
    if observation.definitions is None:
        return Revision(observation.digest)
    if observation.interface is None:  # not read from a report (restored from status): parse it here
        return Revision.of(Interface.from_document(observation.definitions), ignore)
    if not ignore:  # the report's own digests, checked against its definitions when it was read
        return Revision(observation.digest, observation.interface)
    return Revision.of(observation.interface, ignore)


def judge(observation: Observation, policy: Policy, *, was_verified: bool = False,
          proxied: bool = False) -> Verdict:
    """Judge one observation. ``was_verified``: the pod matched an approved revision before, so a
    mismatch now is a change of a running server (InterfaceChanged), not a new unapproved one.
    ``proxied``: the pod's sidecar runs the in-line proxy (its report says so); enforcement
    Quarantine relies on it, and without it isolates the pod as Isolate does."""
    verdict = _judge(observation, policy, was_verified=was_verified, proxied=proxied)
    if verdict.status == "True" and observation.server_exposed and policy.enforcement is not Enforcement.AUDIT:
        return Verdict("False", Reason.SERVER_EXPOSED, _exposed_message(observation)[:MESSAGE_LIMIT],
                       PodState.INVALID, verdict.revision, verdict.closest, verdict.findings)
    return verdict


def _exposed_message(observation: Observation) -> str:
    where = ", ".join(observation.exposed_sockets) or observation.exposed_at or "the pod's IP"
    return (f"a socket of the pod that is not the sidecar's answers peers past the in-line proxy ({where}): the MCP "
            "server must listen on 127.0.0.1 only, no container may listen on another address or hold raw or "
            "packet sockets; point Services at targetPort lockstep-mcp")


def _judge(observation: Observation, policy: Policy, *, was_verified: bool, proxied: bool) -> Verdict:
    if policy.enforcement is Enforcement.QUARANTINE and not proxied:
        policy = replace(policy, enforcement=Enforcement.ISOLATE)
    if observation.failure_reason is not None:
        reason = Reason(observation.failure_reason.value)
        return _enforce(policy, reason, observation.failure_message or reason.value)
    try:
        revision = observed_revision(observation, policy.ignore)
    except InterfaceError as error:
        return _enforce(policy, Reason.INTERFACE_INVALID, str(error))
    approved = policy.effective_approved
    for candidate in approved:
        if candidate.digest.formula == revision.digest.formula and candidate.aggregate == revision.aggregate:
            how = "trusted on first use" if candidate is policy.trusted else "approved"
            return Verdict("True", Reason.VERIFIED,
                           f"interface {short_digest(revision.aggregate)} is {how}",
                           PodState.VERIFIED, revision, candidate.aggregate)
    if revision.aggregate in policy.untrusted:
        return _enforce(policy, Reason.APPROVAL_UNTRUSTED,
                        f"interface {short_digest(revision.aggregate)} is approved in spec but not by a trusted signed "
                        f"approval: {policy.untrusted[revision.aggregate]}"[:MESSAGE_LIMIT], revision,
                        revision.aggregate)
    if not approved and policy.approval is Approval.FIRST_SEEN:
        return Verdict("True", Reason.VERIFIED,
                       f"interface {short_digest(revision.aggregate)} is trusted on first use",
                       PodState.VERIFIED, revision, revision.aggregate, trusts=revision)
    if not approved:
        return _enforce(policy, Reason.NOT_APPROVED,
                        f"interface {short_digest(revision.aggregate)} is not approved: no approved revision",
                        revision)
    closest, findings = _drift(approved, revision, policy.ignore)
    reason = Reason.INTERFACE_CHANGED if was_verified else Reason.NOT_APPROVED
    lead = "changed" if was_verified else "is not approved"
    message = (f"interface {short_digest(revision.aggregate)} {lead} against "
               f"{short_digest(closest.aggregate)}: {_describe(findings)}")
    return _enforce(policy, reason, message, revision, closest.aggregate, findings)


class VerdictMemo:
    """Judging, reusing the verdict of an identical observation of another pod (same aggregate digest, so
    the same definitions) under the same policy: the diff runs once per revision. A verdict that trusts a
    revision on first use is never reused (it is recorded once)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._verdicts: dict[tuple[Any, ...], Verdict] = {}

    def judge(self, observation: Observation, policy: Policy, *, was_verified: bool, proxied: bool) -> Verdict:
        if observation.digest is None:
            return judge(observation, policy, was_verified=was_verified, proxied=proxied)
        key = (policy.namespace, policy.name, policy.judging_key, observation.digest.digest,
               observation.definitions is not None, was_verified, proxied, observation.server_exposed,
               observation.exposed_at, observation.exposed_sockets)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = judge(observation, policy, was_verified=was_verified, proxied=proxied)
            if verdict.trusts is None:
                self._verdicts[key] = verdict
                if len(self._verdicts) > self.size:
                    del self._verdicts[next(iter(self._verdicts))]
        return verdict


def judge_stale(policy: Policy, age_seconds: float) -> Verdict:
    return _enforce(policy, Reason.REPORT_STALE,
                    f"no report for {int(age_seconds)}s (staleAfter {int(policy.stale_after)}s)")


def judge_conflict(resources: Sequence[str]) -> Verdict:
    """Two or more resources select the pod: it is never verified, whatever their enforcement."""
    names = ", ".join(sorted(resources))
    return Verdict("False", Reason.CONFLICT, f"selected by more than one MCPServerInterface: {names}",
                   PodState.CONFLICT)


def judge_binding(policy: Policy, admitted: AdmittedBinding | None, ports: Mapping[str, int]) -> Verdict | None:
    """In enforcement Isolate and Quarantine, a pod whose sidecar runs no proxy (ProxyMissing) or was planned for
    another interface, endpoint port, proxy port or mode (BindingMismatch) is never verified: its Service's
    lockstep-mcp port would reach nothing, or something else than the proxy the interface asks for. None: the
    binding holds (or the pod has no sidecar, so no report to judge, or one injected before 0.2.0, which the
    upgrade's restart replaces: AdmittedBinding.legacy). ``ports``: the pod's named container ports."""
    if policy.enforcement not in PROXIED_ENFORCEMENTS or admitted is None or admitted.legacy:
        return None
    fix = "re-create the pod (kubectl rollout restart) so that the webhook injects the sidecar for it"
    if admitted.unreadable:
        return _refused(Reason.BINDING_MISMATCH, f"the pod's sidecar environment cannot be read "
                                                 f"({admitted.unreadable}): {fix}")
    if admitted.proxy_port is None:
        return _refused(Reason.PROXY_MISSING, f"enforcement {policy.enforcement.value} needs the in-line proxy, and "
                                              f"the pod's sidecar was admitted without one (no proxied "
                                              f"MCPServerInterface selected the pod then): {fix}")
    differences = _binding_differences(policy, admitted, ports)
    if differences:
        return _refused(Reason.BINDING_MISMATCH, f"the pod's sidecar was admitted for {'; '.join(differences)}: {fix}")
    return None


def _binding_differences(policy: Policy, admitted: AdmittedBinding, ports: Mapping[str, int]) -> list[str]:
    endpoint = policy.endpoint_port
    wanted_port = endpoint if isinstance(endpoint, int) else ports.get(str(endpoint))
    mode = "isolate" if policy.enforcement is Enforcement.ISOLATE else "quarantine"
    checks = (("interface", admitted.interface or "none", policy.name),
              ("endpoint port", admitted.mcp_port, wanted_port),
              ("proxy port", admitted.proxy_port, policy.proxy_port),
              ("proxy mode", admitted.proxy_mode, mode))
    return [f"{what} {had} (the interface asks for {wanted})" for what, had, wanted in checks if had != wanted]


def _refused(reason: Reason, message: str) -> Verdict:
    return Verdict("False", reason, message[:MESSAGE_LIMIT], state_of(reason))


def judge_outside_policy(policy: Policy, problems: Sequence[str]) -> Verdict:
    """The pod's spec breaks Lockstep's admission rules (lockstep.operator.admission_policy): whatever its
    reports say, someone else may hold its sidecar's token."""
    return _enforce(policy, Reason.POD_OUTSIDE_POLICY,
                    f"the pod's spec lets another container reach the sidecar's token: {'; '.join(problems)}")


def _enforce(policy: Policy, reason: Reason, message: str, revision: Revision | None = None,
             closest: str | None = None, findings: Sequence[dict[str, Any]] = ()) -> Verdict:
    message = message[:MESSAGE_LIMIT]
    if policy.enforcement is Enforcement.QUARANTINE and reason in QUARANTINED_REASONS:
        return Verdict("True", Reason.QUARANTINED,
                       f"the proxy withholds what is not approved: {message}"[:MESSAGE_LIMIT],
                       PodState.QUARANTINED, revision, closest, tuple(findings))
    if policy.enforcement is Enforcement.AUDIT:
        return Verdict("True", Reason.AUDIT, f"audit only, would be {reason.value}: {message}"[:MESSAGE_LIMIT],
                       PodState.AUDIT, revision, closest, tuple(findings))
    return Verdict("False", reason, message, state_of(reason), revision, closest, tuple(findings))


def _drift(approved: Sequence[Revision], observed: Revision,
           ignore: Sequence[str]) -> tuple[Revision, list[dict[str, Any]]]:
    closest, findings = closest_with_findings(approved, observed, ignore)
    return closest, [finding.to_dict() for finding in findings or []]


def _describe(findings: Sequence[Mapping[str, Any]]) -> str:
    if not findings:
        return "the digests differ"
    parts = []
    for finding in findings[:FINDINGS_IN_MESSAGE]:
        fields = finding.get("fields") or []
        detail = f" ({', '.join(str(name) for name in fields[:4])})" if fields else ""
        parts.append(f"{finding.get('kind')} {finding.get('name')} {finding.get('change')}{detail} "
                     f"[{finding.get('severity')}]")
    more = len(findings) - FINDINGS_IN_MESSAGE
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
