"""Approving an observed interface revision: pure manifest edits, never blind trust.

The operator records in ``status.observed[]`` the revisions its pods serve
(shape in docs/operator.md): the digest, the pods, the drift against the
closest approved revision, and the full definitions of unapproved revisions
that are small enough. Approving one of them means writing it into
``spec.approved[]`` of the manifest that Git (or the cluster) holds.

Nothing read from the cluster is trusted as is: :func:`verified_interface`
digests the definitions again and refuses them unless they digest to the
revision being approved, and :func:`approve` digests them once more under the
target manifest's own ignore rules before it writes the entry.

The edit functions change the manifest in place, so that a round-trip YAML
document (a mapping that keeps comments and key order) stays that document.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockstep.core.digest import DIGEST_PREFIX, FORMULA
from lockstep.core.errors import InterfaceError, LockstepError
from lockstep.core.ignore import parse_ignore_rules
from lockstep.core.manifest import API_VERSION, KIND
from lockstep.core.model import DEFAULT_LIMITS, Interface, Limits
from lockstep.core.revision import Revision

__all__ = [
    "AmbiguousRevisionError",
    "ApprovalError",
    "ApprovalResult",
    "DigestMismatchError",
    "NoDefinitionsError",
    "NotAManifestError",
    "ObservedRevision",
    "UnknownRevisionError",
    "approve",
    "observed_revisions",
    "prune_unserved",
    "select_revision",
    "verified_interface",
]


class ApprovalError(LockstepError):
    """An observed revision that cannot be approved, or a manifest that cannot take it."""


class UnknownRevisionError(ApprovalError):
    """No observed revision has the digest asked for."""


class AmbiguousRevisionError(ApprovalError):
    """Several observed revisions fit and none was named."""


class NoDefinitionsError(ApprovalError):
    """The observed revision carries no definitions, so it cannot be digested again."""


class DigestMismatchError(ApprovalError):
    """The observed definitions do not digest to the revision being approved."""


class NotAManifestError(ApprovalError):
    """The document to edit is not an MCPServerInterface."""


@dataclass(frozen=True)
class ObservedRevision:
    """One entry of ``status.observed[]``, as the operator wrote it (nothing checked yet)."""

    digest: str
    formula: str
    approved: bool
    pods: tuple[str, ...]
    pod_count: int
    first_seen: str
    closest_approved: str | None
    findings: tuple[dict[str, Any], ...]
    components: tuple[dict[str, Any], ...]
    definitions: Any

    @classmethod
    def from_status(cls, entry: Mapping[str, Any]) -> ObservedRevision:
        pods = tuple(str(pod) for pod in entry.get("pods") or ())
        return cls(
            digest=str(entry.get("digest") or ""),
            formula=str(entry.get("formula") or FORMULA),
            approved=bool(entry.get("approved")),
            pods=pods,
            pod_count=int(entry.get("podCount") or len(pods)),
            first_seen=str(entry.get("firstSeen") or ""),
            closest_approved=str(entry["closestApproved"]) if entry.get("closestApproved") else None,
            findings=tuple(dict(item) for item in entry.get("findings") or ()),
            components=tuple(dict(item) for item in entry.get("components") or ()),
            definitions=entry.get("definitions"),
        )

    def revision(self, ignore: Iterable[str] = (), limits: Limits = DEFAULT_LIMITS) -> Revision:
        """The revision this entry claims, its digests checked against each other and against its
        definitions when it carries them (raises an InterfaceError subclass otherwise)."""
        entry: dict[str, Any] = {"digest": self.digest, "formula": self.formula}
        if self.components:
            entry["components"] = list(self.components)
        if self.definitions is not None:
            entry["definitions"] = self.definitions
        return Revision.from_spec(entry, ignore, limits)


def observed_revisions(resource: Mapping[str, Any]) -> list[ObservedRevision]:
    """The revisions listed in a resource's ``status.observed[]``, in the operator's order.

    The operator keeps no definitions for a revision it counts as approved; for the one trusted on
    first use (approval FirstSeen) they are in ``status.trusted``, so that it can be pinned in Git."""
    status = resource.get("status") or {}
    trusted_entry = status.get("trusted")
    trusted: Mapping[str, Any] = trusted_entry if isinstance(trusted_entry, Mapping) else {}
    observed = []
    for entry in status.get("observed") or ():
        if not isinstance(entry, Mapping) or not entry.get("digest"):
            continue
        if entry.get("definitions") is None and trusted.get("digest") == entry.get("digest") \
                and trusted.get("definitions") is not None:
            entry = {**entry, "definitions": trusted["definitions"]}
        observed.append(ObservedRevision.from_status(entry))
    return observed


def select_revision(observed: Sequence[ObservedRevision], digest: str | None) -> ObservedRevision:
    """The observed revision named by ``digest`` (a full digest or an unambiguous prefix, such as the
    shortened one ``kubectl get mcpi`` prints), or else the only one that is not approved yet."""
    if digest:
        wanted = digest if digest.startswith(DIGEST_PREFIX) else f"{DIGEST_PREFIX}{digest}"
        matches = [entry for entry in observed if entry.digest.startswith(wanted)]
        if not matches:
            listed = ", ".join(entry.digest for entry in observed) or "none"
            raise UnknownRevisionError(f"no observed revision has digest {digest} (observed: {listed})")
        if len(matches) > 1:
            raise AmbiguousRevisionError(f"digest prefix {digest} fits {len(matches)} observed revisions; "
                                         "give more of the digest")
        return matches[0]
    pending = [entry for entry in observed if not entry.approved]
    if not pending:
        raise UnknownRevisionError("every observed revision is already approved; nothing to approve")
    if len(pending) > 1:
        listed = ", ".join(f"{entry.digest} ({entry.pod_count} pods)" for entry in pending)
        raise AmbiguousRevisionError(f"{len(pending)} observed revisions are not approved: {listed}; "
                                     "choose one with --revision")
    return pending[0]


def verified_interface(observed: ObservedRevision, ignore: Iterable[str] = (),
                       limits: Limits = DEFAULT_LIMITS) -> Interface:
    """The observed definitions, after checking that they digest, under ``ignore`` (the rules the
    operator digested them with), to exactly the observed digest."""
    if observed.definitions is None:
        raise NoDefinitionsError(
            f"observed revision {observed.digest} carries no definitions in status or a ConfigMap "
            "(too large to keep, or reported without them); approve it from the server itself with "
            "`lockstep snapshot URL` after reviewing it")
    try:
        interface = Interface.from_document(observed.definitions, limits)
    except InterfaceError as error:
        raise DigestMismatchError(f"observed revision {observed.digest}: invalid definitions: {error}") from None
    recomputed = Revision.of(interface, ignore)
    if recomputed.digest.formula != observed.formula or recomputed.aggregate != observed.digest:
        raise DigestMismatchError(
            f"observed revision {observed.digest}: its definitions digest to {recomputed.aggregate}; "
            "refusing to approve what was not observed (status or its ConfigMap edited or corrupted)")
    return interface


@dataclass(frozen=True)
class ApprovalResult:
    """What :func:`approve` or :func:`prune_unserved` changed."""

    digest: str | None
    added: bool
    removed: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.added or bool(self.removed)


Styler = Callable[[dict[str, Any]], Any]


def approve(manifest: MutableMapping[str, Any], interface: Interface, *, replace: bool = False,
            with_definitions: bool = True, style: Styler | None = None) -> ApprovalResult:
    """Add ``interface`` to ``manifest``'s ``spec.approved[]`` (in place), digested under the manifest's
    own ignore rules; with ``replace`` it becomes the only approved revision. ``style`` may turn the new
    entry into the document's own node types before it is inserted."""
    spec = _spec_of(manifest)
    revision = Revision.of(interface, parse_ignore_rules(spec.get("ignore") or ()))
    approved = spec.get("approved")
    if approved is None:
        spec["approved"] = approved = []
    if not isinstance(approved, list):
        raise NotAManifestError("spec.approved is not a list")
    present = [str(_digest_of(entry)) for entry in approved]
    if revision.aggregate in present and (not replace or len(present) == 1):
        return ApprovalResult(revision.aggregate, added=False)
    entry = revision.to_spec(with_definitions=with_definitions)
    removed: tuple[str, ...] = ()
    if replace:
        removed = tuple(digest for digest in present if digest != revision.aggregate)
        del approved[:]
    approved.append(style(entry) if style else entry)
    return ApprovalResult(revision.aggregate, added=True, removed=removed)


