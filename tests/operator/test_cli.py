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
