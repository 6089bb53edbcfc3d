"""Does the installed MCPServerInterface CRD have every field this operator writes and reads?

A CRD that an upgrade did not upgrade (a chart whose CRD sat in crds/, a GitOps tool that skips CRDs, a
rollback of the CRD alone) keeps its old schema, and the API server prunes every field that schema lacks,
silently: a spec field a user sets vanishes, a status field the operator writes never lands. At start the
operator reads the installed CRD (``get`` on that one name, charts/lockstep/templates/rbac.yaml) and
compares its ``v1alpha1`` schema with the CRD it was built with: ``crds/mcpserverinterfaces.lockstep.dev.yaml``,
shipped inside the package (a copy kept identical by tests/chart/test_crds.py), which declares exactly the
fields the operator writes and reads. Each missing field is named: an error in the log, a Warning Event
``CRDFieldsMissing`` on the CRD (in ``default``, where Events of cluster-scoped objects live; its
involvedObject names no namespace, so `kubectl describe crd` shows it: lockstep.operator.events), and the
gauge ``lockstep_crd_missing_fields``. The operator keeps running and never changes a verdict for it.

No condition on each MCPServerInterface says it: the fact is the cluster's, not a resource's; the condition
would go into the very status the missing fields are pruned from (a CRD without ``status.conditions``
drops it silently); and it would be a second writer of every resource's status at each start, beside the
status writer's coalesced flush. ``lockstep check`` (the ``crd`` check) names the same fields on demand.

    missing = await check_crd(client, metrics.crd_missing_fields, events)
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from importlib import resources
from typing import Any, Protocol

import yaml

from lockstep.core.names import GROUP, PLURAL, VERSION

__all__ = ["CRD_NAME", "REASON", "check_crd", "expected_schema", "missing_fields"]

logger = logging.getLogger(__name__)

CRD_NAME = f"{PLURAL}.{GROUP}"
#: Where the Event goes: Events about cluster-scoped objects live in the default namespace (the
#: involvedObject itself names none: lockstep.operator.events.build_event).
EVENT_NAMESPACE = "default"
REASON = "CRDFieldsMissing"
#: How long the start waits for the CRD's answer before it goes on without the check.
TIMEOUT = 10.0
PACKAGED = "mcpserverinterfaces.lockstep.dev.yaml"


class _Client(Protocol):
    async def get(self, path: str) -> dict[str, Any]: ...


class _Events(Protocol):
    async def post(self, ref: Mapping[str, str], type_: str, reason: str, message: str) -> bool: ...


class _Gauge(Protocol):
    def set(self, value: float) -> None: ...


@functools.cache
def expected_schema() -> dict[str, Any]:
    """The ``v1alpha1`` schema of the CRD this operator was built with (package data)."""
    text = (resources.files("lockstep.operator") / "crds" / PACKAGED).read_text()
    return _version_schema(yaml.safe_load(text)) or {}


def missing_fields(installed: Mapping[str, Any], expected: Mapping[str, Any] | None = None) -> list[str]:
    """The fields of ``expected`` (default: the packaged schema) that the installed CRD's ``v1alpha1``
    schema lacks, as dotted paths (``status.pods.quarantined``, ``spec.approved[].components``); only
    the outermost missing one of a branch. A branch the installed schema keeps open
    (``x-kubernetes-preserve-unknown-fields``) is not pruned, so nothing under it is missing."""
    schema = _version_schema(installed)
    if schema is None:
        return [VERSION]
    return sorted(_missing(expected if expected is not None else expected_schema(), schema, ""))


def _version_schema(crd: Mapping[str, Any]) -> dict[str, Any] | None:
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") == VERSION:
            return dict((version.get("schema") or {}).get("openAPIV3Schema") or {})
    return None


def _missing(expected: Mapping[str, Any], installed: Mapping[str, Any], path: str) -> list[str]:
    if installed.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found: list[str] = []
    have = installed.get("properties") or {}
    for name, child in (expected.get("properties") or {}).items():
        where = f"{path}.{name}" if path else name
        if name not in have:
            found.append(where)
        else:
            found += _missing(child, have[name], where)
    for key, suffix in (("items", "[]"), ("additionalProperties", ".*")):
        child, theirs = expected.get(key), installed.get(key)
        if isinstance(child, Mapping):
            if isinstance(theirs, Mapping):
                found += _missing(child, theirs, path + suffix)
            elif theirs is not True:
                found.append(path + suffix)
    return found


async def check_crd(client: _Client, gauge: _Gauge, events: _Events, *, timeout: float = TIMEOUT) -> list[str] | None:
    """Compare the installed CRD with this operator's; returns the missing fields, or None when the CRD
    could not be read (logged; the operator goes on either way)."""
    try:
        installed = await asyncio.wait_for(
            client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"), timeout)
        expected = expected_schema()
    except Exception as error:  # noqa: BLE001 - a check at start must never stop the operator
        logger.warning("Cannot check the installed CRD %s against this operator's: %s", CRD_NAME, error)
        return None
    missing = missing_fields(installed, expected)
    gauge.set(len(missing))
    if not missing:
        logger.info("The installed CRD %s has every field this operator writes and reads.", CRD_NAME)
        return missing
    message = (f"The installed CRD {CRD_NAME} lacks {len(missing)} field(s) this operator writes or reads, which "
               f"the API server prunes: {', '.join(missing)}. Upgrade the CRD (helm upgrade with crds.install, or "
               f"kubectl apply -f crds/); docs/helm.md, \"CRDs\".")
    logger.error("%s", message)
    metadata = installed.get("metadata") or {}
    ref = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "name": CRD_NAME,
           "namespace": EVENT_NAMESPACE, "uid": str(metadata.get("uid") or "")}
    await events.post(ref, "Warning", REASON, message)
    return missing