def prune_unserved(manifest: MutableMapping[str, Any], served: Iterable[str]) -> ApprovalResult:
    """Remove (in place) the approved revisions that no pod serves; refuses to remove them all."""
    spec = _spec_of(manifest)
    approved = spec.get("approved") or []
    served_digests = set(served)
    keep = [entry for entry in approved if _digest_of(entry) in served_digests]
    if not keep:
        raise ApprovalError("no pod serves any approved revision; pruning would approve nothing")
    removed = tuple(str(_digest_of(entry)) for entry in approved if _digest_of(entry) not in served_digests)
    for index in reversed(range(len(approved))):
        if _digest_of(approved[index]) not in served_digests:
            del approved[index]
    return ApprovalResult(None, added=False, removed=removed)


def _spec_of(manifest: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if not isinstance(manifest, MutableMapping) or manifest.get("kind") != KIND:
        raise NotAManifestError(f"not a {KIND} manifest")
    if manifest.get("apiVersion") != API_VERSION:
        raise NotAManifestError(f"unsupported apiVersion {manifest.get('apiVersion')!r}; expected {API_VERSION}")
    spec = manifest.get("spec")
    if not isinstance(spec, MutableMapping):
        raise NotAManifestError(f"the {KIND} has no spec")
    return spec


def _digest_of(entry: Any) -> Any:
    return entry.get("digest") if isinstance(entry, Mapping) else None
