"""The one-time adoption of a CRD that an earlier release installed from the chart's crds/ folder, on a
real kube-apiserver (docs/helm.md, "Upgrading from a release with CRDs in crds/").

The old release's crds/ pass created the CRD without Helm's ownership metadata and with an older schema;
a field that schema lacks is pruned, silently. The documented `kubectl label` / `kubectl annotate` give
the CRD the metadata Helm checks (the stand-in tests/e2e/helm.py checks it the way Helm does), then the
upgrade applies the chart's rendered CRD as Helm 4 does (server-side apply, field manager helm): the
schema is the new one, the existing MCPServerInterface keeps its uid and spec, and the new field
round-trips. The CRD is the chart's, moved to a group of its own so that the other tests' CRD is untouched.
"""

from __future__ import annotations

import copy
import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from lockstep.demo.control_plane import ControlPlane, ControlPlaneError
from lockstep_testing.lockstep_install import RELEASE, SYSTEM_NAMESPACE, render_chart

from lockstep.core import Interface
from lockstep.core.manifest import build_manifest
from lockstep.core.revision import Revision

REPO = Path(__file__).resolve().parents[2]
GROUP = "adoption.lockstep.test"
CRD_NAME = f"mcpserverinterfaces.{GROUP}"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RESOURCES = f"/apis/{GROUP}/v1alpha1/namespaces/default/mcpserverinterfaces"
#: The field the old schema lacks (removed from it here): a probe's client capabilities.
NEW_FIELD = ("spec", "probe", "clientCapabilities")


def _helm_standin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("helm_standin", REPO / "tests" / "e2e" / "helm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _moved(crd: dict[str, Any]) -> dict[str, Any]:
    crd = copy.deepcopy(crd)
    crd["metadata"]["name"] = CRD_NAME
    crd["spec"]["group"] = GROUP
    return crd


def _old_crd() -> dict[str, Any]:
    """What a crds/ pass of an earlier release created: the file as it was, without the new field."""
    crd = _moved(yaml.safe_load((REPO / "crds" / "mcpserverinterfaces.lockstep.dev.yaml").read_text()))
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in NEW_FIELD[:-1]:
        node = node["properties"][part]
    del node["properties"][NEW_FIELD[-1]]
    return crd


def _new_crd() -> dict[str, Any]:
    [crd] = [body for body in render_chart() if body["kind"] == "CustomResourceDefinition"]
    return _moved(crd)


def _manifest() -> dict[str, Any]:
    revision = Revision.of(Interface.from_document({"tools": [{"name": "get_forecast", "inputSchema": {}}]}))
    manifest = build_manifest(revision, name="weather", namespace="default", selector={"app": "weather"})
    manifest["apiVersion"] = f"{GROUP}/v1alpha1"
    manifest["spec"]["probe"] = {"interval": "30s", "clientCapabilities": ["sampling"]}
    return manifest


def _established(plane: ControlPlane, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        conditions = (plane.call("GET", f"{CRDS}/{CRD_NAME}").get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        assert time.monotonic() < deadline, f"{CRD_NAME} not Established after {timeout:.0f}s"
        time.sleep(0.1)


@pytest.fixture
def old_release(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    control_plane.call("POST", CRDS, _old_crd())
    _established(control_plane)
    try:
        yield control_plane
    finally:
        control_plane.call("DELETE", f"{CRDS}/{CRD_NAME}")
        deadline = time.monotonic() + 30  # its objects go first (the CRD's finalizer), then the CRD
        while time.monotonic() < deadline:
            try:
                control_plane.call("GET", f"{CRDS}/{CRD_NAME}")
            except ControlPlaneError as error:
                if "HTTP 404" in str(error):
                    break
                raise
            time.sleep(0.2)


def test_a_crd_from_crds_is_adopted_and_upgraded_with_its_objects(old_release: ControlPlane) -> None:
    plane, helm = old_release, _helm_standin()

    # The old schema prunes the new field, without an error: the loss the templated CRD ends.
    created = plane.call("POST", RESOURCES, _manifest())
    assert "clientCapabilities" not in created["spec"]["probe"]
    assert created["spec"]["probe"]["interval"] == "30s"

    # Helm refuses to take the CRD over as it stands...
    installed = plane.call("GET", f"{CRDS}/{CRD_NAME}")
    assert len(helm.ownership_problems(installed, RELEASE, SYSTEM_NAMESPACE)) == 3
    # ...and takes it after the documented kubectl label / kubectl annotate (both merge patches).
    plane.call("PATCH", f"{CRDS}/{CRD_NAME}", {"metadata": {
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": SYSTEM_NAMESPACE}}},
        content_type="application/merge-patch+json")
    installed = plane.call("GET", f"{CRDS}/{CRD_NAME}")
    assert helm.ownership_problems(installed, RELEASE, SYSTEM_NAMESPACE) == []

    # The upgrade: the rendered CRD, stamped and server-side applied as Helm 4 (and the stand-in) does.
    new = helm.stamp(_new_crd(), RELEASE, SYSTEM_NAMESPACE)
    upgraded = plane.call("PATCH", f"{CRDS}/{CRD_NAME}?fieldManager=helm&force=true", new,
                          content_type="application/apply-patch+yaml")
    assert upgraded["metadata"]["uid"] == installed["metadata"]["uid"]
    assert upgraded["spec"]["versions"][0]["schema"] == new["spec"]["versions"][0]["schema"]
    assert upgraded["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    _established(plane)

    # The object written under the old schema is still there, unchanged.
    kept = plane.call("GET", f"{RESOURCES}/weather")
    assert kept["metadata"]["uid"] == created["metadata"]["uid"]
    assert kept["spec"] == created["spec"]

    # The new field round-trips (the API server swaps in the new schema within moments of the update).
    patch = {"spec": {"probe": {"clientCapabilities": ["sampling", "roots"]}}}
    deadline = time.monotonic() + 10
    while True:
        written = plane.call("PATCH", f"{RESOURCES}/weather", patch, content_type="application/merge-patch+json")
        if written["spec"]["probe"].get("clientCapabilities") == ["sampling", "roots"]:
            break
        assert time.monotonic() < deadline, f"the new field is still pruned: {written['spec']['probe']}"
        time.sleep(0.2)
    assert plane.call("GET", f"{RESOURCES}/weather")["spec"]["probe"]["clientCapabilities"] == ["sampling", "roots"]


def test_a_crd_of_another_release_is_refused_with_helms_wording(old_release: ControlPlane) -> None:
    helm = _helm_standin()
    old_release.call("PATCH", f"{CRDS}/{CRD_NAME}", {"metadata": {
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": "other", "meta.helm.sh/release-namespace": SYSTEM_NAMESPACE}}},
        content_type="application/merge-patch+json")
    installed = old_release.call("GET", f"{CRDS}/{CRD_NAME}")
    assert helm.ownership_problems(installed, RELEASE, SYSTEM_NAMESPACE) == [
        'annotation validation error: key "meta.helm.sh/release-name" must equal "lockstep": current value is "other"']
