"""The light commands start without the heavy libraries (issue 27 item 6): `lockstep --help`, `hash FILE`,
`diff FILE FILE` and `verify --help` import neither kopf, aiohttp, the kubernetes client nor the mcp SDK
(each costs 0.3 to 1.2 s at start), nor the CLI's own cluster, approve and proxy code. This is the CI gate of
the CLI's start (`make test`, every pull request); `bench/cli_startup.py` times the commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from lockstep.cli import ENVIRONMENT_RULED, LAZY_COMMANDS, cli

HEAVY = ("kopf", "aiohttp", "kubernetes", "mcp", "httpx2", "uvicorn")
#: Parts of Lockstep that only the heavier commands need.
HEAVY_PARTS = ("lockstep.cli.approve", "lockstep.cli.cluster", "lockstep.cli.proxy", "lockstep.operator",
               "lockstep.reader", "lockstep.proxy", "lockstep.sidecar", "lockstep.demo")
LIGHT_COMMANDS = [["--help"], ["hash", "{file}"], ["diff", "{file}", "{file}"], ["verify", "--help"],
                  ["snapshot", "--help"], ["check", "--help"]]


#: Runs the CLI as its entry point does, and at exit writes the names in sys.modules to the file argv[1] names.
IMPORTS_AT_EXIT = """
import atexit, json, sys
report, sys.argv = sys.argv[1], ["lockstep", *sys.argv[2:]]
atexit.register(lambda: open(report, "w").write(json.dumps(sorted(sys.modules))))
from lockstep.cli import main
main()
"""


def _run(args: list[str], folder: Path, env: dict[str, str] | None = None) -> tuple[set[str], str]:
    """The modules the command imported, and its stderr, after checking it succeeded."""
    report = folder / "modules.json"
    result = subprocess.run([sys.executable, "-c", IMPORTS_AT_EXIT, str(report), *args], capture_output=True,
                            text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return set(json.loads(report.read_text())), result.stderr


@pytest.fixture(scope="module")
def interface_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("startup") / "interface.json"
    path.write_text(json.dumps({"tools": [{"name": "a", "description": "A.", "inputSchema": {"type": "object"}}]}))
    return path


@pytest.mark.parametrize("args", LIGHT_COMMANDS, ids=" ".join)
def test_a_light_command_imports_no_heavy_library(args: list[str], interface_file: Path, tmp_path: Path) -> None:
    modules, _ = _run([arg.format(file=interface_file) for arg in args], tmp_path)
    assert "lockstep.cli.commands" in modules  # the command really ran through the package
    heavy = {module for module in modules if module.split(".")[0] in HEAVY or module.startswith(HEAVY_PARTS)}
    assert not heavy, sorted(heavy)


def test_the_help_line_of_a_lazy_command_is_its_own() -> None:
    """--help lists the lazy commands from LAZY_COMMANDS without importing them: each line is the first line of
    the command's own help (for the components this build has)."""
    context = click.Context(cli)
    for name, (_, _, line) in LAZY_COMMANDS.items():
        command = cli.get_command(context, name)
        assert command is not None
        if "not available" not in (command.short_help or ""):
            assert (command.help or "").splitlines()[0].strip() == line, name


def test_a_lazy_command_s_variable_is_known_without_running_it(interface_file: Path, tmp_path: Path) -> None:
    """LOCKSTEP_DIGESTS_ONLY (approve's) is read by a command that `hash` does not import: it is no unknown
    variable, and the approve command is imported only because a LOCKSTEP_* variable is set."""
    assert set(ENVIRONMENT_RULED) <= set(LAZY_COMMANDS)
    env = {"PATH": "/usr/bin:/bin", "LOCKSTEP_DIGESTS_ONLY": "1", "LOCKSTEP_LISTEN": "127.0.0.1:9000"}
    modules, stderr = _run(["hash", str(interface_file)], tmp_path, env)
    assert "warning" not in stderr
    assert "lockstep.cli.approve" in modules
