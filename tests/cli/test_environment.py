"""One environment rule for the CLI (issue 12): `LOCKSTEP_<OPTION>` for every option of every command,
one value per line for repeatable ones, and a warning for a `LOCKSTEP_*` variable nothing reads. Before,
LOCKSTEP_FAIL_ON, LOCKSTEP_IGNORE and LOCKSTEP_HEADER were silently ignored (the real names were
LOCKSTEP_<COMMAND>_<OPTION>), and a header value from the environment was split at its space."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from click.testing import CliRunner
from lockstep_testing.mcp_servers import MutableServer, serve_mcp_in_thread

from lockstep.cli import READ_ELSEWHERE, TOOLING_PREFIXES, cli

TOOL = {"name": "get_alerts", "description": "Alerts.", "inputSchema": {"type": "object"},
        "_meta": {"build": "1"}}


def run(*args: str, env: dict[str, str]) -> object:
    return CliRunner().invoke(cli, list(args), env=env)


def test_fail_on_and_ignore_from_the_environment(write):
    reworded = {"tools": [{**TOOL, "description": "Weather alerts."}]}
    pin = write("pin.json", {"tools": [TOOL]})
    changed = write("changed.json", reworded)
    assert run("verify", changed, "--against", pin, env={}).exit_code == 1
    assert run("verify", changed, "--against", pin, env={"LOCKSTEP_FAIL_ON": "high"}).exit_code == 0
    rebuilt = write("rebuilt.json", {"tools": [{**TOOL, "_meta": {"build": "2"}}]})
    ignoring = {"LOCKSTEP_IGNORE": "/tools/*/_meta/build\n/tools/*/title"}
    assert run("verify", rebuilt, "--against", pin, env=ignoring).exit_code == 0


def test_a_header_from_the_environment_keeps_its_spaces():
    server = MutableServer(tools=[copy.deepcopy(TOOL)], required_headers={"authorization": "Bearer s3cret token"})
    with serve_mcp_in_thread(server) as handle:
        env = {"LOCKSTEP_HEADER": "Authorization: Bearer s3cret token\nX-Trace: 1"}
        result = run("hash", handle.url, env=env)
    assert result.exit_code == 0, result.output
    assert any(request.get("x-trace") == "1" for request in server.http_requests)


def test_an_unknown_lockstep_variable_is_reported(write):
    result = run("hash", write("a.json", {"tools": [TOOL]}), env={"LOCKSTEP_FAIL_ONN": "high"})
    assert result.exit_code == 0
    assert "warning: LOCKSTEP_FAIL_ONN is set but no part of Lockstep reads it (did you mean LOCKSTEP_FAIL_ON?)" \
        in result.stderr
    quiet = run("hash", write("b.json", {"tools": [TOOL]}), env={"LOCKSTEP_E2E_TIMEOUT": "5"})
    assert "warning" not in quiet.stderr


def test_every_variable_the_other_components_read_is_known():
    """READ_ELSEWHERE is what the sidecar (its environment, lockstep.core.names.SIDECAR_ENV, which
    lockstep.core.wire.SidecarEnv reads, and any other name lockstep/sidecar/ writes out) and the operator's
    command read, neither more nor less."""
    from lockstep.core.names import SIDECAR_ENV
    from lockstep.operator.cli import operator_command

    root = Path(__file__).resolve().parents[2]
    sidecar = set(SIDECAR_ENV) | {name for path in (root / "lockstep" / "sidecar").glob("*.py")
                                  for name in re.findall(r"LOCKSTEP_[A-Z_]+", path.read_text())}
    operator = {str(param.envvar) for param in operator_command.params if getattr(param, "envvar", None)}
    assert READ_ELSEWHERE == sidecar | operator
    assert all(prefix.startswith("LOCKSTEP_") for prefix in TOOLING_PREFIXES)
