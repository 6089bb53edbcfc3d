"""tests/e2e/helm.py, the Helm command line of the real-node tier where no helm binary is installed: its
flags read as helm reads them (the actions themselves are Helm's, run against a cluster by tests/e2e)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

HELM_CLI = Path(__file__).resolve().parents[1] / "e2e" / "helm.py"


@pytest.fixture(scope="module")
def helm_cli() -> ModuleType:
    spec = importlib.util.spec_from_file_location("helm_cli", HELM_CLI)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_set_flags_merge_key_by_key_with_helms_typing(helm_cli: ModuleType) -> None:
    values = helm_cli.values_from_sets(["image.pullPolicy=Never", "crds.keep=false,image.tag=e2e",
                                        "operator.replicas=1", "image.tag=later"])
    assert values == {"image": {"pullPolicy": "Never", "tag": "later"}, "crds": {"keep": False},
                      "operator": {"replicas": 1}}


@pytest.mark.parametrize(("text", "seconds"), [("5m", 300), ("1m30s", 90), ("300s", 300), ("1h", 3600), ("45", 45)])
def test_timeouts_read_as_go_durations(helm_cli: ModuleType, text: str, seconds: int) -> None:
    assert helm_cli.duration(text) == seconds


def test_the_command_lines_of_the_tier(helm_cli: ModuleType) -> None:
    install = helm_cli.parser().parse_args(["install", "lockstep", "charts/lockstep", "-n", "lockstep-system",
                                            "--create-namespace", "--set", "image.pullPolicy=Never", "--wait",
                                            "--timeout", "5m"])
    assert (install.chart, install.namespace, install.create_namespace, install.wait, install.timeout) == \
        ("charts/lockstep", "lockstep-system", True, True, 300)
    rollback = helm_cli.parser().parse_args(["rollback", "lockstep", "1", "-n", "lockstep-system", "--wait"])
    assert (rollback.release, rollback.revision) == ("lockstep", 1)
    assert helm_cli.parser().parse_args(["rollback", "lockstep"]).revision is None  # helm: the previous one
    upgrade = helm_cli.parser().parse_args(["upgrade", "lockstep", "-n", "lockstep-system"])
    assert upgrade.chart == str(helm_cli.DEFAULT_CHART)
