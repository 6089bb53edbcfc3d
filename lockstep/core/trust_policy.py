"""The trust policy of signed approvals (an ``MCPApprovalPolicy``) and the verification of an
MCPServerInterface's approved revisions against it.

A policy names approver public keys (PEM; the key id is derived from the key, never chosen), each with
an optional validity window so that keys rotate without an outage, a threshold (m of n), and scopes:
which namespaces and resources it covers, in which mode (``Enforce``: a revision without a threshold
of valid signatures is not trusted; ``Warn``: it is trusted and the gap is reported; ``Off``), and
whether trust on first use (``approval: FirstSeen``) is allowed there. The first scope that matches a
resource decides.

:func:`verify_approved` checks every revision of ``spec.approved[]``: its envelope, its subject (this
resource), its components (exactly the revision's), its expiry, the signatures (distinct keys valid at
the time, at least the threshold), and the sequence floor: approvals below the highest
``revokesBelow`` of any trusted approval (and below the floor already recorded for this resource)
are rolled back and not trusted. Pure.
"""

from __future__ import annotations

import datetime
import enum
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.serialization import load_pem_public_key
from securesystemslib.exceptions import UnverifiedSignatureError, VerificationError
from securesystemslib.signer import SSlibKey

from lockstep.core.errors import InterfaceError, LockstepError
from lockstep.core.revision import Revision
from lockstep.core.signed_approval import (
    ATTESTATION_FIELD,
    ApprovalStatement,
    MalformedAttestationError,
    SignedApproval,
    parse_timestamp,
)

__all__ = [
    "ApprovalCheck",
    "ApprovalReason",
    "ApproverKey",
    "BrokenPolicy",
    "PolicyError",
    "PolicyMode",
    "Scope",
    "TrustDecision",
    "TrustPolicy",
    "VerifiedApprovals",
    "decide_trust",
    "parse_policy",
    "key_of_pem",
    "verify_approved",
]


class PolicyError(LockstepError, ValueError):
    """A trust policy that cannot be used: the operator trusts nothing it would have covered."""


class PolicyMode(str, enum.Enum):
    ENFORCE = "Enforce"
    WARN = "Warn"
    OFF = "Off"


class ApprovalReason(str, enum.Enum):
    """Why a revision's approval is not trusted (a CamelCase word for conditions, Events and metrics)."""

    UNSIGNED = "Unsigned"
    MALFORMED = "MalformedAttestation"
    WRONG_SUBJECT = "WrongSubject"
    DIGEST_MISMATCH = "DigestMismatch"
    BELOW_THRESHOLD = "BelowThreshold"
    EXPIRED = "Expired"
    ROLLED_BACK = "RolledBack"


def key_of_pem(pem: str | bytes) -> SSlibKey:
    """An Ed25519 or ECDSA P-256 public key (PEM, SubjectPublicKeyInfo) as a verifier; its key id is
    securesystemslib's (a SHA-256 of the key), so one key has one id wherever it is written."""
    try:
        public = load_pem_public_key(pem.encode() if isinstance(pem, str) else pem)
        return SSlibKey.from_crypto(public)
    except (ValueError, TypeError) as error:
        raise PolicyError(f"not a usable public key (Ed25519 or ECDSA P-256, PEM): {error}") from None


@dataclass(frozen=True)
class ApproverKey:
    name: str
    key: SSlibKey
    not_before: datetime.datetime | None = None
    not_after: datetime.datetime | None = None

    @property
    def keyid(self) -> str:
        return self.key.keyid

    def valid_at(self, now: datetime.datetime) -> bool:
        return (self.not_before is None or self.not_before <= now) and (self.not_after is None or now < self.not_after)


@dataclass(frozen=True)
class Scope:
    #: Namespace patterns (``*`` globs); empty: every namespace.
    namespaces: tuple[str, ...] = ()
    #: Resource patterns, ``name`` or ``namespace/name`` (globs); empty: every resource.
    resources: tuple[str, ...] = ()
    mode: PolicyMode = PolicyMode.ENFORCE
    allow_first_seen: bool = False

    def covers(self, namespace: str, name: str) -> bool:
        if self.namespaces and not any(fnmatch.fnmatchcase(namespace, pattern) for pattern in self.namespaces):
            return False
        return not self.resources or any(
            fnmatch.fnmatchcase(f"{namespace}/{name}" if "/" in pattern else name, pattern)
            for pattern in self.resources)


