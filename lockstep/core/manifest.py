"""MCPServerInterface manifests and snapshot files: build them, and read the
approved revisions back out of them.

A *snapshot* is an interface document (see :mod:`lockstep.core.model`). A
*manifest* is an ``MCPServerInterface`` custom resource whose
``spec.approved[]`` holds approved revisions. Every command that takes
``--against FILE`` accepts either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockstep.core.errors import MalformedInterfaceError
from lockstep.core.ignore import IgnoreRules, parse_ignore_rules
from lockstep.core.model import DEFAULT_LIMITS, Interface, Limits
from lockstep.core.names import API_VERSION, KIND
from lockstep.core.revision import Revision
from lockstep.core.spec import DEFAULT_ENDPOINT

__all__ = [
    "API_VERSION",
    "KIND",
    "Pinned",
    "build_manifest",
    "is_manifest",
    "load_pinned",
]



@dataclass(frozen=True)
class Pinned:
    """What a file pins: the approved revisions and the ignore rules they were digested under."""

    revisions: tuple[Revision, ...]
    ignore: IgnoreRules
    source: str  # "manifest" or "snapshot"


def is_manifest(document: Any) -> bool:
    return isinstance(document, Mapping) and document.get("kind") == KIND


def load_pinned(document: Any, limits: Limits = DEFAULT_LIMITS) -> Pinned:
    """Read the approved revisions from a manifest, or the single revision of a snapshot."""
    if not is_manifest(document):
        if isinstance(document, Mapping) and "apiVersion" in document:
            kind = document.get("kind")
            found = f"kind {kind!r}" if kind else f"apiVersion {document.get('apiVersion')!r} and no kind"
            raise MalformedInterfaceError(
                f"not an {KIND} manifest or an interface snapshot (it has {found}); give the file that "
                "lockstep snapshot wrote"
            )
        return Pinned((Revision.of(Interface.from_document(document, limits)),), IgnoreRules(), "snapshot")
    api_version = document.get("apiVersion")
    if api_version != API_VERSION:
        raise MalformedInterfaceError(f"unsupported apiVersion {api_version!r}; expected {API_VERSION}")
    spec = document.get("spec")
    if not isinstance(spec, Mapping):
        raise MalformedInterfaceError(f"{KIND} has no spec")
    ignore = parse_ignore_rules(spec.get("ignore") or [])
    approved = spec.get("approved") or []
    if not isinstance(approved, Sequence) or isinstance(approved, str):
        raise MalformedInterfaceError("spec.approved must be a list")
    revisions = []
    for index, entry in enumerate(approved):
        try:
            revisions.append(Revision.from_spec(entry, ignore, limits))
        except MalformedInterfaceError as error:
            raise type(error)(f"spec.approved[{index}]: {error}") from None
    return Pinned(tuple(revisions), ignore, "manifest")


def build_manifest(
    revision: Revision,
    *,
    name: str,
    namespace: str | None = None,
    selector: Mapping[str, str] | None = None,
    endpoint: Mapping[str, Any] | None = None,
    ignore: IgnoreRules | Sequence[str] | None = None,
    with_definitions: bool = True,
    probe: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An MCPServerInterface that approves ``revision``; the pods are selected by ``app=<name>``
    unless a selector is given. ``probe``: ``spec.probe`` (e.g. the clientCapabilities the snapshot
    announced), left out when None."""
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    rules = parse_ignore_rules(ignore)
    spec: dict[str, Any] = {
        "selector": {"matchLabels": dict(selector or {"app": name})},
        "endpoint": dict(endpoint or DEFAULT_ENDPOINT),
        "enforcement": "Isolate",
        "approval": "Manual",
    }
    if probe:
        spec["probe"] = dict(probe)
    if rules:
        spec["ignore"] = rules.pointers
    spec["approved"] = [revision.to_spec(with_definitions=with_definitions)]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}
