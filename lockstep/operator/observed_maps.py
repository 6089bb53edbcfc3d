"""ConfigMaps that keep the definitions of observed revisions too large for the resource's status.

An unapproved observed revision whose definitions do not fit in ``status.observed[]`` gets a
ConfigMap in the resource's namespace, owned by the resource (garbage-collected with it)::

    metadata:
      name: <resource>-observed-<first 12 hex of the digest>
      labels: {lockstep.dev/interface: <resource>, lockstep.dev/observed-digest: <hex12>}
      annotations: {lockstep.dev/digest: sha256:<full digest>}
      ownerReferences: [{kind: MCPServerInterface, name: <resource>, uid: ..., controller: true}]
    data:
      definitions.json: <the interface document as JSON>

and its status entry says ``definitionsRef: {configMap: <name>, key: definitions.json}``. At most
``observed_configmap_limit`` maps per resource (the newest revisions keep theirs), none larger than
``observed_configmap_size_limit``; a map is deleted once its revision is approved or no pod serves it.
The map is written before the status that points at it and deleted after the status that stops
pointing at it, so a reference never dangles. Nothing read back from a map is trusted: ``lockstep
diff``/``approve`` digest its definitions again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

from lockstep.operator.judge import Policy
from lockstep.operator.kube import KubeApiError, KubeClient

from lockstep.core.digest import DIGEST_PREFIX
from lockstep.core.names import DIGEST_ANNOTATION, DIGEST_LABEL, GROUP, INTERFACE_LABEL, VERSION
from lockstep.core.names import KIND as OWNER_KIND
from lockstep.core.revision import Revision

__all__ = ["DATA_KEY", "DIGEST_ANNOTATION", "DIGEST_LABEL", "INTERFACE_LABEL", "ObservedMaps", "configmap_name",
           "label_value"]

logger = logging.getLogger(__name__)
Key = tuple[str, str]
DATA_KEY = "definitions.json"
NAME_LIMIT = 253  # a DNS subdomain
LABEL_LIMIT = 63
_SUFFIX = "-observed-"


def _hex12(digest: str) -> str:
    return digest.removeprefix(DIGEST_PREFIX)[:12]


def _shortened(name: str, limit: int) -> str:
    """``name`` if it fits in ``limit``, else a prefix and a hash of the whole name (still unique)."""
    if len(name) <= limit:
        return name
    tag = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9]+$', '', name[: limit - len(tag) - 1])}-{tag}"


def configmap_name(resource: str, digest: str) -> str:
    """``<resource>-observed-<hex12>``, the resource part shortened when the whole would pass 253 characters."""
    suffix = f"{_SUFFIX}{_hex12(digest)}"
    return _shortened(resource, NAME_LIMIT - len(suffix)) + suffix


def label_value(resource: str) -> str:
    """The resource name as a label value (at most 63 characters)."""
    return _shortened(resource, LABEL_LIMIT)


class ObservedMaps:
    """Creates, keeps and prunes the definition ConfigMaps of every resource."""

    def __init__(self, client: KubeClient, *, size_limit: int, count_limit: int) -> None:
        self.client = client
        self.size_limit = size_limit
        self.count_limit = count_limit
        #: resource -> {observed digest: ConfigMap name}, as stored in the cluster.
        self.stored: dict[Key, dict[str, str]] = {}

    async def resync(self, namespaces: Iterable[str | None]) -> None:
        """Learn the maps that exist (written before a restart, or by the other replica)."""
        self.stored.clear()
        for namespace in namespaces:
            for body in await self.client.list_all(self.client.configmaps_path(namespace),
                                                   label_selector=INTERFACE_LABEL):
                self._remember(body)

    def _remember(self, body: Mapping[str, Any]) -> None:
        metadata = body.get("metadata") or {}
        digest = (metadata.get("annotations") or {}).get(DIGEST_ANNOTATION)
        owner = next((ref for ref in metadata.get("ownerReferences") or []
                      if ref.get("kind") == OWNER_KIND and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/")),
                     None)
        if digest and owner and metadata.get("name") == configmap_name(str(owner.get("name")), digest):
            self.stored.setdefault((str(metadata.get("namespace")), str(owner["name"])), {})[digest] = \
                str(metadata["name"])

    def forget(self, key: Key) -> None:
        """The resource is gone; Kubernetes garbage-collects its maps."""
        self.stored.pop(key, None)

    async def place(self, policy: Policy, status: Mapping[str, Any], revisions: Mapping[str, Revision],
                    age: Callable[[Mapping[str, Any]], Any]) -> list[str]:
        """Give each unapproved entry of ``status.observed`` that carries no definitions a map (newest
        first, by ``age``), pointing ``definitionsRef`` at it, or ``definitionsOmitted`` saying why not.
        Returns the digests whose maps are no longer wanted: delete them with :meth:`prune` once the
        status is written."""
        key = (policy.namespace, policy.name)
        stored = self.stored.setdefault(key, {})
        wanted: set[str] = set()
        entries = [entry for entry in status.get("observed") or []
                   if not entry.get("approved") and entry.get("definitions") is None]
        for entry in sorted(entries, key=age, reverse=True):
            digest = str(entry["digest"])
            if len(wanted) >= self.count_limit:
                entry["definitionsOmitted"] = self._count_reason()
                continue
            reason = await self._store(policy, digest, revisions.get(digest), stored)
            if reason is None:
                wanted.add(digest)
                entry["definitionsRef"] = {"configMap": stored[digest], "key": DATA_KEY}
            elif reason:
                entry["definitionsOmitted"] = reason
        return [digest for digest in stored if digest not in wanted]

    def _count_reason(self) -> str:
        if not self.count_limit:
            return "too large for status, and ConfigMaps for definitions are off (--observed-configmap-limit 0)"
        return (f"more than {self.count_limit} unapproved revisions too large for status: only the newest "
                "keep their definitions")

    async def prune(self, key: Key, digests: Iterable[str]) -> None:
        stored = self.stored.get(key, {})
        for digest in digests:
            name = stored.get(digest)
            if name is None:
                continue
            try:
                await self.client.delete(self.client.configmap_path(key[0], name))
            except KubeApiError as error:
                if error.status != 404:
                    logger.warning("Cannot delete ConfigMap %s/%s: %s", key[0], name, error)
                    continue
            del stored[digest]
            logger.info("%s/%s: deleted ConfigMap %s (revision %s approved or no longer served).",
                        *key, name, _hex12(digest))

    async def _store(self, policy: Policy, digest: str, revision: Revision | None,
                     stored: MutableMapping[str, str]) -> str | None:
        """Make sure the map of ``digest`` exists: None when it does, else why not ('' when there is
        nothing to store: the pods reported digests only)."""
        if digest in stored:
            return None
        if revision is None or revision.interface is None:
            return ""
        text = json.dumps(revision.interface.to_document(), separators=(",", ":"))
        if len(text.encode()) > self.size_limit:
            return (f"definitions are {len(text.encode())} bytes, more than the ConfigMap limit of "
                    f"{self.size_limit}: not stored")
        body = self._configmap(policy, digest, text)
        try:
            await self._write(policy.namespace, body)
        except (KubeApiError, OSError) as error:
            logger.warning("%s/%s: cannot store the definitions of %s in a ConfigMap: %s",
                           policy.namespace, policy.name, _hex12(digest), error)
            return f"cannot store the definitions in a ConfigMap: {error}"[:300]
        stored[digest] = body["metadata"]["name"]
        return None

    async def _write(self, namespace: str, body: dict[str, Any]) -> None:
        """Create the map; if one of that name exists, merge-patch it only where it differs."""
        name = body["metadata"]["name"]
        try:
            await self.client.post(self.client.configmaps_path(namespace), body)
            logger.info("Created ConfigMap %s/%s with observed definitions.", namespace, name)
            return
        except KubeApiError as error:
            if error.status != 409:
                raise
        patch = _difference(await self.client.get(self.client.configmap_path(namespace, name)), body)
        if patch:
            await self.client.merge_patch(self.client.configmap_path(namespace, name), patch)

    @staticmethod
    def _configmap(policy: Policy, digest: str, text: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": configmap_name(policy.name, digest), "namespace": policy.namespace,
                "labels": {INTERFACE_LABEL: label_value(policy.name), DIGEST_LABEL: _hex12(digest)},
                "annotations": {DIGEST_ANNOTATION: digest},
                # no blockOwnerDeletion: it would need the finalizers subresource of the resource
                "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": OWNER_KIND, "name": policy.name,
                                     "uid": policy.uid, "controller": True}],
            },
            "data": {DATA_KEY: text},
        }


def _difference(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that makes ``current`` carry what ``wanted`` says (nothing else is touched)."""
    metadata, wanted_metadata = current.get("metadata") or {}, wanted["metadata"]
    patch: dict[str, Any] = {}
    for field in ("labels", "annotations"):
        have = metadata.get(field) or {}
        changed = {key: value for key, value in wanted_metadata[field].items() if have.get(key) != value}
        if changed:
            patch.setdefault("metadata", {})[field] = changed
    if metadata.get("ownerReferences") != wanted_metadata["ownerReferences"]:
        patch.setdefault("metadata", {})["ownerReferences"] = wanted_metadata["ownerReferences"]
    if (current.get("data") or {}).get(DATA_KEY) != wanted["data"][DATA_KEY]:
        patch["data"] = {DATA_KEY: wanted["data"][DATA_KEY]}
    return patch
