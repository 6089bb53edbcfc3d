"""Which sockets of a network namespace could answer a peer: parsing of the kernel's socket tables.

Every container of a pod shares one network namespace, so the tables under ``/proc/net`` (``tcp``, ``tcp6``,
``udp``, ``udp6``, ``udplite``, ``udplite6``, ``raw``, ``raw6``, ``packet``, and ``sctp/eps`` where the kernel has
SCTP) list every socket of the pod, whichever
container holds it. The sidecar's exposure watch reads them and calls :func:`exposed_sockets` with
the inodes of its own sockets: anything else that a peer off the pod could reach is a path past the in-line
proxy (ServerExposed). Pure parsing: the caller reads the files.

What counts as reachable:

* a listening TCP socket on an address that is not loopback (``0.0.0.0``, ``::``, the pod's IP, ...);
* a UDP or UDP-Lite socket bound to such an address and not connected to one peer;
* any raw socket (IPv4 or IPv6) and any packet socket, whatever it is bound to: either can read the agents'
  packets on the pod's interface and forge the answer (security review 2, S6-10);
* any SCTP endpoint: the sidecar holds none, and a Service may route SCTP to the pod.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["INET_TABLES", "TABLES", "WHOLE_TABLES", "ExposedSocket", "SocketTableError", "exposed_sockets"]

#: The tables of IP sockets, and whether their addresses are IPv6.
INET_TABLES: Mapping[str, bool] = {"tcp": False, "tcp6": True, "udp": False, "udp6": True, "udplite": False,
                                   "udplite6": True, "raw": False, "raw6": True}
#: Tables whose every socket not the sidecar's counts, and the column of their inode (from the end for packet,
#: whose last column it is; SCTP endpoints list their addresses after it).
WHOLE_TABLES: Mapping[str, int] = {"packet": -1, "sctp/eps": 7}
TABLES = (*INET_TABLES, *WHOLE_TABLES)
TCP_LISTEN = 0x0A  # include/net/tcp_states.h
INODE_COLUMN = 9  # sl local rem st tx:rx tr:when retrnsmt uid timeout inode


class SocketTableError(ValueError):
    """A socket table line that cannot be read."""


@dataclass(frozen=True)
class ExposedSocket:
    """A socket a peer off the pod could reach: its table and, for an IP socket, its local address."""

    table: str
    inode: int
    address: str = ""  # "10.0.0.7:9000", "[::]:8080"; "" for a packet socket

    def describe(self) -> str:
        """``tcp6 [::]:8080``, ``packet``: what a report and a condition message name."""
        return f"{self.table} {self.address}" if self.address else self.table


@dataclass(frozen=True)
class _InetEntry:
    local: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int
    remote: ipaddress.IPv4Address | ipaddress.IPv6Address
    remote_port: int
    state: int
    inode: int


def _address(hex_text: str, ipv6: bool) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The kernel prints each 32-bit word of the address as a native-endian integer in hex."""
    words = 4 if ipv6 else 1
    if len(hex_text) != 8 * words:
        raise SocketTableError(f"an address of {len(hex_text)} hex digits")
    packed = b"".join(int(hex_text[8 * i: 8 * i + 8], 16).to_bytes(4, sys.byteorder) for i in range(words))
    return ipaddress.IPv6Address(packed) if ipv6 else ipaddress.IPv4Address(packed)


def _endpoint(text: str, ipv6: bool) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    address, _, port = text.partition(":")
    try:
        return _address(address, ipv6), int(port, 16)
    except ValueError as error:
        raise SocketTableError(f"an endpoint {text!r}: {error}") from None


def _inet_entries(text: str, ipv6: bool) -> list[_InetEntry]:
    entries = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if not fields:
            continue
        if len(fields) <= INODE_COLUMN:
            raise SocketTableError(f"a line of {len(fields)} columns")
        local, port = _endpoint(fields[1], ipv6)
        remote, remote_port = _endpoint(fields[2], ipv6)
        try:
            entries.append(_InetEntry(local, port, remote, remote_port, int(fields[3], 16), int(fields[INODE_COLUMN])))
        except ValueError as error:
            raise SocketTableError(f"a line {line.strip()!r}: {error}") from None
    return entries


def _inodes(text: str, column: int) -> list[int]:
    inodes = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if fields:
            try:
                inodes.append(int(fields[column]))
            except (ValueError, IndexError):
                raise SocketTableError(f"a line {line.strip()!r}") from None
    return inodes


def _loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _reachable(table: str, entry: _InetEntry) -> bool:
    if table.startswith("raw"):
        return True
    if _loopback(entry.local):
        return False
    if table.startswith("tcp"):
        return entry.state == TCP_LISTEN
    return entry.remote_port == 0 and entry.remote.is_unspecified  # a connected UDP socket hears one peer only


def _format(address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


def exposed_sockets(tables: Mapping[str, str], own: Iterable[int]) -> tuple[ExposedSocket, ...]:
    """The sockets in ``tables`` (name -> the file's text; a missing table is left out) that a peer off the pod
    could reach and whose inode is not in ``own``, in table order. SocketTableError for an unreadable line."""
    mine = frozenset(own)
    found: list[ExposedSocket] = []
    for table, ipv6 in INET_TABLES.items():
        if table in tables:
            found += [ExposedSocket(table, entry.inode, _format(entry.local, entry.port))
                      for entry in _inet_entries(tables[table], ipv6)
                      if entry.inode not in mine and _reachable(table, entry)]
    for table, column in WHOLE_TABLES.items():
        if table in tables:
            kind = table.partition("/")[0]
            found += [ExposedSocket(kind, inode) for inode in _inodes(tables[table], column) if inode not in mine]
    return tuple(found)
