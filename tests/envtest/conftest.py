"""The real control-plane tier: etcd + kube-apiserver + kube-controller-manager from KUBEBUILDER_ASSETS,
one per test session (lockstep/demo/control_plane.py). Without that variable every test here is
skipped with the reason; CI sets it (.ci/run)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from lockstep.demo.control_plane import (
    SKIP_REASON,
    ControlPlane,
    ControlPlaneError,
    assets_folder,
    start_control_plane,
)
from lockstep.demo.kubelet import Kubelet
from lockstep_testing.lockstep_install import Installation, api_path, apply, install_crds, install_lockstep
from lockstep_testing.polling import eventually_sync
from lockstep_testing.weather_mcp import weather_mcp  # noqa: F401  (the fixture mcp: the weather tools)

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = None if assets_folder() else pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.envtest)
            # One pytest-xdist worker runs the tier, on one control plane (a plane a worker costs more than
            # the tier gains from being spread).
            item.add_marker(pytest.mark.xdist_group("envtest"))
            if skip is not None:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    assets = assets_folder()
    if assets is None:
        pytest.skip(SKIP_REASON)
    with start_control_plane(tmp_path_factory.mktemp("control-plane"), assets) as plane:
        yield plane


@pytest.fixture(scope="session")
def crds_installed(control_plane: ControlPlane) -> ControlPlane:
    """The CRDs from crds/ created for real (the chart's copies are kept identical by tests/chart)."""
    install_crds(control_plane)
    return control_plane


@pytest.fixture
async def lockstep(control_plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Installation]:
    """Lockstep installed as the chart installs it, its operator running under the chart's ServiceAccount."""
    async with install_lockstep(control_plane, tmp_path / "lockstep") as installation:
        yield installation


@pytest.fixture
async def kubelet(control_plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Kubelet]:
    async with Kubelet(control_plane, tmp_path / "node").running() as running:
        yield running


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace opted in to injection, deleted afterwards."""
    name = "t-" + secrets.token_hex(4)
    apply(control_plane, {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": name, "labels": {"lockstep.dev/inject": "enabled"}}})
    eventually_sync(lambda: _has_default_account(control_plane, name), what="the default ServiceAccount")
    yield name
    control_plane.call("DELETE", api_path("Namespace", name=name))


def _has_default_account(plane: ControlPlane, namespace: str) -> bool:
    try:
        plane.call("GET", api_path("ServiceAccount", namespace, "default"))
    except ControlPlaneError:
        return False
    return True

