"""The light commands start without the heavy libraries (issue 27 item 6): `lockstep --help`, `hash FILE`,
`diff FILE FILE` and `verify --help` import neither kopf, aiohttp, the kubernetes client nor the mcp SDK
(each costs 0.3 to 1.2 s at start; `bench/cli_startup.py` times the commands)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("kopf", "aiohttp", "kubernetes", "mcp", "httpx2", "uvicorn")


def _imported(*args: str) -> set[str]:
    """Top-level modules the command imported (python -X importtime), after checking it succeeded."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "lockstep.cli", *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    names = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.fixture(scope="module")
def interface_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("startup") / "interface.json"
    path.write_text(json.dumps({"tools": [{"name": "a", "description": "A.", "inputSchema": {"type": "object"}}]}))
    return path


@pytest.mark.parametrize("args", [["--help"], ["hash", "{file}"], ["diff", "{file}", "{file}"], ["verify", "--help"],
                                  ["snapshot", "--help"], ["check", "--help"]])
def test_a_light_command_imports_no_heavy_library(args: list[str], interface_file: Path) -> None:
    imported = _imported(*(arg.format(file=interface_file) for arg in args))
    assert "lockstep" in imported  # the command really ran through the package
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