@dataclass(frozen=True)
class TrustPolicy:
    name: str
    keys: tuple[ApproverKey, ...]
    threshold: int
    scopes: tuple[Scope, ...] = field(default=(Scope(),))

    def scope_for(self, namespace: str, name: str) -> Scope | None:
        return next((scope for scope in self.scopes if scope.covers(namespace, name)), None)

    def mode_for(self, namespace: str, name: str) -> PolicyMode:
        scope = self.scope_for(namespace, name)
        return scope.mode if scope is not None else PolicyMode.OFF

    def key(self, keyid: str) -> ApproverKey | None:
        return next((key for key in self.keys if key.keyid == keyid), None)

    @classmethod
    def from_resource(cls, resource: Mapping[str, Any]) -> TrustPolicy:
        metadata = resource.get("metadata") or {}
        return cls.from_spec(str(metadata.get("name", "")), resource.get("spec"))

    @classmethod
    def from_spec(cls, name: str, spec: Any) -> TrustPolicy:
        if not isinstance(spec, Mapping):
            raise PolicyError(f"MCPApprovalPolicy {name}: spec must be an object")
        keys = tuple(_approver_key(name, entry) for entry in _list(spec.get("keys"), f"{name}: spec.keys"))
        if not keys:
            raise PolicyError(f"MCPApprovalPolicy {name}: spec.keys lists no approver key")
        if len({key.keyid for key in keys}) != len(keys):
            raise PolicyError(f"MCPApprovalPolicy {name}: the same public key is listed twice")
        threshold = spec.get("threshold", 1)
        if type(threshold) is not int or not 1 <= threshold <= len(keys):
            raise PolicyError(f"MCPApprovalPolicy {name}: threshold must be between 1 and the number of keys "
                              f"({len(keys)}), not {threshold!r}")
        scopes = tuple(_scope(name, entry) for entry in _list(spec.get("scopes", [{}]), f"{name}: spec.scopes"))
        return cls(name, keys, threshold, scopes)


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise PolicyError(f"MCPApprovalPolicy {what} must be a list")
    return value


def _approver_key(policy: str, entry: Any) -> ApproverKey:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) \
            or not isinstance(entry.get("publicKey"), str):
        raise PolicyError(f"MCPApprovalPolicy {policy}: each key needs a name and a publicKey (PEM)")
    try:
        not_before = parse_timestamp(entry["notBefore"], "notBefore") if "notBefore" in entry else None
        not_after = parse_timestamp(entry["notAfter"], "notAfter") if "notAfter" in entry else None
    except MalformedAttestationError as error:
        raise PolicyError(f"MCPApprovalPolicy {policy}: key {entry['name']}: {error}") from None
    try:
        key = key_of_pem(entry["publicKey"])
    except PolicyError as error:
        raise PolicyError(f"MCPApprovalPolicy {policy}: key {entry['name']}: {error}") from None
    return ApproverKey(entry["name"], key, not_before, not_after)


def _scope(policy: str, entry: Any) -> Scope:
    if not isinstance(entry, Mapping):
        raise PolicyError(f"MCPApprovalPolicy {policy}: each scope must be an object")
    try:
        mode = PolicyMode(entry.get("mode", PolicyMode.ENFORCE.value))
    except ValueError:
        raise PolicyError(f"MCPApprovalPolicy {policy}: mode must be Enforce, Warn or Off, "
                          f"not {entry.get('mode')!r}") from None
    namespaces, resources = entry.get("namespaces", []), entry.get("resources", [])
    for value in (namespaces, resources):
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise PolicyError(f"MCPApprovalPolicy {policy}: namespaces and resources are lists of names")
    return Scope(tuple(namespaces), tuple(resources), mode, entry.get("allowFirstSeen") is True)


# ---------------------------------------------------------------- verification


@dataclass(frozen=True)
class ApprovalCheck:
    """One approved revision, verified: trusted, or why not."""

    revision: str
    reason: ApprovalReason | None
    detail: str = ""
    #: The names of the keys whose signatures are valid.
    signers: tuple[str, ...] = ()
    statement: ApprovalStatement | None = None

    @property
    def trusted(self) -> bool:
        return self.reason is None

    def describe(self) -> str:
        if self.trusted:
            return f"revision {self.revision} signed by {', '.join(self.signers)}"
        return f"revision {self.revision}: {self.reason.value}: {self.detail}"  # type: ignore[union-attr]


