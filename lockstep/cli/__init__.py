"""The ``lockstep`` command line.

Conventions (kubectl's): human output by default, ``--json``/``-o json`` for
machines; stdout carries only the result, errors go to stderr as one line;
exit 0 = success or no drift, 1 = drift, 2 = unusable input or unreachable
server.

Environment: every option can also come from ``LOCKSTEP_<OPTION>``, the long option name in capitals
with dashes as underscores (``--fail-on`` is ``LOCKSTEP_FAIL_ON``), the same for every command; a
repeatable option takes one value per line (``LOCKSTEP_HEADER``, ``LOCKSTEP_IGNORE``). A flag beats the
environment, which beats the default. A ``LOCKSTEP_*`` variable that no part of Lockstep reads is
reported on stderr, so that a misspelt setting in CI is never silently dropped.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from lockstep import __version__
from lockstep.cli.commands import EXIT_ERROR, diff_command, hash_command, snapshot_command, verify_command
from lockstep.cli.targets import UsageError
from lockstep.core import LockstepError
from lockstep.core.names import SIDECAR_ENV

__all__ = ["cli", "main"]

#: Subcommands imported only when used, with the line --help shows for them (their docstring's first line,
#: a test keeps them equal): importing approve costs the cluster code, proxy aiohttp, operator kopf, and
#: the light commands start in under 150 ms (bench/cli_startup.py).
LAZY_COMMANDS = {
    "approve": ("lockstep.cli.approve", "approve_command", "Approve a revision that the pods of RESOURCE serve."),
    "proxy": ("lockstep.cli.proxy", "proxy_command",
              "Relay MCP traffic to UPSTREAM, letting through only the approved interface."),
    "operator": ("lockstep.operator.cli", "operator_command", (
        "Run the Lockstep operator: the report endpoint, judging, status, Events, metrics and webhooks.")),
    "sidecar": ("lockstep.sidecar.cli", "sidecar_command", (
        "Measure the MCP server in this pod and report to the Lockstep operator.")),
    "demo": ("lockstep.cli.demo", "demo_command", (
        "Run the whole loop: pin, verify, rug pull, isolate, diff, approve, back in the Service.")),
    "check": ("lockstep.cli.check", "check_command", "Check the cluster before and after installing Lockstep."),
    "keys": ("lockstep.cli.signing", "keys_command", "Make approver keys for signed approvals."),
    "sign": ("lockstep.cli.signing", "sign_command", (
        "Sign the approved revisions of an MCPServerInterface manifest (adds a signature to a signed one).")),
    "verify-approval": ("lockstep.cli.signing", "verify_approval_command", (
        "Check that every approved revision of a manifest is signed as an MCPApprovalPolicy requires (for CI).")),
}


class LockstepGroup(click.Group):
    """A group whose heavy subcommands are imported on first use, and whose errors become exit code 2."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module_name, attribute, short_help = LAZY_COMMANDS[name]
            try:
                command: click.Command = getattr(importlib.import_module(module_name), attribute)
            except (ImportError, AttributeError):
                return click.Command(name, short_help=f"{short_help} (not available in this build)",
                                     callback=lambda: _unavailable(name))
            if name in ENVIRONMENT_RULED:
                apply_environment_rule(command)
            return command
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of --help, the lazy commands' lines from LAZY_COMMANDS: listing them must not
        import kopf, aiohttp or the mcp SDK (lockstep --help answers as fast as kubectl)."""
        rows = []
        for name in self.list_commands(ctx):
            if name in LAZY_COMMANDS:
                rows.append((name, LAZY_COMMANDS[name][2]))
                continue
            command = super().get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (UsageError, LockstepError) as error:
            click.echo(f"error: {error}", err=True)
            ctx.exit(EXIT_ERROR)


def _unavailable(name: str) -> None:
    raise UsageError(f"the {name} command is not available in this build")


#: LOCKSTEP_* variables read by the other components (sidecar settings, operator options) and by the
#: project's own tooling; tests/cli/test_environment.py keeps this list equal to what they read.
READ_ELSEWHERE = frozenset({
    *SIDECAR_ENV,  # the sidecar's (lockstep.core.names); then the operator's options
    "LOCKSTEP_ALLOW_OPT_OUT", "LOCKSTEP_BODY_LIMIT", "LOCKSTEP_HEALTH_PORT", "LOCKSTEP_MAX_CLOCK_SKEW",
    "LOCKSTEP_METRICS_PORT", "LOCKSTEP_NAMESPACES", "LOCKSTEP_OBSERVED_CONFIGMAP_LIMIT",
    "LOCKSTEP_OBSERVED_CONFIGMAP_SIZE_LIMIT", "LOCKSTEP_OWN_NAMESPACE", "LOCKSTEP_PEERING",
    "LOCKSTEP_RATE_BURST",
    "LOCKSTEP_RATE_PER_POD", "LOCKSTEP_REPORT_PORT", "LOCKSTEP_REPORT_URL", "LOCKSTEP_SIDECAR_IMAGE",
    "LOCKSTEP_SIDECAR_RESOURCES", "LOCKSTEP_SOURCE_BURST", "LOCKSTEP_SOURCE_RATE", "LOCKSTEP_STATUS_WRITE_INTERVAL",
    "LOCKSTEP_TLS_CERT",
    "LOCKSTEP_TLS_KEY", "LOCKSTEP_TOKEN_EXPIRATION", "LOCKSTEP_VERBOSE", "LOCKSTEP_WATCH_LABEL_SELECTOR",
    "LOCKSTEP_WATCH_POD_SELECTOR",
    "LOCKSTEP_WEBHOOK_PORT",
})
#: The lazy commands whose options follow the LOCKSTEP_<OPTION> rule (the others read their own variables).
ENVIRONMENT_RULED = ("approve", "proxy")
#: Prefixes of the project's test and benchmark settings (tests/e2e, bench/, the envtest cache).
TOOLING_PREFIXES = ("LOCKSTEP_E2E_", "LOCKSTEP_BENCH_", "LOCKSTEP_ENVTEST_")


class _Lines(click.types.StringParamType):
    """Text whose environment value holds one value per line (a header value may contain spaces)."""

    def split_envvar_value(self, rv: str) -> list[str]:  # type: ignore[override]
        return [line.strip() for line in rv.splitlines() if line.strip()]


def apply_environment_rule(command: click.Command) -> None:
    """Give every option of ``command`` its ``LOCKSTEP_<OPTION>`` variable (see the module doc)."""
    for param in command.params:
        if not isinstance(param, click.Option) or not param.opts:
            continue
        if not param.envvar:
            param.envvar = "LOCKSTEP_" + max(param.opts, key=len).lstrip("-").replace("-", "_").upper()
        if param.multiple and type(param.type) is click.types.StringParamType:
            param.type = _Lines()


def _warn_unknown_environment(ctx: click.Context) -> None:
    """Warn of each LOCKSTEP_* variable that no command reads (the lazy commands are imported only when
    such a variable is set, so that a clean environment costs nothing at start)."""
    unread = [name for name in sorted(os.environ)
              if name.startswith("LOCKSTEP_") and name not in READ_ELSEWHERE and not name.startswith(TOOLING_PREFIXES)]
    if not unread:
        return
    import difflib

    commands = [*cli.commands.values(), *(cli.get_command(ctx, name) for name in ENVIRONMENT_RULED)]
    known = READ_ELSEWHERE | {str(param.envvar) for command in commands if command is not None
                              for param in command.params if isinstance(param, click.Option) and param.envvar}
    for name in unread:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            click.echo(f"warning: {name} is set but no part of Lockstep reads it{hint}", err=True)


@click.group(cls=LockstepGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lockstep")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Lockstep pins the public interface of MCP servers.

    \b
    Pin a server, then gate changes on it:
      lockstep snapshot http://127.0.0.1:8000/mcp --name weather > weather.yaml
      lockstep verify http://127.0.0.1:8000/mcp --against weather.yaml
    """
    if ctx.invoked_subcommand not in LAZY_COMMANDS:  # the sidecar and operator read their own variables
        _warn_unknown_environment(ctx)


for _command in (hash_command, snapshot_command, verify_command, diff_command):
    apply_environment_rule(_command)
    cli.add_command(_command)


def main() -> None:
    try:
        cli.main(prog_name="lockstep", standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)
