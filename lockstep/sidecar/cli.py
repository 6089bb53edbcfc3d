"""``lockstep sidecar``: the command the injected container runs."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import click

from lockstep.core.names import ENV_SIDECAR_PORT
from lockstep.core.wire import DEFAULT_SIDECAR_PORT
from lockstep.sidecar.lean import skip_package_inits
from lockstep.sidecar.settings import SettingsError, SidecarSettings

__all__ = ["sidecar_command"]

logger = logging.getLogger("lockstep.sidecar")


@click.command("sidecar")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def sidecar_command(log_level: str) -> None:
    """Measure the MCP server in this pod and report to the Lockstep operator.

    Settings come from the LOCKSTEP_* environment that the webhook injects
    (see docs/sidecar.md). Runs until SIGTERM; exits (status 1) only when its
    in-line proxy cannot have its port on every address family of the pod.
    """
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    skip_package_inits()  # before the reader imports the mcp SDK: the sidecar needs its client half only
    from lockstep.proxy.serving import ProxyBindError

    try:
        asyncio.run(_main())
    except ProxyBindError as error:
        # Something else answers agents on the proxy's port: never become Ready (the container restarts).
        logger.error("The in-line proxy cannot listen: %s", error)
        raise SystemExit(1) from None


async def _main() -> None:
    from lockstep.sidecar.app import idle, run_sidecar

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        settings = SidecarSettings.from_env(os.environ)
    except SettingsError as error:
        # Exiting would only restart-loop the container; the pod stays unverified either way (fail closed).
        logger.error("Unusable settings, nothing will be probed: %s", error)
        await idle(_port_or_default(), stop)
        return
    await run_sidecar(settings, stop)


def _port_or_default() -> int:
    raw = os.environ.get(ENV_SIDECAR_PORT, "")
    return int(raw) if raw.isdigit() else DEFAULT_SIDECAR_PORT
