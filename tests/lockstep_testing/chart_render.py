"""Helm chart rendering for tests: the real Helm engine (helm-python-sdk binds Helm v4's Go library)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lockstep.demo.install import documents

__all__ = ["ALL_ON", "CHART_DIR", "CRD_FILES", "NAMESPACE", "NAMESPACED", "RELEASE", "REPO", "Manifest", "Render",
           "documents", "find", "one"]

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "charts" / "lockstep"
#: Every CRD file the chart ships: files/crds/ rendered by templates/crds.yaml (upgraded by `helm upgrade`;
#: the MCPServerInterface CRD there is a copy of crds/ at the repository root), and kopf's peering CRDs in
#: the chart's crds/ (installed once by Helm, before the templates).
CRD_FILES = (*sorted((CHART_DIR / "files" / "crds").glob("*.yaml")), *sorted((CHART_DIR / "crds").glob("*.yaml")))
RELEASE = "demo"
NAMESPACE = "lockstep-system"

#: Every toggle of the chart switched on (cert-manager with its own bootstrap CA).
ALL_ON: dict[str, Any] = {
    "metrics": {"enabled": True, "serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True},
                "prometheusRule": {"enabled": True, "additionalLabels": {"team": "platform"}}},
    "dashboard": {"enabled": True, "annotations": {"grafana_folder": "Lockstep"}},
    "tls": {"certManager": {"enabled": True}},
    "operator": {"priorityClassName": "system-cluster-critical", "watchNamespaces": [],
                 "extraEnv": [{"name": "EXTRA", "value": "1"}], "podAnnotations": {"a": "b"}},
    "serviceAccount": {"annotations": {"example.com/role": "lockstep"}},
    "imagePullSecrets": [{"name": "registry"}],
    "image": {"digest": "sha256:" + "a" * 64},
}

#: The operator restricted to two namespaces, with an existing cert-manager ClusterIssuer.
NAMESPACED: dict[str, Any] = {
    "operator": {"watchNamespaces": ["agents", "tools"]},
    "tls": {"certManager": {"enabled": True, "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}}},
}

Manifest = dict[str, Any]
#: The ``render`` fixture: values in, parsed objects out.
Render = Callable[..., list[Manifest]]


def find(objects: list[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    matches = find(objects, kind, name)
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]
