"""The ``lockstep`` command line.

Conventions (kubectl's): human output by default, ``--json``/``-o json`` for
machines; stdout carries only the result, errors go to stderr as one line;
exit 0 = success or no drift, 1 = drift, 2 = unusable input or unreachable
server. Every option can also come from a ``LOCKSTEP_<OPTION>`` environment
variable (a flag beats the environment, which beats the default).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from lockstep import __version__
from lockstep.cli.approve import approve_command
from lockstep.cli.commands import EXIT_ERROR, diff_command, hash_command, snapshot_command, verify_command
from lockstep.cli.targets import UsageError
from lockstep.core import LockstepError

__all__ = ["cli", "main"]

#: Subcommands that live with their component and are imported only when used.
LAZY_COMMANDS = {
    "operator": ("lockstep.operator.cli", "operator_command", "Run the Lockstep operator (kopf)."),
    "sidecar": ("lockstep.sidecar.cli", "sidecar_command", "Run the sidecar that measures an MCP server."),
    "demo": ("lockstep.cli.demo", "demo_command", "Run the whole loop on one machine (from a source checkout)."),
}


class LockstepGroup(click.Group):
    """A group whose heavy subcommands are imported on first use, and whose errors become exit code 2."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module_name, attribute, short_help = LAZY_COMMANDS[name]
            try:
                return getattr(importlib.import_module(module_name), attribute)  # type: ignore[no-any-return]
            except (ImportError, AttributeError):
                return click.Command(name, short_help=f"{short_help} (not available in this build)",
                                     callback=lambda: _unavailable(name))
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (UsageError, LockstepError) as error:
            click.echo(f"error: {error}", err=True)
            ctx.exit(EXIT_ERROR)


def _unavailable(name: str) -> None:
    raise UsageError(f"the {name} command is not available in this build")


@click.group(cls=LockstepGroup, context_settings={"help_option_names": ["-h", "--help"],
                                                    "auto_envvar_prefix": "LOCKSTEP"})
@click.version_option(__version__, prog_name="lockstep")
def cli() -> None:
    """Lockstep pins the public interface of MCP servers.

    \b
    Pin a server, then gate changes on it:
      lockstep snapshot http://127.0.0.1:8000/mcp --name weather > weather.yaml
      lockstep verify http://127.0.0.1:8000/mcp --against weather.yaml
    """


for _command in (hash_command, snapshot_command, verify_command, diff_command, approve_command):
    cli.add_command(_command)


def main() -> None:
    try:
        cli.main(prog_name="lockstep", standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)
