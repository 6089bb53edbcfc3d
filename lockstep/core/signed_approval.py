"""A signed approval: a DSSE envelope over an in-toto Statement that one approved revision of one
MCPServerInterface is approved, up to a time, at a sequence number.

The Statement (https://in-toto.io/Statement/v1), in RFC 8785 canonical form::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "mcp-interface:<namespace>/<name>", "digest": {"sha256": "<aggregate, hex>"}}],
     "predicateType": "https://lockstep.dev/approval/v1",
     "predicate": {"formula": "lockstep/v1", "canonicalization": "RFC8785",
                   "components": [{"kind": "tool", "name": "get_forecast", "digest": "sha256:..."}, ...],
                   "sequence": 3, "revokesBelow": 2, "notAfter": "2027-05-01T00:00:00Z"}}

The subject binds the approval to one resource: a signature for ``agents/weather`` says nothing of
``other/weather``. ``sequence`` only grows: an approval revokes every approval of the same resource
whose sequence is below its ``revokesBelow`` (by default its own sequence, so a new approval
revokes all older ones; an approver who keeps the previous revision for a rolling update says
``revokesBelow`` of that revision's sequence). The envelope travels in the manifest, on the
revision it approves (``spec.approved[].attestation``), so it is reviewed in the same pull request;
a second approver adds a signature to the same envelope.

The keys, the threshold and the verification are :mod:`lockstep.core.trust_policy`'s. Pure: no
Kubernetes, no network (securesystemslib's DSSE and keys, ``cryptography`` underneath).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import rfc8785
from securesystemslib.dsse import Envelope
from securesystemslib.signer import Signature, Signer

from lockstep.core.digest import DIGEST_PREFIX, ComponentDigest, InterfaceDigest
from lockstep.core.errors import LockstepError
from lockstep.core.names import APPROVAL_PREDICATE_TYPE
from lockstep.core.revision import Revision

__all__ = [
    "ATTESTATION_FIELD",
    "PAYLOAD_TYPE",
    "STATEMENT_TYPE",
    "ApprovalStatement",
    "MalformedAttestationError",
    "SignedApproval",
    "subject_name",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
CANONICALIZATION = "RFC8785"
#: The field of a ``spec.approved[]`` entry that holds its DSSE envelope.
ATTESTATION_FIELD = "attestation"
_SUBJECT_PREFIX = "mcp-interface:"


class MalformedAttestationError(LockstepError, ValueError):
    """An envelope or a Statement that is not a Lockstep approval."""


def subject_name(namespace: str, name: str) -> str:
    return f"{_SUBJECT_PREFIX}{namespace}/{name}"


def _timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(value: Any, what: str) -> datetime.datetime:
    """An RFC 3339 time in UTC (``Z`` or an offset), aware."""
    if not isinstance(value, str):
        raise MalformedAttestationError(f"{what} must be an RFC 3339 time, not {type(value).__name__}")
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise MalformedAttestationError(f"{what} is not an RFC 3339 time: {value[:40]!r}") from None
    if moment.tzinfo is None:
        raise MalformedAttestationError(f"{what} has no time zone: {value[:40]!r}")
    return moment


@dataclass(frozen=True)
class ApprovalStatement:
    """What the approvers sign: this resource, this revision, this sequence, until then."""

    namespace: str
    name: str
    digest: InterfaceDigest
    sequence: int
    not_after: datetime.datetime
    #: Approvals of this resource below this sequence are revoked (None: this statement's own sequence).
    revokes_below: int | None = None

    @property
    def revoked_below(self) -> int:
        return self.sequence if self.revokes_below is None else self.revokes_below

    def to_dict(self) -> dict[str, Any]:
        return {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": subject_name(self.namespace, self.name),
                         "digest": {"sha256": self.digest.digest.removeprefix(DIGEST_PREFIX)}}],
            "predicateType": APPROVAL_PREDICATE_TYPE,
            "predicate": {
                "formula": self.digest.formula,
                "canonicalization": CANONICALIZATION,
                "components": [entry.to_dict() for entry in self.digest.components],
                "sequence": self.sequence,
                "revokesBelow": self.revoked_below,
                "notAfter": _timestamp(self.not_after),
            },
        }

    def payload(self) -> bytes:
        return rfc8785.dumps(self.to_dict())

    @classmethod
    def from_payload(cls, payload: bytes) -> ApprovalStatement:
        try:
            statement = json.loads(payload)
        except ValueError as error:
            raise MalformedAttestationError(f"the statement is not JSON: {error}") from None
        if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
            raise MalformedAttestationError(f"the payload is not an in-toto Statement ({STATEMENT_TYPE})")
        if statement.get("predicateType") != APPROVAL_PREDICATE_TYPE:
            raise MalformedAttestationError(f"the statement's predicateType is not {APPROVAL_PREDICATE_TYPE}")
        namespace, name, aggregate = _subject(statement.get("subject"))
        predicate = statement.get("predicate")
        if not isinstance(predicate, dict) or predicate.get("canonicalization") != CANONICALIZATION:
            raise MalformedAttestationError("the statement's predicate is not a Lockstep approval")
        sequence, revokes_below = predicate.get("sequence"), predicate.get("revokesBelow")
        for value, what in ((sequence, "sequence"), (revokes_below, "revokesBelow")):
            if type(value) is not int or value < 0:
                raise MalformedAttestationError(f"the statement's {what} must be a whole number >= 0")
        if revokes_below > sequence:
            raise MalformedAttestationError("the statement's revokesBelow is above its own sequence")
        components = predicate.get("components")
        if not isinstance(components, list):
            raise MalformedAttestationError("the statement has no components")
        try:
            digest = InterfaceDigest.from_components(
                (ComponentDigest.from_dict(entry) for entry in components), str(predicate.get("formula")))
        except (LockstepError, TypeError, AttributeError) as error:
            raise MalformedAttestationError(f"the statement's components: {error}") from None
        if digest.digest != DIGEST_PREFIX + aggregate:
            raise MalformedAttestationError("the statement's components do not digest to its subject")
        return cls(namespace, name, digest, sequence, parse_timestamp(predicate.get("notAfter"), "notAfter"),
                   revokes_below)

    @classmethod
    def of(cls, revision: Revision, namespace: str, name: str, sequence: int,
           not_after: datetime.datetime, revokes_below: int | None = None) -> ApprovalStatement:
        if not revision.digest.components:
            raise MalformedAttestationError(f"revision {revision.aggregate} lists no component digests: "
                                            "an approval names every component it approves")
        return cls(namespace, name, revision.digest, sequence, not_after, revokes_below)


def _subject(subject: Any) -> tuple[str, str, str]:
    if not isinstance(subject, list) or len(subject) != 1 or not isinstance(subject[0], dict):
        raise MalformedAttestationError("the statement must have exactly one subject")
    name, digest = subject[0].get("name"), subject[0].get("digest")
    if not isinstance(name, str) or not name.startswith(_SUBJECT_PREFIX) or name.count("/") != 1:
        raise MalformedAttestationError(f"the statement's subject is not {_SUBJECT_PREFIX}<namespace>/<name>")
    if not isinstance(digest, dict) or set(digest) != {"sha256"} or not isinstance(digest["sha256"], str):
        raise MalformedAttestationError("the statement's subject must have one sha256 digest")
    namespace, _, resource = name.removeprefix(_SUBJECT_PREFIX).partition("/")
    return namespace, resource, digest["sha256"]


@dataclass(frozen=True)
class SignedApproval:
    """A DSSE envelope as it travels in ``spec.approved[].attestation``, and the statement it carries.

    The statement is read from the envelope's payload as is (never re-serialised), so what is verified is
    the bytes that were signed."""

    envelope: Envelope

    @property
    def statement(self) -> ApprovalStatement:
        return ApprovalStatement.from_payload(self.envelope.payload)

    @classmethod
    def create(cls, statement: ApprovalStatement, signer: Signer) -> SignedApproval:
        envelope = Envelope(statement.payload(), PAYLOAD_TYPE, {})
        envelope.sign(signer)
        return cls(envelope)

    def add_signature(self, signer: Signer) -> SignedApproval:
        """A second approver's signature on the same statement (one per key: signing twice replaces)."""
        envelope = Envelope(self.envelope.payload, self.envelope.payload_type, dict(self.envelope.signatures))
        envelope.sign(signer)
        return SignedApproval(envelope)

    def to_dict(self) -> dict[str, Any]:
        return {"payloadType": self.envelope.payload_type,
                "payload": base64.b64encode(self.envelope.payload).decode(),
                "signatures": [{"keyid": keyid, "sig": signature.signature}
                               for keyid, signature in sorted(self.envelope.signatures.items())]}

    @classmethod
    def from_dict(cls, data: Any) -> SignedApproval:
        if not isinstance(data, Mapping):
            raise MalformedAttestationError("an attestation must be a DSSE envelope (an object)")
        if data.get("payloadType") != PAYLOAD_TYPE:
            raise MalformedAttestationError(f"the envelope's payloadType must be {PAYLOAD_TYPE}")
        payload, signatures = data.get("payload"), data.get("signatures")
        if not isinstance(payload, str) or not isinstance(signatures, list):
            raise MalformedAttestationError("the envelope needs a base64 payload and a list of signatures")
        try:
            raw = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise MalformedAttestationError("the envelope's payload is not base64") from None
        by_key: dict[str, Signature] = {}
        for entry in signatures:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("keyid"), str) \
                    or not isinstance(entry.get("sig"), str):
                raise MalformedAttestationError("each signature needs a keyid and a sig (strings)")
            if entry["keyid"] in by_key:
                raise MalformedAttestationError(f"key {entry['keyid'][:16]} signed twice")
            by_key[entry["keyid"]] = Signature(entry["keyid"], entry["sig"])
        return cls(Envelope(raw, PAYLOAD_TYPE, by_key))
