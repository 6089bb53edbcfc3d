"""The chart ships the same MCPServerInterface CRD as crds/ at the repository root, and kopf's peering CRDs."""

from __future__ import annotations

import yaml
from helm_python.chart import Chart
from lockstep_testing.chart_render import CHART_DIR, REPO


def test_the_charts_crd_is_identical_to_the_root_crd() -> None:
    root = REPO / "crds" / "mcpserverinterfaces.lockstep.dev.yaml"
    copy = CHART_DIR / "crds" / root.name
    assert copy.read_bytes() == root.read_bytes(), f"run: cp {root.relative_to(REPO)} {copy.relative_to(REPO)}"


def test_every_root_crd_is_in_the_chart() -> None:
    root_names = {p.name for p in (REPO / "crds").glob("*.yaml")}
    assert root_names <= {p.name for p in (CHART_DIR / "crds").glob("*.yaml")}


def test_the_chart_loads_every_crd(chart: Chart) -> None:
    names = {doc["metadata"]["name"] for crd in chart.crds for doc in yaml.safe_load_all(crd["data"]) if doc}
    assert {"mcpserverinterfaces.lockstep.dev", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"} <= names


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
    assert not {name for name in names if name.startswith("hack/") or "__pycache__" in name}
