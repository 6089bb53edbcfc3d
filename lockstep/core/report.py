"""The observation a sidecar reports to the operator (``POST /v1/reports``).

Wire form (JSON)::

    {"formula": "lockstep/v1",
     "digest": "sha256:...",                   # aggregate, absent on failure
     "components": [{"kind", "name", "digest"}],
     "definitions": {...} | null,              # the interface document, for review
     "failure": null | {"reason": "ServerUnreachable" | "InterfaceInvalid", "message": "..."},
     "observedAt": "2026-11-22T02:00:00Z",
     "view": "default",
     "serverExposed": false,                   # the server answers on the pod's IP (absent: not checked)
     "exposedAt": "10.244.0.7:8080",           # where, when it does
     "exposedSockets": ["tcp 0.0.0.0:9000", "packet"],  # every socket past the proxy (at most 16)
     "bootId": "9f0c…",                        # freshness, stamped on every send (see Freshness)
     "bootTime": "2026-11-22T01:59:58Z",
     "sequence": 17,
     "sentAt": "2026-11-22T02:00:00Z",
     "sidecarVersion": "0.2.0",                # the sidecar's Lockstep version (absent before 0.2.0)
     "proxy": {"withheld": [...], "dropped": 0}}  # only from a sidecar that runs the proxy (ProxyReport)

The sidecar writes it with :func:`report_body`; the operator reads each part with its record's
``from_dict`` (Observation, Freshness, ProxyReport).

The pod is never named in the body: the operator takes it from the caller's
reviewed token. When ``definitions`` is present the operator digests it again
and refuses a report whose digests do not match (a forged or corrupted report).

A digest-only report leaves ``definitions`` out: the sidecar sends one when its
interface is the one the operator last accepted from it. The operator judges it
with the definitions it holds for that digest (re-checked against the reported
digests) or answers 428 ``DefinitionsRequired``, and the sidecar sends the full
report at once.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lockstep.core.digest import ComponentDigest, InterfaceDigest, digest_interface, ensure_formula
from lockstep.core.errors import FormulaError, InterfaceError, MalformedInterfaceError
from lockstep.core.model import DEFAULT_LIMITS, Interface, Limits

__all__ = [
    "MAX_EXPOSED_SOCKETS",
    "MAX_PROXY_ENTRIES",
    "MAX_VERSION_LENGTH",
    "FailureReason",
    "Freshness",
    "Observation",
    "ProxyReport",
    "ReportError",
    "WithheldComponent",
    "report_body",
]

DEFAULT_VIEW = "default"


class ReportError(MalformedInterfaceError):
    """A report that is not well formed or whose digests do not match its definitions."""

    reason = "BadReport"


class FailureReason(str, enum.Enum):
    SERVER_UNREACHABLE = "ServerUnreachable"
    INTERFACE_INVALID = "InterfaceInvalid"


@dataclass(frozen=True)
class Observation:
    """What one probe of one pod's server found: an interface digest, or a failure."""

    observed_at: str
    digest: InterfaceDigest | None = None
    definitions: dict[str, Any] | None = None
    failure_reason: FailureReason | None = None
    failure_message: str = ""
    view: str = DEFAULT_VIEW
    #: The validated Interface of ``definitions``, whose own digests are ``digest`` (set by from_dict and
    #: of_interface, so that the judge neither parses nor digests them again); None: not known to be.
    interface: Interface | None = field(default=None, compare=False, repr=False)
    #: The sidecar found a socket in the pod, not its own, that peers off the pod can reach past the in-line
    #: proxy (lockstep.core.socket_tables; None: not checked, an older sidecar or not in a pod).
    server_exposed: bool | None = None
    #: The first such socket's address (``ip:port``), when ``server_exposed``.
    exposed_at: str = ""
    #: Every such socket, described (``tcp6 [::]:8080``, ``packet``; at most MAX_EXPOSED_SOCKETS).
    exposed_sockets: tuple[str, ...] = ()

    def exposed(self, exposed: bool | None, address: str = "", sockets: tuple[str, ...] = ()) -> Observation:
        """This observation with the result of the exposure check."""
        return replace(self, server_exposed=exposed, exposed_at=address if exposed else "",
                       exposed_sockets=sockets if exposed else ())

    @classmethod
    def of_interface(cls, interface: Interface, observed_at: str, *, view: str = DEFAULT_VIEW,
                     with_definitions: bool = True) -> Observation:
        return cls(observed_at, digest_interface(interface),
                   interface.to_document() if with_definitions else None, view=view,
                   interface=interface if with_definitions else None)

    @classmethod
    def of_failure(cls, reason: FailureReason, message: str, observed_at: str, *,
                   view: str = DEFAULT_VIEW) -> Observation:
        return cls(observed_at, failure_reason=reason, failure_message=message[:1024], view=view)

    @property
    def failed(self) -> bool:
        return self.failure_reason is not None

    def restamped(self, observed_at: str, view: str) -> Observation:
        """This observation as seen again at ``observed_at`` in ``view`` (dataclasses.replace, without its
        cost per digest-only report): every other field is this one's."""
        return Observation(observed_at, self.digest, self.definitions, self.failure_reason, self.failure_message,
                           view, self.interface, self.server_exposed, self.exposed_at, self.exposed_sockets)

    def as_reported_by(self, report: Observation) -> Observation:
        """This (held, full) observation with what a digest-only ``report`` of the same interface says of its own:
        when, in which view, and the exposure check, which changes without the interface changing."""
        return Observation(report.observed_at, self.digest, self.definitions, self.failure_reason,
                           self.failure_message, report.view, self.interface, report.server_exposed, report.exposed_at,
                           report.exposed_sockets)

    def to_dict(self, *, with_definitions: bool = True) -> dict[str, Any]:
        """The wire form; ``with_definitions=False``: a digest-only report (no ``definitions`` key)."""
        body: dict[str, Any] = {"observedAt": self.observed_at, "view": self.view}
        if self.digest is not None:
            body.update(self.digest.to_dict())
            if with_definitions:
                body["definitions"] = self.definitions
        if self.failure_reason is not None:
            body["failure"] = {"reason": self.failure_reason.value, "message": self.failure_message}
        if self.server_exposed is not None:
            body["serverExposed"] = self.server_exposed
            if self.exposed_at:
                body["exposedAt"] = self.exposed_at
            if self.exposed_sockets:
                body["exposedSockets"] = list(self.exposed_sockets)
        return body

    @classmethod
    def from_dict(cls, body: Any, limits: Limits = DEFAULT_LIMITS) -> Observation:
        """Parse and check a report body; raise ReportError with a one-line cause."""
        if type(body) is not dict and not isinstance(body, Mapping):  # a parsed body is a dict: no ABC check
            raise ReportError("a report must be a JSON object")
        observed_at = body.get("observedAt")
        view = body.get("view", DEFAULT_VIEW)
        if not isinstance(observed_at, str) or not isinstance(view, str):
            raise ReportError("a report needs observedAt and view strings")
        exposed, address, sockets = _exposure(body)
        failure = body.get("failure")
        if failure is not None:
            try:
                reason = FailureReason(failure["reason"])
                message = str(failure.get("message", ""))
            except (KeyError, ValueError, TypeError, AttributeError):
                raise ReportError(f"unknown failure {failure!r}") from None
            return cls.of_failure(reason, message, observed_at, view=view).exposed(exposed, address, sockets)
        entries = body.get("components") or []
        if not isinstance(entries, list):
            raise ReportError("components must be a list of {kind, name, digest}")
        claimed = _claimed_digest(body.get("formula"), body.get("digest"), entries)
        if claimed.digest != body.get("digest"):
            raise ReportError("the aggregate digest does not match the component digests")
        definitions = body.get("definitions")
        interface = None
        if definitions is not None:
            try:
                interface = Interface.from_document(definitions, limits)
                recomputed = digest_interface(interface)
            except InterfaceError as error:
                raise ReportError(f"definitions are not a valid interface: {error}") from None
            if recomputed != claimed:
                raise ReportError("the definitions do not match the reported digests")
        return cls(observed_at, claimed, definitions, view=view, interface=interface, server_exposed=exposed,
                   exposed_at=address if exposed else "", exposed_sockets=sockets if exposed else ())


