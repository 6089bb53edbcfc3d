"""`lockstep snapshot` refuses names Kubernetes would refuse, and says where the endpoint comes from
(issue 12): before, `--name Weather_Server` and `-n "bad ns"` printed invalid manifests with exit 0, and a
snapshot of a file silently got port 8080."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockstep.cli import cli

INTERFACE = {"tools": [{"name": "a", "inputSchema": {"type": "object"}}]}


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "weather.json"
    path.write_text(json.dumps(INTERFACE))
    return path


@pytest.mark.parametrize(("args", "option"), [(["--name", "Weather_Server"], "--name"),
                                              (["--name", "w", "-n", "bad ns"], "-n/--namespace"),
                                              (["--name", "x" * 254], "--name"),
                                              (["--name", "w", "-n", "a.b"], "-n/--namespace")])
def test_invalid_kubernetes_names_exit_2(snapshot: Path, args: list[str], option: str) -> None:
    result = CliRunner().invoke(cli, ["snapshot", str(snapshot), *args])
    assert result.exit_code == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert f"error: {option}" in line and "not a valid Kubernetes name" in line


def test_a_snapshot_of_a_file_says_its_endpoint_is_the_default(snapshot: Path) -> None:
    result = CliRunner().invoke(cli, ["snapshot", str(snapshot), "--name", "weather.v2", "-n", "agents"])
    assert result.exit_code == 0
    assert "port 8080" in result.stderr and "TARGET is a file" in result.stderr
    given = CliRunner().invoke(cli, ["snapshot", str(snapshot), "--name", "w", "--endpoint-port", "9000"])
    assert "port 9000" in given.stderr and "from --endpoint-port" in given.stderr
