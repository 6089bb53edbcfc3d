"""``lockstep proxy``: put the in-line check in front of any MCP server (docs/proxy.md)."""

from __future__ import annotations

import asyncio
import logging
import signal

import click

from lockstep.cli.targets import UsageError, load_document, pinned_from

__all__ = ["proxy_command"]

MODES = ("quarantine", "block", "audit")


def _host_port(value: str, option: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"{option} wants HOST:PORT (such as 127.0.0.1:8090), not {value!r}")
    return host.strip("[]"), int(port)


def _list(value: str | None, option: str) -> list[str] | None:
    if value is None:
        return None
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise UsageError(f"{option} wants a comma-separated list (such as localhost:8090,127.0.0.1:8090), or *")
    return items


@click.command("proxy")
@click.option("--upstream", required=True, metavar="URL",
              help="The MCP server to protect, such as http://127.0.0.1:8080/mcp (its origin gets every path).")
@click.option("--against", required=True, metavar="FILE",
              help="The approved interface: a manifest (every revision's components are approved) or a snapshot.")
@click.option("--listen", default="127.0.0.1:8090", show_default=True, metavar="HOST:PORT",
              help="Where clients connect instead of the server.")
@click.option("--mode", type=click.Choice(MODES), default="quarantine", show_default=True,
              help="quarantine: withhold what is not approved; block: refuse the whole response; "
                   "audit: pass everything and report it.")
@click.option("--allowed-hosts", default=None, metavar="LIST",
              help="Host headers the proxy accepts, comma-separated (localhost:8090, localhost:*; * for any). "
                   "Default on a loopback --listen: localhost, 127.0.0.1 and [::1] with its port "
                   "(DNS-rebinding protection, as the MCP SDKs do); elsewhere: any.")
@click.option("--allowed-origins", default=None, metavar="LIST",
              help="Origin headers the proxy accepts, comma-separated (http://localhost:*; * for any); a request "
                   "without Origin is not a browser's and passes. Default on a loopback --listen: http(s) "
                   "origins of the loopback names, any port; elsewhere: any.")
@click.option("--upstream-host", default=None, metavar="HOST[:PORT]",
              help="The Host header sent to UPSTREAM. Default on a loopback --listen: the client's (so the "
                   "server's own DNS-rebinding check sees it); elsewhere: UPSTREAM's host:port.")
@click.option("--metrics", default=None, metavar="HOST:PORT", help="Serve Prometheus metrics on /metrics here.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def proxy_command(upstream: str, against: str, listen: str, mode: str, allowed_hosts: str | None,
                  allowed_origins: str | None, upstream_host: str | None, metrics: str | None,
                  log_level: str) -> None:
    """Relay MCP traffic to UPSTREAM, letting through only the approved interface.

    Every tools/list, prompts/list, resources/list, resources/templates/list page and the
    instructions any client receives are checked component by component against FILE.
    Calls to a withheld component are refused; allowed tools/call requests are logged with
    the approved digest they were checked against. Every answer is read the way the most
    lenient client reads it (any response id, batches, loose Content-Types) and judged, or
    refused. Runs until interrupted.

    \b
      lockstep proxy --upstream http://127.0.0.1:8080/mcp --against weather.yaml
    """
    from lockstep.core.gate import ComponentGate
    from lockstep.proxy.app import ProxyApp, ProxyConfigError
    from lockstep.proxy.policy import Mode

    pinned = pinned_from(load_document(against), against)
    if not pinned.revisions:
        raise UsageError(f"{against}: no approved revision: the proxy would withhold everything")
    host, port = _host_port(listen, "--listen")
    metrics_address = _host_port(metrics, "--metrics") if metrics else None
    gate = ComponentGate.of(pinned.revisions, pinned.ignore)
    try:
        app = ProxyApp(upstream, gate, Mode(mode), allowed_hosts=_list(allowed_hosts, "--allowed-hosts"),
                       allowed_origins=_list(allowed_origins, "--allowed-origins"),
                       upstream_host=upstream_host or None)
    except ProxyConfigError as error:
        raise UsageError(str(error)) from None
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    components = sum(len(revision.digest.components) for revision in pinned.revisions)
    app.listening_on(host, port)
    checks = ("Host/Origin checked" if app.hosts.checks else "Host/Origin not checked")
    click.echo(f"lockstep proxy: http://{listen} -> {app.upstream_origin} ({mode}; {components} approved "
               f"components in {len(pinned.revisions)} revision(s) from {against}; {checks})", err=True)
    try:
        asyncio.run(_serve(app, host, port, metrics_address))
    except OSError as error:
        raise UsageError(f"cannot listen on {listen}: {error.strerror or error}") from None


async def _serve(app: object, host: str, port: int, metrics: tuple[str, int] | None) -> None:
    from aiohttp import web

    from lockstep.proxy.app import ProxyApp
    from lockstep.proxy.serving import serve_proxy

    assert isinstance(app, ProxyApp)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    runner = await serve_proxy(app, host, port)
    metrics_runner = None
    try:
        if metrics is not None:
            metrics_runner = web.AppRunner(app.metrics.web_app(), access_log=None)
            await metrics_runner.setup()
            await web.TCPSite(metrics_runner, *metrics).start()
        await stop.wait()
    finally:
        await runner.cleanup()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
