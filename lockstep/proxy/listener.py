"""Who may talk to the proxy's listener: DNS-rebinding protection by ``Host`` and ``Origin``.

A web page can reach a server on the desktop's loopback by rebinding its own name to 127.0.0.1: the
browser then sends ``Host: evil.example.com`` (and ``Origin: http://evil.example.com``). MCP's SDKs refuse
such requests on loopback listeners; so does the proxy, before anything reaches the server, and it
forwards the client's ``Host`` so that the server's own check still sees it.

Patterns (``--allowed-hosts``, ``--allowed-origins``), compared case-insensitively, as the MCP SDKs write
them: ``localhost:8090`` (exact), ``localhost:*`` (any port), ``http://localhost:*`` (an origin on any
port), ``*`` (anything: no check).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["HostPolicy", "is_loopback", "upstream_host_headers"]

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether a listen address is loopback only (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostPolicy:
    """The ``Host`` and ``Origin`` values the listener accepts; None: that header is not checked."""

    allowed_hosts: tuple[str, ...] | None
    allowed_origins: tuple[str, ...] | None

    @classmethod
    def of(cls, hosts: Iterable[str] | None, origins: Iterable[str] | None) -> HostPolicy:
        def patterns(values: Iterable[str] | None) -> tuple[str, ...] | None:
            if values is None:
                return None
            cleaned = tuple(value.strip().lower().rstrip("/") for value in values if value.strip())
            return None if "*" in cleaned else cleaned

        return cls(patterns(hosts), patterns(origins))

    @classmethod
    def for_listener(cls, host: str, port: int, hosts: Iterable[str] | None = None,
                     origins: Iterable[str] | None = None) -> HostPolicy:
        """The policy of a listener on ``host:port``: the given lists, else the default.

        Default on a loopback listener: the MCP SDKs' own (the loopback names with this port; origins
        of the loopback names, any port, http or https). On any other listener (the sidecar's, reached
        through a Service by names and pod IPs the proxy cannot know): no check."""
        loopback = is_loopback(host)
        if hosts is None and loopback:
            hosts = [f"{name}:{port}" for name in _LOOPBACK_NAMES]
            if port == 80:
                hosts += list(_LOOPBACK_NAMES)
        if origins is None and loopback:
            origins = [f"{scheme}://{name}:*" for scheme in ("http", "https") for name in _LOOPBACK_NAMES]
        return cls.of(hosts, origins)

    @property
    def checks(self) -> bool:
        return self.allowed_hosts is not None or self.allowed_origins is not None

    def refusal(self, host: str | None, origin: str | None) -> str | None:
        """Why a request with these headers is refused (None: accepted). A request without ``Origin``
        (not from a browser) is accepted; one without ``Host`` is not, where ``Host`` is checked."""
        if self.allowed_hosts is not None and not _matches((host or "").strip().lower(), self.allowed_hosts):
            return (f"Host {host!r} is not allowed (DNS rebinding protection; allowed: "
                    f"{', '.join(self.allowed_hosts)}; set --allowed-hosts)")
        if origin is not None and self.allowed_origins is not None \
                and not _matches(origin.strip().lower().rstrip("/"), self.allowed_origins):
            return (f"Origin {origin!r} is not allowed (DNS rebinding protection; allowed: "
                    f"{', '.join(self.allowed_origins)}; set --allowed-origins)")
        return None


def _matches(value: str, patterns: tuple[str, ...]) -> bool:
    if not value:
        return False
    for pattern in patterns:
        if value == pattern:
            return True
        if pattern.endswith(":*"):
            base = pattern[:-2]
            if value == base or (value.startswith(base + ":") and value[len(base) + 1:].isdigit()):
                return True
    return False


def upstream_host_headers(headers: Mapping[str, str], upstream_host: str | None, upstream_origin: str,
                          listen_port: int | None) -> list[tuple[str, str]]:
    """``Host`` (and ``Origin``) as the upstream gets them: ``upstream_host`` when set; else the client's, except
    that a loopback name with this listener's port (the client reached the proxy, as the server's own allow-list
    would have it reach the server) takes the upstream's port, in ``Host`` and in an ``Origin`` of the same host: a
    server that allows only its own port keeps working, and a foreign name still reaches the server's own check
    unchanged."""
    if upstream_host is not None:
        return [("Host", upstream_host)]
    host = headers.get("Host")
    if not host:
        return []
    name, _, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not name or not port.isdigit():
        name, port = host, ""
    upstream_port = urlsplit(upstream_origin).port
    if not is_loopback(name) or upstream_port is None or (port or "80") != str(listen_port):
        return [("Host", host)]
    mapped = f"{name}:{upstream_port}"
    result = [("Host", mapped)]
    origin = headers.get("Origin")
    for scheme in ("http", "https"):
        if origin is not None and origin.lower().rstrip("/") == f"{scheme}://{host}".lower():
            result.append(("Origin", f"{scheme}://{mapped}"))
    return result