def _exposure(body: Mapping[str, Any]) -> tuple[bool | None, str, tuple[str, ...]]:
    """``serverExposed`` (a boolean, or absent), ``exposedAt`` (an address, at most 64 characters) and
    ``exposedSockets`` (at most MAX_EXPOSED_SOCKETS described sockets)."""
    exposed, address = body.get("serverExposed"), body.get("exposedAt", "")
    sockets = body.get("exposedSockets", [])
    if exposed is not None and not isinstance(exposed, bool):
        raise ReportError("serverExposed must be true or false")
    if not isinstance(address, str) or len(address) > 64 or not _ADDRESS.match(address):
        raise ReportError("exposedAt must be an address and port")
    if not isinstance(sockets, list) or len(sockets) > MAX_EXPOSED_SOCKETS or not all(
            isinstance(socket, str) and len(socket) <= 72 and _SOCKET.match(socket) for socket in sockets):
        raise ReportError(f"exposedSockets must be at most {MAX_EXPOSED_SOCKETS} sockets such as 'tcp6 [::]:8080'")
    return exposed, address, tuple(sockets)


_ADDRESS = re.compile(r"^(|[0-9a-fA-F.:\[\]]+:[0-9]{1,5})$")
_SOCKET = re.compile(r"^(tcp|tcp6|udp|udp6|udplite|udplite6|raw|raw6|packet|sctp)( [0-9a-fA-F.:\[\]]+:[0-9]{1,5})?$")
#: The most sockets a report names (the sidecar lists the first ones it saw).
MAX_EXPOSED_SOCKETS = 16


