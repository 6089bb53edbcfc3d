"""Serving a :class:`~lockstep.proxy.app.ProxyApp`: the listening sockets (both address families on a wildcard
address, or fail) and aiohttp's runner with the connection guard installed."""

from __future__ import annotations

import errno
import socket
from typing import Protocol

from aiohttp import web

from lockstep.proxy.limits import ConnectionGuard

__all__ = ["LINGERING_TIME", "WILDCARDS", "ProxyBindError", "Servable", "serve_proxy", "wildcard_sockets"]

#: Seconds an unread request body (an isolated pod's, a refused Host's) is discarded for before the connection
#: closes (aiohttp's default is 10): the client gets its answer, and spends little of the proxy's time.
LINGERING_TIME = 1.0


class ProxyBindError(OSError):
    """The proxy could not listen on one of the address families the host has: something else holds its
    port there (the application, answering agents past the proxy)."""


class Servable(Protocol):
    """What serving needs of a ProxyApp (lockstep.proxy.app imports this module, not the other way round)."""

    guard: ConnectionGuard

    def web_app(self) -> web.Application: ...

    def listening_on(self, host: str, port: int) -> None: ...


async def serve_proxy(app: Servable, host: str, port: int, *, shutdown_timeout: float = 5.0) -> web.AppRunner:
    """Start serving on ``host:port``; return the runner (``await runner.cleanup()`` to stop).

    A wildcard ``host`` ("0.0.0.0", "::" or "") listens on both address families, on a socket each; if the
    port cannot be had on a family this host has (the application took it there first), ProxyBindError:
    agents on that family would reach the application instead.

    On stop, open streams (a GET stream, ``subscriptions/listen``) get ``shutdown_timeout``
    seconds before they are cut: clients reconnect, to this proxy or the next one."""
    runner = web.AppRunner(app.web_app(), handle_signals=False, access_log=None, shutdown_timeout=shutdown_timeout,
                           lingering_time=LINGERING_TIME)
    await runner.setup()
    assert runner.server is not None
    app.guard.install(runner.server)
    try:
        if host in WILDCARDS:
            for sock in wildcard_sockets(port):
                await web.SockSite(runner, sock).start()
        else:
            await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = port or int(runner.addresses[0][1])
    app.listening_on(host, bound)
    return runner


#: Listen addresses that mean "every address of this pod".
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def wildcard_sockets(port: int) -> list[socket.socket]:
    """Listening sockets on ``port`` (0: one free port for both) for every address of each family the host has:
    ``0.0.0.0`` and ``[::]`` (IPv6 only, so that the two never overlap). A family the kernel lacks is
    skipped; a port taken on a family it has raises ProxyBindError."""
    sockets: list[socket.socket] = []
    try:
        for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            sock = _listening(family, address, port)
            if sock is not None:
                sockets.append(sock)
                port = port or sock.getsockname()[1]
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise ProxyBindError(errno.EAFNOSUPPORT, f"no address family to listen on port {port}")
    return sockets


def _listening(family: socket.AddressFamily, address: str, port: int) -> socket.socket | None:
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as error:
        if error.errno in (errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT):
            return None  # the kernel has no such family
        raise
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((address, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError as error:
        sock.close()
        if family == socket.AF_INET6 and error.errno == errno.EADDRNOTAVAIL:
            return None  # IPv6 is disabled in this pod
        raise ProxyBindError(error.errno, f"cannot listen on [{address}]:{port}: {error.strerror}; something else "
                                          f"holds the port there") from None
    return sock
