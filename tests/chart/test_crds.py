"""The chart's CRDs: the MCPServerInterface CRD rendered from a template (so `helm upgrade` upgrades it),
exactly the CRD of crds/ at the repository root, behind crds.install and crds.keep; kopf's peering CRDs
in the chart's crds/ folder."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from helm_python.chart import Chart
from lockstep_testing.chart_render import CHART_DIR, CRD_FILES, RELEASE, REPO, Render, find, one

ROOT_CRD = REPO / "crds" / "mcpserverinterfaces.lockstep.dev.yaml"
CHART_COPY = CHART_DIR / "files" / "crds" / ROOT_CRD.name
PACKAGE_COPY = REPO / "lockstep" / "operator" / "crds" / ROOT_CRD.name
NAME = "mcpserverinterfaces.lockstep.dev"
ADDED_LABELS = {"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of"}


@pytest.mark.parametrize("copy_path", [CHART_COPY, PACKAGE_COPY], ids=["chart", "package"])
def test_every_copy_of_the_crd_is_identical_to_the_root_crd(copy_path: Any) -> None:
    """crds/ at the root is the one source; the chart renders its copy, the operator checks the installed
    CRD against its own (lockstep.operator.crd_check)."""
    assert copy_path.read_bytes() == ROOT_CRD.read_bytes(), \
        f"run: cp {ROOT_CRD.relative_to(REPO)} {copy_path.relative_to(REPO)}"


def test_every_root_crd_is_templated_by_the_chart() -> None:
    root_names = {p.name for p in (REPO / "crds").glob("*.yaml")}
    assert root_names <= {p.name for p in (CHART_DIR / "files" / "crds").glob("*.yaml")}


def test_the_rendered_crd_is_the_root_crd_with_the_release_labels_and_keep(render: Render) -> None:
    rendered = one(render(), "CustomResourceDefinition", NAME)
    root = yaml.safe_load(ROOT_CRD.read_text())
    metadata = rendered["metadata"]
    assert metadata["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert metadata["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert metadata["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert set(metadata["labels"]) == set(root["metadata"]["labels"]) | ADDED_LABELS
    assert {k: metadata["labels"][k] for k in root["metadata"]["labels"]} == root["metadata"]["labels"]
    expected = copy.deepcopy(root)
    expected["metadata"] = {"name": NAME, "labels": metadata["labels"], "annotations": metadata["annotations"]}
    assert rendered == expected


def test_crds_keep_false_lets_uninstall_delete_the_crd(render: Render) -> None:
    rendered = one(render({"crds": {"keep": False}}), "CustomResourceDefinition", NAME)
    assert "annotations" not in rendered["metadata"]


def test_crds_install_false_renders_no_crd(render: Render) -> None:
    assert not find(render({"crds": {"install": False}}), "CustomResourceDefinition")


def test_the_chart_renders_no_object_of_a_kind_its_templates_define(render: Render) -> None:
    """Helm maps every kind of a release before creating anything: an object whose CRD is in the same
    templates fails a first install ("ensure CRDs are installed first")."""
    objects = render()
    templated = {(crd["spec"]["group"], crd["spec"]["names"]["kind"]) for crd in find(objects, "CustomResourceDefinition")}
    assert templated
    assert not [o for o in objects if (o["apiVersion"].split("/")[0], o["kind"]) in templated]


def test_only_kopfs_peering_crds_stay_in_crds(chart: Chart) -> None:
    """Helm installs crds/ once and never upgrades it: only CRDs whose schema never changes may stay."""
    names = {doc["metadata"]["name"] for crd in chart.crds for doc in yaml.safe_load_all(crd["data"]) if doc}
    assert names == {"clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"}
    assert {path.name for path in CRD_FILES} == {"mcpserverinterfaces.lockstep.dev.yaml",
                                                 "mcpapprovalpolicies.lockstep.dev.yaml", "kopfpeerings.kopf.dev.yaml"}


def test_peering_crds_keep_status_writable_by_kopf() -> None:
    """kopf writes each replica's presence into .status with a merge patch of the main object: the
    status must not be a subresource and must keep unknown fields."""
    for crd in yaml.safe_load_all((CHART_DIR / "crds" / "kopfpeerings.kopf.dev.yaml").read_text()):
        version = crd["spec"]["versions"][0]
        assert "subresources" not in version
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        assert status["x-kubernetes-preserve-unknown-fields"] is True


def test_the_packaged_chart_leaves_out_the_generators(chart: Chart) -> None:
    names = {f["name"] for f in chart.files} | {t["name"] for t in chart.templates}
    assert "dashboards/lockstep.json" in names
    assert f"files/crds/{ROOT_CRD.name}" in names
    assert not {name for name in names if name.startswith("hack/") or "__pycache__" in name}