class _ClaimedDigests:
    """The digests of recent reports, by aggregate: a report whose formula and components are the same
    strings in the same (sorted) order as one of these gets the same InterfaceDigest without digesting
    again (the aggregate is a function of the component digests alone: nothing to invalidate). Bounded in
    entries and in components held (a pod could send many made-up ones): the oldest go first."""

    def __init__(self, size: int = 4096, components: int = 50_000) -> None:
        self.size, self.components = size, components
        self._by_aggregate: dict[str, InterfaceDigest] = {}
        self._held = 0  # components in _by_aggregate

    def get(self, formula: Any, aggregate: Any, entries: list[Any]) -> InterfaceDigest | None:
        known = self._by_aggregate.get(aggregate) if type(aggregate) is str else None
        if known is not None and known.formula == formula and _same_components(known.components, entries):
            return known
        return None

    def put(self, claimed: InterfaceDigest) -> None:
        if len(claimed.components) > self.components // 10:
            return
        previous = self._by_aggregate.pop(claimed.digest, None)
        self._held += len(claimed.components) - (len(previous.components) if previous is not None else 0)
        self._by_aggregate[claimed.digest] = claimed
        while len(self._by_aggregate) > self.size or self._held > self.components:
            self._held -= len(self._by_aggregate.pop(next(iter(self._by_aggregate))).components)


_CLAIMED = _ClaimedDigests()


def _claimed_digest(formula: Any, aggregate: Any, entries: list[Any]) -> InterfaceDigest:
    """The digests a report claims, rebuilt from its components (the aggregate recomputed, compared with the
    reported one by the caller); ReportError when they are not well formed."""
    known = _CLAIMED.get(formula, aggregate, entries)
    if known is not None:
        return known
    try:
        ensure_formula(str(formula))
        components = [ComponentDigest.from_dict(entry) for entry in entries]
        claimed = InterfaceDigest.from_components(components, str(formula))
    except (FormulaError, InterfaceError, TypeError, KeyError, ValueError) as error:
        raise ReportError(f"bad digests: {error}") from None
    if claimed.digest == aggregate:
        _CLAIMED.put(claimed)
    return claimed


def _same_components(components: tuple[ComponentDigest, ...], entries: list[Any]) -> bool:
    """Whether ``entries`` (a report's components) are ``components``, in their order."""
    if len(components) != len(entries):
        return False
    for component, entry in zip(components, entries):
        if (type(entry) is not dict or entry.get("digest") != component.digest
                or entry.get("name") != component.name
                or entry.get("kind") != component.kind):  # a str enum: equal to its value
            return False
    return True


_BOOT_ID = re.compile(r"^[0-9a-f]{32}$")
MAX_SEQUENCE = 2**53


#: The longest ``sidecarVersion`` a report may carry (SemVer with a pre-release and build fits easily).
MAX_VERSION_LENGTH = 64


