"""The CRDs as shipped, on a real kube-apiserver: accepted at create time (structural defaults checked
against the CEL rules, rule cost within budget), and the rules hold on objects with defaults applied."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from lockstep.demo.control_plane import ControlPlane, ControlPlaneError
from lockstep_testing.lockstep_install import Installation, apply, render_chart

from lockstep.core import Interface
from lockstep.core.manifest import build_manifest
from lockstep.core.revision import Revision

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [ROOT / "crds" / "mcpserverinterfaces.lockstep.dev.yaml",
           ROOT / "charts" / "lockstep" / "files" / "crds" / "mcpserverinterfaces.lockstep.dev.yaml",
           ROOT / "charts" / "lockstep" / "crds" / "kopfpeerings.kopf.dev.yaml"]
RESOURCES = "/apis/lockstep.dev/v1alpha1/namespaces/default/mcpserverinterfaces"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: str(path.relative_to(ROOT)))
def test_the_api_server_accepts_the_crd_as_shipped(control_plane: ControlPlane, path: Path) -> None:
    for crd in yaml.safe_load_all(path.read_text()):
        answer = apply(control_plane, crd, dry_run=True)  # a create, or an update once installed
        assert answer["metadata"]["name"] == crd["metadata"]["name"]


@pytest.mark.parametrize("values", [{}, {"crds": {"keep": False}}], ids=["keep", "no-keep"])
def test_the_api_server_accepts_the_crd_as_the_chart_renders_it(control_plane: ControlPlane,
                                                                values: dict[str, Any]) -> None:
    crds = [body for body in render_chart(values) if body["kind"] == "CustomResourceDefinition"]
    assert {crd["metadata"]["name"] for crd in crds} == {"mcpserverinterfaces.lockstep.dev",
                                                         "mcpapprovalpolicies.lockstep.dev"}
    for crd in crds:
        answer = apply(control_plane, crd, dry_run=True)
        assert answer["metadata"]["labels"] == crd["metadata"]["labels"]
        assert answer["spec"]["versions"] == crd["spec"]["versions"]


def _manifest(**spec: Any) -> dict[str, Any]:
    revision = Revision.of(Interface.from_document({"tools": [{"name": "get_forecast", "inputSchema": {}}]}))
    manifest = build_manifest(revision, name="weather", namespace="default", selector={"app": "weather"})
    manifest["spec"].update(spec)
    return manifest


def _dry_run(plane: ControlPlane, manifest: dict[str, Any]) -> dict[str, Any]:
    return dict(plane.call("POST", f"{RESOURCES}?dryRun=All&fieldValidation=Strict", manifest))


def test_defaults_are_applied_and_a_short_interval_alone_is_accepted(crds_installed: ControlPlane) -> None:
    created = _dry_run(crds_installed, _manifest(probe={"interval": "5s"}))
    assert created["spec"]["probe"] == {"interval": "5s"}
    assert created["spec"]["enforcement"] == "Isolate" and created["spec"]["approval"] == "Manual"
    assert created["spec"]["endpoint"] == {"port": 8080, "path": "/mcp", "transport": "streamable-http"}


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("stale before interval", {"probe": {"interval": "60s", "staleAfter": "30s"}}, "staleAfter must be longer"),
    ("stale before the default interval", {"probe": {"staleAfter": "30s"}}, "staleAfter must be longer"),
    ("timeout over interval", {"probe": {"interval": "10s", "timeout": "1m"}}, "timeout must not be longer"),
    ("manual without approved revisions", {"approved": []}, "at least one approved revision"),
    ("empty selector", {"selector": {}}, "the selector must not be empty"),
    ("same digest twice", {"approved": [{"digest": "sha256:" + "a" * 64, "formula": "lockstep/v1"}] * 2},
     "Duplicate value"),
    ("unknown formula", {"approved": [{"digest": "sha256:" + "a" * 64, "formula": "lockstep/v9"}]},
     "Unsupported value"),
    ("unknown spec field", {"approvedd": []}, "unknown field"),
]


@pytest.mark.parametrize(("change", "expected"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_the_api_server_refuses_broken_manifests(crds_installed: ControlPlane, change: dict[str, Any],
                                                   expected: str) -> None:
    manifest = _manifest()
    manifest["spec"].update(copy.deepcopy(change))
    with pytest.raises(ControlPlaneError, match="HTTP 4(22|00)") as refused:
        _dry_run(crds_installed, manifest)
    assert expected in str(refused.value)


async def test_the_operator_finds_every_field_it_needs_in_the_installed_crd(lockstep: Installation) -> None:
    """lockstep.operator.crd_check against the CRD as the chart installs it, under the chart's RBAC (get on
    that one CRD): nothing missing, no Event."""
    from lockstep.operator.crd_check import REASON, check_crd
    from lockstep.operator.kube import KubeClient

    class Seen:
        value: float | None = None
        posted: list[str] = []

        def set(self, value: float) -> None:
            self.value = value

        async def post(self, ref: Any, type_: str, reason: str, message: str) -> bool:
            self.posted.append(reason)
            return True

    client, seen = KubeClient(lockstep.plane.kopf_connection(lockstep.operator_token)), Seen()
    try:
        assert await check_crd(client, seen, seen) == []
    finally:
        await client.close()
    assert seen.value == 0 and REASON not in seen.posted
    gauge = lockstep.operator.operator.metrics.crd_missing_fields
    assert gauge._value.get() == 0  # the running operator's own check at start