@dataclass(frozen=True)
class VerifiedApprovals:
    mode: PolicyMode
    checks: tuple[ApprovalCheck, ...]
    #: Approvals of this resource below this sequence are rolled back (record it: it only grows).
    floor: int

    def trusted(self, revision: str) -> bool:
        if self.mode is not PolicyMode.ENFORCE:
            return True
        return any(check.revision == revision and check.trusted for check in self.checks)

    @property
    def refused(self) -> tuple[ApprovalCheck, ...]:
        return tuple(check for check in self.checks if not check.trusted)


def verify_approved(entries: Sequence[Any], namespace: str, name: str, policy: TrustPolicy,
                    now: datetime.datetime, floor: int = 0) -> VerifiedApprovals:
    """Verify every ``spec.approved[]`` entry of ``namespace/name`` under ``policy`` at ``now``; ``floor`` is
    the highest revokesBelow already recorded for this resource."""
    mode = policy.mode_for(namespace, name)
    if mode is PolicyMode.OFF:
        return VerifiedApprovals(mode, (), floor)
    checks = [_verify_entry(entry, namespace, name, policy, now) for entry in entries]
    floor = max([floor] + [check.statement.revoked_below for check in checks
                           if check.trusted and check.statement is not None])
    checks = [_rolled_back(check, floor) for check in checks]
    return VerifiedApprovals(mode, tuple(checks), floor)


def _rolled_back(check: ApprovalCheck, floor: int) -> ApprovalCheck:
    if check.trusted and check.statement is not None and check.statement.sequence < floor:
        return ApprovalCheck(check.revision, ApprovalReason.ROLLED_BACK,
                             f"sequence {check.statement.sequence} is below {floor}, revoked by a later approval",
                             check.signers, check.statement)
    return check


def _verify_entry(entry: Any, namespace: str, name: str, policy: TrustPolicy,
                  now: datetime.datetime) -> ApprovalCheck:
    try:
        revision = Revision.from_spec(entry)
    except InterfaceError as error:
        return ApprovalCheck(str(entry.get("digest", "?")) if isinstance(entry, Mapping) else "?",
                             ApprovalReason.MALFORMED, str(error))
    digest = revision.aggregate
    attestation = entry.get(ATTESTATION_FIELD)
    if attestation is None:
        return ApprovalCheck(digest, ApprovalReason.UNSIGNED, "no attestation")
    try:
        signed = SignedApproval.from_dict(attestation)
        statement = signed.statement
    except MalformedAttestationError as error:
        return ApprovalCheck(digest, ApprovalReason.MALFORMED, str(error))
    if (statement.namespace, statement.name) != (namespace, name):
        return ApprovalCheck(digest, ApprovalReason.WRONG_SUBJECT,
                             f"signed for {statement.namespace}/{statement.name}, not {namespace}/{name}")
    if statement.digest.digest != digest or (revision.digest.components and
                                             set(statement.digest.components) != set(revision.digest.components)):
        return ApprovalCheck(digest, ApprovalReason.DIGEST_MISMATCH,
                             f"the signed revision is {statement.digest.digest}")
    signers, problems = _valid_signers(signed, policy, now)
    if len(signers) < policy.threshold:
        return ApprovalCheck(digest, ApprovalReason.BELOW_THRESHOLD,
                             f"{len(signers)} of {policy.threshold} required signatures of policy {policy.name}"
                             + (f" (valid: {', '.join(signers)})" if signers else "")
                             + (f"; {'; '.join(problems)}" if problems else ""), tuple(signers), statement)
    if statement.not_after <= now:
        return ApprovalCheck(digest, ApprovalReason.EXPIRED,
                             f"the approval expired at {statement.not_after.isoformat()}", tuple(signers), statement)
    return ApprovalCheck(digest, None, "", tuple(signers), statement)


