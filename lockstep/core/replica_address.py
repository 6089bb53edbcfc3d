"""Where an operator replica takes reports (the peering object, the answers' ``reportTo``, ``--advertise-address``):
one rule for what such an address is. Pure."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

__all__ = ["AddressError", "ReplicaAddress", "replica_host"]


class AddressError(ValueError):
    """A replica address that is not a unicast pod address (and port)."""


def replica_host(value: Any) -> str:
    """A replica's own address, as ``--advertise-address`` gives it: an IP literal of a unicast pod
    address. Never a name (DNS would decide where reports go), loopback (the pod's own, where a
    container of the sidecar's pod could listen), unspecified, link-local, multicast, broadcast,
    reserved, IPv4-mapped or with a zone."""
    if not isinstance(value, str) or not value or len(value) > 45 or "%" in value:
        raise AddressError(f"must be an IP address, not {value!r:.80}")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise AddressError(f"must be an IP address, not {value!r:.80}") from None
    mapped = isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None
    if (address.is_loopback or address.is_unspecified or address.is_link_local or address.is_multicast
            or address.is_reserved or mapped or address == ipaddress.IPv4Address("255.255.255.255")):
        raise AddressError(f"{value} is not a unicast pod address")
    return str(address)


@dataclass(frozen=True)
class ReplicaAddress:
    """Where a replica takes reports: a unicast pod IP (replica_host's rules) and a port. The replica
    publishes it in the peering object and names it in its answers (``reportTo``); the peering, the
    sidecar and ``--advertise-address`` all read it with :meth:`parse`, so one rule decides what an
    address is. Written ``ip:port`` or ``[v6]:port``."""

    host: str
    port: int

    @classmethod
    def of(cls, host: Any, port: Any) -> ReplicaAddress:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise AddressError(f"the port must be 1-65535, not {port!r:.20}")
        return cls(replica_host(host), port)

    @classmethod
    def parse(cls, value: Any) -> ReplicaAddress:
        """``ip:port`` or ``[v6]:port``; AddressError for anything else (a name, loopback, a bare v6)."""
        if not isinstance(value, str) or len(value) > 64:
            raise AddressError(f"must be an IP address and port, not {value!r:.80}")
        host, _, port = value.rpartition(":")
        bracketed = host.startswith("[") and host.endswith("]")
        host = host[1:-1] if bracketed else host
        if not (port.isascii() and port.isdigit()):
            raise AddressError(f"must be an IP address and port, not {value!r:.80}")
        address = cls.of(host, int(port))
        if (":" in address.host) != bracketed:
            raise AddressError(f"must be an IP address and port, not {value!r:.80}")
        return address

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
