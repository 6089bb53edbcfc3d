"""``lockstep operator``: options, environment variables and their precedence."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from lockstep.operator.app import LockstepOperator
from lockstep.operator.config import OperatorConfig

from lockstep.cli import cli


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[OperatorConfig]:
    configs: list[OperatorConfig] = []

    async def run(self: LockstepOperator, **_: Any) -> None:
        configs.append(self.config)

    monkeypatch.setattr(LockstepOperator, "run", run)
    monkeypatch.setattr("lockstep.operator.cli._require_credentials", lambda: None)  # as if in a cluster
    return configs


def test_flag_beats_environment_beats_default(started: list[OperatorConfig]) -> None:
    env = {"LOCKSTEP_REPORT_PORT": "18443", "LOCKSTEP_METRICS_PORT": "18080", "LOCKSTEP_NAMESPACES": "agents tools",
           "LOCKSTEP_SIDECAR_RESOURCES": '{"limits": {"memory": "64Mi"}}'}
    result = CliRunner().invoke(cli, ["operator", "--metrics-port", "9000", "--peering", "lockstep"], env=env)
    assert result.exit_code == 0, result.output
    config = started[0]
    assert (config.report_port, config.metrics_port, config.namespaces) == (18443, 9000, ("agents", "tools"))
    assert config.peering_name == "lockstep" and config.sidecar_resources == {"limits": {"memory": "64Mi"}}
    assert (config.webhook_port, config.body_limit, config.rate_burst) == (9443, 4 * 1024 * 1024, 10)


def test_tls_files_go_together(started: list[OperatorConfig]) -> None:
    result = CliRunner().invoke(cli, ["operator", "--tls-cert", "/tls/tls.crt"])
    assert result.exit_code == 2 and "--tls-cert and --tls-key go together" in result.output
    assert started == []


def test_bad_sidecar_resources_are_a_usage_error(started: list[OperatorConfig]) -> None:
    result = CliRunner().invoke(cli, ["operator", "--sidecar-resources", "[1]"])
    assert result.exit_code == 2 and "must be a JSON object" in result.output


def test_outside_a_cluster_the_operator_says_so_in_one_line(tmp_path: Any) -> None:
    """Before: kopf retried and printed a 68-line traceback."""
    import os
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "LOCKSTEP_"))},
           "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "lockstep.cli", "operator"], capture_output=True, text=True,
                            env=env, timeout=60, check=False)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: no Kubernetes credentials") and "KUBECONFIG" in line
