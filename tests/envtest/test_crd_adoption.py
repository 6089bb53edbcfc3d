"""The one-time adoption of a CRD that an earlier release installed from the chart's crds/ folder, with the
real Helm (helm-python-sdk: Helm's own install and upgrade actions) on a real kube-apiserver (docs/helm.md,
"Upgrading from a release with CRDs in crds/").

Two small charts stand for the two releases: the old one ships the CRD in crds/ with an older schema, the
new one templates it as charts/lockstep does (the rendered CRD: labels, ``helm.sh/resource-policy: keep``).
Helm's crds/ pass creates the CRD without Helm's ownership metadata, and a field the old schema lacks is
pruned, silently. Helm refuses the upgrade until the documented `kubectl label` / `kubectl annotate` hand
the CRD to the release; then the upgrade updates it in place: the schema is the new one, the existing
MCPServerInterface keeps its uid and spec, and the new field round-trips. The CRD is the chart's, moved to
a group of its own so that the other tests' CRD is untouched.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml
from helm_python import Config, HelmError
from lockstep_testing.lockstep_install import render_chart

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
RELEASE, RELEASE_NAMESPACE = "adoption", "default"


class ControlPlane(Protocol):
    """What these tests use of the session's control plane (the ``control_plane`` fixture)."""

    kubeconfig: Path

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = ...) -> Any: ...


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
    [crd] = [body for body in render_chart() if body["kind"] == "CustomResourceDefinition"
             and body["spec"]["names"]["kind"] == "MCPServerInterface"]
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


def _chart(folder: Path, version: str, *, crds: Sequence[dict[str, Any]] = (),
           templates: Sequence[dict[str, Any]] = ()) -> Path:
    """A chart of its own: ``crds`` in crds/, ``templates`` in templates/."""
    folder.mkdir()
    (folder / "Chart.yaml").write_text(yaml.safe_dump({"apiVersion": "v2", "name": "adoption", "version": version}))
    for part, documents in (("crds", crds), ("templates", templates)):
        (folder / part).mkdir()
        for index, document in enumerate(documents):
            (folder / part / f"{index}.yaml").write_text(yaml.safe_dump(document))
    return folder


@pytest.fixture
def helm(control_plane: ControlPlane) -> Iterator[Config]:
    with Config(kubeconfig_path=control_plane.kubeconfig, namespace=RELEASE_NAMESPACE) as config:
        yield config


@pytest.fixture
def old_release(control_plane: ControlPlane, helm: Config, tmp_path: Path) -> Iterator[ControlPlane]:
    """The old chart installed by Helm: its crds/ pass created the CRD."""
    helm.install(_chart(tmp_path / "old", "0.1.0", crds=[_old_crd()]), RELEASE, wait="watcher", timeout=60)
    _established(control_plane)
    try:
        yield control_plane
    finally:
        helm.uninstall(RELEASE, ignore_not_found=True)
        control_plane.call("DELETE", f"{CRDS}/{CRD_NAME}")
        deadline = time.monotonic() + 30  # its objects go first (the CRD's finalizer), then the CRD
        while any(crd["metadata"]["name"] == CRD_NAME for crd in control_plane.call("GET", CRDS)["items"]):
            assert time.monotonic() < deadline, f"{CRD_NAME} still there after 30 s"
            time.sleep(0.2)


def _adopt(plane: ControlPlane, release: str) -> None:
    """docs/helm.md's kubectl label / kubectl annotate (both merge patches)."""
    plane.call("PATCH", f"{CRDS}/{CRD_NAME}", {"metadata": {
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": RELEASE_NAMESPACE}}},
        content_type="application/merge-patch+json")


def test_a_crd_from_crds_is_adopted_and_upgraded_with_its_objects(old_release: ControlPlane, helm: Config,
                                                                  tmp_path: Path) -> None:
    plane = old_release
    new_chart = _chart(tmp_path / "new", "0.2.0", templates=[_new_crd()])

    # The old schema prunes the new field, without an error: the loss the templated CRD ends.
    created = plane.call("POST", RESOURCES, _manifest())
    assert "clientCapabilities" not in created["spec"]["probe"]
    assert created["spec"]["probe"]["interval"] == "30s"
    installed = plane.call("GET", f"{CRDS}/{CRD_NAME}")
    assert "app.kubernetes.io/managed-by" not in (installed["metadata"].get("labels") or {})

    # Helm refuses to take the CRD over as it stands, with the message docs/helm.md quotes...
    with pytest.raises(HelmError) as refused:
        helm.upgrade(new_chart, RELEASE, wait="watcher", timeout=60)
    assert f'CustomResourceDefinition "{CRD_NAME}" in namespace "" exists and cannot be imported into the current ' \
        f'release: invalid ownership metadata' in str(refused.value)
    assert 'missing key "app.kubernetes.io/managed-by": must be set to "Helm"' in str(refused.value)
    assert [entry["revision"] for entry in helm.history(RELEASE)] == [1], "a refused upgrade stores no revision"

    # ...and takes it after the documented kubectl label / kubectl annotate.
    _adopt(plane, RELEASE)
    helm.upgrade(new_chart, RELEASE, wait="watcher", timeout=60)
    upgraded = plane.call("GET", f"{CRDS}/{CRD_NAME}")
    assert upgraded["metadata"]["uid"] == installed["metadata"]["uid"]
    assert upgraded["spec"]["versions"][0]["schema"] == _new_crd()["spec"]["versions"][0]["schema"]
    assert upgraded["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert [(e["revision"], e["status"]) for e in helm.history(RELEASE)] == [(1, "superseded"), (2, "deployed")]
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

    # helm uninstall keeps the CRD and its objects (helm.sh/resource-policy: keep).
    helm.uninstall(RELEASE)
    assert plane.call("GET", f"{RESOURCES}/weather")["metadata"]["uid"] == created["metadata"]["uid"]


def test_a_crd_of_another_release_is_refused_with_helms_wording(old_release: ControlPlane, helm: Config,
                                                                 tmp_path: Path) -> None:
    _adopt(old_release, "other")
    with pytest.raises(HelmError) as refused:
        helm.upgrade(_chart(tmp_path / "new", "0.2.0", templates=[_new_crd()]), RELEASE, wait="watcher", timeout=60)
    assert 'annotation validation error: key "meta.helm.sh/release-name" must equal "adoption": current value is ' \
        '"other"' in str(refused.value)