def _valid_signers(signed: SignedApproval, policy: TrustPolicy, now: datetime.datetime) -> tuple[list[str], list[str]]:
    """The names of the distinct policy keys, valid at ``now``, whose signature verifies; and what is wrong with
    the others (never the signature bytes)."""
    signers: list[str] = []
    problems: list[str] = []
    pae = signed.envelope.pae()
    for keyid, signature in signed.envelope.signatures.items():
        key = policy.key(keyid)
        if key is None:
            problems.append(f"key {keyid[:12]} is not in the policy")
            continue
        if not key.valid_at(now):
            problems.append(f"key {key.name} is outside its validity window")
            continue
        try:
            key.key.verify_signature(signature, pae)
        except (UnverifiedSignatureError, VerificationError, ValueError):
            problems.append(f"the signature of {key.name} does not verify")
            continue
        signers.append(key.name)
    return signers, problems


# ---------------------------------------------------------------- every policy that covers a resource


@dataclass(frozen=True)
class BrokenPolicy:
    """A policy that does not parse (written while the webhook was off): it covers everything and trusts
    nothing, until it is fixed."""

    name: str
    error: str


def parse_policy(resource: Mapping[str, Any]) -> TrustPolicy | BrokenPolicy:
    """An MCPApprovalPolicy object as the operator, the webhook, ``lockstep diff`` and ``lockstep check`` take it:
    one that does not parse is a BrokenPolicy (it trusts nothing)."""
    try:
        return TrustPolicy.from_resource(resource)
    except PolicyError as error:
        return BrokenPolicy(str((resource.get("metadata") or {}).get("name") or ""), str(error))


@dataclass(frozen=True)
class TrustDecision:
    """Which approved revisions of one resource are trusted, under every policy that covers it."""

    #: Some policy enforces here: revisions outside ``trusted`` are not approved.
    enforced: bool = False
    #: Revision digest -> why it is not trusted ("BelowThreshold: 1 of 2 ..."), under Enforce.
    untrusted: Mapping[str, str] = field(default_factory=dict)
    #: Under Warn: what would be refused under Enforce.
    warnings: tuple[str, ...] = ()
    #: Policy name -> the sequence floor of this resource under it (recorded by the operator).
    floors: Mapping[str, int] = field(default_factory=dict)
    #: Trust on first use is refused under Enforce unless a policy's scope allows it.
    first_seen_allowed: bool = True
    #: Revision digest -> the keys that signed it validly, under the policies that covered it.
    signers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def trusts(self, digest: str) -> bool:
        return digest not in self.untrusted


def decide_trust(entries: Sequence[Any], namespace: str, name: str,
                 policies: Iterable[TrustPolicy | BrokenPolicy], now: datetime.datetime,
                 floors: Mapping[str, int] | None = None) -> TrustDecision:
    """Verify ``spec.approved[]`` of ``namespace/name`` under each policy (``floors`` by policy name)."""
    floors = dict(floors or {})
    digests = [str(entry.get("digest")) if isinstance(entry, Mapping) else "?" for entry in entries]
    untrusted: dict[str, str] = {}
    warnings: list[str] = []
    signers: dict[str, tuple[str, ...]] = {}
    enforced, first_seen = False, True
    for policy in policies:
        if isinstance(policy, BrokenPolicy):
            enforced, first_seen = True, False
            for digest in digests:
                untrusted.setdefault(digest, f"PolicyInvalid: MCPApprovalPolicy {policy.name}: {policy.error}")
            continue
        verified = verify_approved(entries, namespace, name, policy, now, floors.get(policy.name, 0))
        if verified.mode is PolicyMode.OFF:
            continue
        floors[policy.name] = verified.floor
        for check in verified.checks:
            signers[check.revision] = tuple(dict.fromkeys(signers.get(check.revision, ()) + check.signers))
        if verified.mode is PolicyMode.WARN:
            warnings += [f"MCPApprovalPolicy {policy.name}: {check.describe()}" for check in verified.refused]
            continue
        enforced = True
        scope = policy.scope_for(namespace, name)
        first_seen = first_seen and scope is not None and scope.allow_first_seen
        for check in verified.refused:
            untrusted.setdefault(check.revision,
                                 f"{check.reason.value}: {check.detail} (MCPApprovalPolicy {policy.name})"  # type: ignore[union-attr]
                                 )
    return TrustDecision(enforced, untrusted, tuple(warnings), floors, first_seen or not enforced, signers)