@dataclass(frozen=True)
class Freshness:
    """Who sent a report, and when. What makes a report impossible to replay: the sidecar process's random
    ``boot_id`` and start time, and a ``sequence`` that grows with every send of that process, plus the send
    time. The operator accepts a report only if it is newer than the last one it accepted from the same pod
    (same boot: a higher sequence; another boot: a later boot time) and ``sent_at`` is within its clock-skew
    bound. With them, the sender's build: ``sidecar_version``, Lockstep's version of the sidecar (None: not
    sent, a sidecar older than 0.2.0), which the operator classifies by its version-skew policy
    (lockstep.core.skew) and never judges by."""

    boot_id: str
    boot_time: str
    sequence: int
    sent_at: str
    sidecar_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"bootId": self.boot_id, "bootTime": self.boot_time, "sequence": self.sequence,
                                "sentAt": self.sent_at}
        if self.sidecar_version is not None:
            body["sidecarVersion"] = self.sidecar_version
        return body

    @classmethod
    def from_dict(cls, body: Any) -> Freshness:
        if type(body) is not dict and not isinstance(body, Mapping):  # a parsed body is a dict: no ABC check
            raise ReportError("a report must be a JSON object")
        boot_id, boot_time = body.get("bootId"), body.get("bootTime")
        sequence, sent_at = body.get("sequence"), body.get("sentAt")
        if not isinstance(boot_id, str) or not _BOOT_ID.match(boot_id):
            raise ReportError("a report needs bootId (32 hex digits): is the sidecar older than the operator? "
                              "re-create the pod")
        if not isinstance(sequence, int) or isinstance(sequence, bool) or not 0 <= sequence < MAX_SEQUENCE:
            raise ReportError("a report needs a sequence number (an integer from 0)")
        if not isinstance(boot_time, str) or not isinstance(sent_at, str):
            raise ReportError("a report needs bootTime and sentAt timestamps")
        version = body.get("sidecarVersion")
        if version is not None and (not isinstance(version, str) or len(version) > MAX_VERSION_LENGTH):
            raise ReportError(f"sidecarVersion must be a string of at most {MAX_VERSION_LENGTH} characters")
        return cls(boot_id, boot_time, sequence, sent_at, version)


#: What a proxy may report it did with a component.
PROXY_ACTIONS = frozenset({"withheld", "blocked", "audited", "refused-call"})
PROXY_REASONS = frozenset({"Changed", "Unapproved", "Invalid"})
MAX_PROXY_ENTRIES = 50


@dataclass(frozen=True)
class WithheldComponent:
    """One component a pod's proxy kept from clients (or, in audit, let through), counted since the last report."""

    component: str  # "tool/get_forecast"
    reason: str
    digest: str
    action: str
    client: str
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"component": self.component, "reason": self.reason, "digest": self.digest,
                "action": self.action, "client": self.client, "count": self.count}


@dataclass(frozen=True)
class ProxyReport:
    """The ``proxy`` section of a report: present when the sidecar runs the in-line proxy."""

    withheld: tuple[WithheldComponent, ...] = ()
    #: Entries the sidecar could not fit in this report (it keeps at most MAX_PROXY_ENTRIES).
    dropped: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"proxy": {"withheld": [entry.to_dict() for entry in self.withheld], "dropped": self.dropped}}

    @classmethod
    def from_dict(cls, body: Any) -> ProxyReport | None:
        """The proxy section of a report body (None when absent); ReportError for a malformed one."""
        section = body.get("proxy") if isinstance(body, dict) else None
        if section is None:
            return None
        entries = section.get("withheld") if isinstance(section, dict) else None
        dropped = section.get("dropped", 0) if isinstance(section, dict) else None
        if not isinstance(entries, list) or len(entries) > MAX_PROXY_ENTRIES:
            raise ReportError(f"proxy.withheld must be a list of at most {MAX_PROXY_ENTRIES} entries")
        if not _count(dropped):
            raise ReportError("proxy.dropped must be a count")
        return cls(tuple(_withheld(entry) for entry in entries), int(dropped or 0))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**12


def _withheld(entry: Any) -> WithheldComponent:
    if not isinstance(entry, dict):
        raise ReportError("a proxy.withheld entry must be an object")
    texts = {name: entry.get(name) for name in ("component", "reason", "digest", "action", "client")}
    if not all(isinstance(value, str) and len(value) <= 300 for value in texts.values()):
        raise ReportError("a proxy.withheld entry needs component, reason, digest, action and client strings")
    if texts["reason"] not in PROXY_REASONS or texts["action"] not in PROXY_ACTIONS:
        raise ReportError(f"unknown proxy finding {texts['action']!r}/{texts['reason']!r}")
    if not _count(entry.get("count")) or entry["count"] < 1:
        raise ReportError("a proxy.withheld entry needs a count from 1")
    return WithheldComponent(str(texts["component"]), str(texts["reason"]), str(texts["digest"]),
                             str(texts["action"]), str(texts["client"]), int(entry["count"]))


def report_body(observation: Observation, freshness: Freshness, proxy: ProxyReport | None = None, *,
                with_definitions: bool = True) -> dict[str, Any]:
    """The body of ``POST /v1/reports``: the observation (digest-only when not ``with_definitions``), its
    freshness, and the proxy section of a sidecar that runs the proxy."""
    return {**observation.to_dict(with_definitions=with_definitions), **freshness.to_dict(),
            **(proxy.to_dict() if proxy is not None else {})}
