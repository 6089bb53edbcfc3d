"""The operator's CRD check at start (lockstep.operator.crd_check) on a real API server, against a CRD an
upgrade did not upgrade: the missing fields named in a Warning Event that `kubectl describe crd` shows (an
Event about a cluster-scoped object lives in ``default`` and names no namespace), and in the gauge
``lockstep_crd_missing_fields``. The pruned CRD replaces the session's for the test and is put back after."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lockstep.demo.control_plane import ControlPlane, ControlPlaneError
from lockstep.operator.crd_check import CRD_NAME, REASON, check_crd
from lockstep.operator.events import EventPoster
from lockstep.operator.kube import KubeClient
from lockstep.operator.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#: What the pruned CRD lacks: a spec field and a status field of 0.2.0.
PRUNED = (("spec", "proxy"), ("status", "observed"))


def _pruned_crd() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "mcpserverinterfaces.lockstep.dev.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for parent, field in PRUNED:
        del schema["properties"][parent]["properties"][field]
    return dict(crd)


@pytest.fixture
async def pruned_crd(control_plane: ControlPlane) -> AsyncIterator[dict[str, Any]]:
    """The session's CRD replaced by the pruned one (created if the session has none), then put back."""
    try:
        original: dict[str, Any] | None = control_plane.call("GET", f"{CRDS}/{CRD_NAME}")
    except ControlPlaneError as error:
        assert "HTTP 404" in str(error), error
        original = None
    pruned = _pruned_crd()
    if original is None:
        installed = control_plane.call("POST", CRDS, pruned)
    else:
        pruned["metadata"] = copy.deepcopy(original["metadata"])
        installed = control_plane.call("PUT", f"{CRDS}/{CRD_NAME}", pruned)
    try:
        yield dict(installed)
    finally:
        if original is None:
            control_plane.call("DELETE", f"{CRDS}/{CRD_NAME}")
        else:
            current = control_plane.call("GET", f"{CRDS}/{CRD_NAME}")
            original["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            control_plane.call("PUT", f"{CRDS}/{CRD_NAME}", original)


async def test_missing_fields_are_an_event_kubectl_describe_shows_and_a_gauge(control_plane: ControlPlane,
                                                                               pruned_crd: dict[str, Any]) -> None:
    metrics = Metrics()
    client = KubeClient(control_plane.kopf_connection())
    events = EventPoster(client)
    try:
        missing = await check_crd(client, metrics.crd_missing_fields, events)
        await events.drain()
    finally:
        await client.close()
    assert missing == ["spec.proxy", "status.observed"]
    assert metrics.registry.get_sample_value("lockstep_crd_missing_fields") == 2

    # kubectl describe's own search: involvedObject kind, name, uid and namespace "" (cluster-scoped).
    selector = (f"involvedObject.kind=CustomResourceDefinition,involvedObject.name={CRD_NAME},"
                f"involvedObject.namespace=,involvedObject.uid={pruned_crd['metadata']['uid']}")
    found = control_plane.call("GET", f"/api/v1/events?fieldSelector={selector}")["items"]
    assert [(e["metadata"]["namespace"], e["type"], e["reason"]) for e in found] == [("default", "Warning", REASON)]
    assert "spec.proxy, status.observed" in found[0]["message"]
    described = subprocess.run(["kubectl", "--kubeconfig", str(control_plane.kubeconfig), "describe", "crd", CRD_NAME],
                               capture_output=True, text=True, timeout=60)
    assert described.returncode == 0, described.stderr
    assert REASON in described.stdout.split("Events:")[-1], described.stdout[-800:]
