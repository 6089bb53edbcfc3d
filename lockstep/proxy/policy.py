"""What the proxy lets through: JSON-RPC messages judged component by component.

:class:`InterfacePolicy` sees every message on the path, both ways:

- a **result** that bears interface (``instructions`` of ``initialize`` / ``server/discover``,
  and the lists of ``tools/list``, ``prompts/list``, ``resources/list``,
  ``resources/templates/list``, every page) is judged by the :class:`ComponentGate`. It is
  recognised by its shape, whatever stream it travels on, and by the method of the request
  it answers when that is known (so a list answer without its list is refused, not passed);
- a **call** (``tools/call``, ``prompts/get``, ``resources/read``) to a component that is
  not approved, or whose last definition this caller was sent was withheld, is refused
  without reaching the server.

Modes: ``quarantine`` withholds what is not approved (the client gets the list without it,
and calls to it fail with a JSON-RPC error naming the reason); ``block`` refuses the whole
response; ``audit`` passes everything and reports it. Callers are told apart by their
credentials (a digest of the ``Authorization`` header): what one caller was refused says
nothing about another's view.
"""

from __future__ import annotations

import enum
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from lockstep.core.gate import ComponentGate, GateReason, Verdict
from lockstep.core.mcp_methods import CALL_METHODS, INTERFACE_METHODS, LIST_METHOD_OF, LIST_METHODS, OPENING_METHODS
from lockstep.core.model import ComponentKind
from lockstep.proxy import jsonrpc
from lockstep.proxy.jsonrpc import REFUSED_CODE, UNKNOWN_COMPONENT_CODE

__all__ = [
    "CALL_METHODS",
    "INTERFACE_METHODS",
    "REFUSED_CODE",
    "UNKNOWN_COMPONENT_CODE",
    "CallDecision",
    "Finding",
    "InterfacePolicy",
    "Mode",
    "principal_of",
]

# INTERFACE_METHODS and CALL_METHODS are lockstep.core.mcp_methods' (importable from here too).
_OPENING_METHODS = frozenset(OPENING_METHODS)
_LIST_KINDS = {method.list_key: method.kind for method in LIST_METHODS}
# UNKNOWN_COMPONENT_CODE (a call to a withheld component) and REFUSED_CODE (a response refused in
# ``block`` mode) are lockstep.proxy.jsonrpc's, importable from here too.
#: Callers remembered (least recently seen are forgotten first), and components per caller.
MAX_PRINCIPALS = 4096
MAX_COMPONENTS_PER_VIEW = 20_000


class Mode(str, enum.Enum):
    QUARANTINE = "quarantine"
    BLOCK = "block"
    AUDIT = "audit"


@dataclass(frozen=True)
class Finding:
    """One component a client was (or, in audit mode, would have been) refused."""

    verdict: Verdict
    action: str  # "withheld", "blocked", "audited", "refused-call"
    method: str
    principal: str
    client: str


@dataclass(frozen=True)
class CallDecision:
    """A call's fate: refused (``error`` is the JSON-RPC response) or forwarded with its digest."""

    kind: ComponentKind
    key: str
    error: dict[str, Any] | None
    #: The approved digest(s) the call was checked against.
    digests: tuple[str, ...]


def principal_of(authorization: str | None) -> str:
    """A short, stable name for a caller's credentials (never the credentials themselves)."""
    if not authorization:
        return "anonymous"
    return "sha256:" + hashlib.sha256(authorization.encode("utf-8", "replace")).hexdigest()[:16]


@dataclass
class _View:
    """What one caller was last sent of each component: the verdict of its last definition."""

    verdicts: dict[tuple[ComponentKind, str], Verdict] = field(default_factory=dict)

    def remember(self, verdict: Verdict) -> None:
        key = (verdict.kind, verdict.key)
        self.verdicts.pop(key, None)
        self.verdicts[key] = verdict
        if len(self.verdicts) > MAX_COMPONENTS_PER_VIEW:  # a server listing endless names: forget the oldest
            del self.verdicts[next(iter(self.verdicts))]


class InterfacePolicy:
    def __init__(self, gate: ComponentGate, mode: Mode = Mode.QUARANTINE,
                 on_finding: Callable[[Finding], None] | None = None) -> None:
        self.gate, self.mode = gate, mode
        self._on_finding = on_finding or (lambda finding: None)
        self._views: OrderedDict[str, _View] = OrderedDict()

    # ------------------------------------------------------------ results

    def filter_response(self, message: Any, method: str | None, principal: str, client: str) -> Any | None:
        """The message to send instead of ``message``; None to send it unchanged."""
        if not isinstance(message, dict) or "method" in message:
            return None  # a request or a notification: list_changed and server requests pass
        # A result is judged whatever its id (or lack of one, or of "jsonrpc"): the proxy does not bet on
        # how strictly a client validates the envelope (found by the differential fuzz target).
        result = message.get("result")
        expected = INTERFACE_METHODS.get(method or "", "")
        if not isinstance(result, dict):
            if method in INTERFACE_METHODS and "error" not in message:
                return self._malformed(message, method or "", principal, client, "the result is not an object")
            return None
        if expected and not isinstance(result.get(expected), list):
            return self._malformed(message, method or "", principal, client, f"the result has no {expected!r} list")
        judged = list(self._judge(result, method))
        if not judged:
            return None
        view = self._view(principal)
        refused = []
        for _, _, verdict in judged:
            view.remember(verdict)
            if not verdict.approved:
                refused.append(verdict)
        if not refused:
            return None
        label = method or _shape_method(result)
        if self.mode is Mode.AUDIT:
            self._report(refused, "audited", label, principal, client)
            return None
        if self.mode is Mode.BLOCK:
            self._report(refused, "blocked", label, principal, client)
            return _error(message.get("id"), REFUSED_CODE,
                          f"lockstep: {label} refused: " + "; ".join(v.describe() for v in refused[:5]),
                          refused)
        self._report(refused, "withheld", label, principal, client)
        return {**message, "result": _without(result, judged)}

    def _judge(self, result: dict[str, Any], method: str | None) -> Iterator[tuple[str, int, Verdict]]:
        """(list key, index, verdict) for every component the result carries."""
        if isinstance(result.get("instructions"), str) and (method in _OPENING_METHODS or "capabilities" in result):
            yield "instructions", -1, self.gate.check(ComponentKind.INSTRUCTIONS, result["instructions"])
        for list_key, kind in _LIST_KINDS.items():
            items = result.get(list_key)
            if isinstance(items, list):
                seen: set[str] = set()
                for index, item in enumerate(items):
                    verdict = self.gate.check(kind, item)
                    if verdict.approved and verdict.key in seen:  # one key twice on a page: keep the first
                        verdict = Verdict(kind, verdict.key, GateReason.INVALID, verdict.digest,
                                          verdict.approved_digests, "listed twice")
                    seen.add(verdict.key)
                    yield list_key, index, verdict

    def _malformed(self, message: dict[str, Any], method: str, principal: str, client: str,
                   detail: str) -> dict[str, Any] | None:
        list_key = INTERFACE_METHODS[method]
        kind = _LIST_KINDS[list_key] if list_key is not None else ComponentKind.INSTRUCTIONS
        verdict = Verdict(kind, "?", GateReason.INVALID, "", (), detail)
        if self.mode is Mode.AUDIT:
            self._report([verdict], "audited", method, principal, client)
            return None
        self._report([verdict], "blocked", method, principal, client)
        return _error(message.get("id"), REFUSED_CODE, f"lockstep: {method} refused: {detail}", [verdict])

    # ------------------------------------------------------------ calls

    def decide_call(self, message: Any, principal: str, client: str) -> CallDecision | None:
        """For a call request: refuse it (quarantine, block) or name the digest it is checked against."""
        if not isinstance(message, dict) or message.get("method") not in CALL_METHODS:
            return None
        kind, field_name = CALL_METHODS[message["method"]]
        params = message.get("params")
        key = params.get(field_name) if isinstance(params, dict) else None
        if not isinstance(key, str):
            return None  # the server answers a malformed call itself
        view = self._views.get(principal)
        last = view.verdicts.get((kind, key)) if view is not None else None
        approved = self.gate.approved_digests(kind, key)
        if last is not None and not last.approved:
            verdict = last
        elif not approved and kind is not ComponentKind.RESOURCE:
            # Never listed to this caller, or listed by another: still not approved. (A resource
            # read may name a URI made from an approved template, which has no entry of its own.)
            verdict = Verdict(kind, key, GateReason.UNAPPROVED, "", ())
        else:
            digests = (last.digest,) if last is not None and last.digest else approved
            return CallDecision(kind, key, None, digests)
        if self.mode is Mode.AUDIT:
            self._report([verdict], "audited", message["method"], principal, client)
            return CallDecision(kind, key, None, verdict.approved_digests)
        self._report([verdict], "refused-call", message["method"], principal, client)
        error = _error(message.get("id"), UNKNOWN_COMPONENT_CODE,
                       f"Unknown {kind.value}: {key!r} is withheld by lockstep: {verdict.describe()}", [verdict])
        return CallDecision(kind, key, error, verdict.approved_digests)

    # ------------------------------------------------------------ state

    def _view(self, principal: str) -> _View:
        view = self._views.pop(principal, None) or _View()
        self._views[principal] = view
        while len(self._views) > MAX_PRINCIPALS:
            self._views.popitem(last=False)
        return view

    def _report(self, verdicts: list[Verdict], action: str, method: str, principal: str, client: str) -> None:
        for verdict in verdicts:
            self._on_finding(Finding(verdict, action, method, principal, client))


def _without(result: dict[str, Any], judged: list[tuple[str, int, Verdict]]) -> dict[str, Any]:
    """The result with every refused component taken out; every other field kept as it was."""
    refused: dict[str, set[int]] = {}
    for list_key, index, verdict in judged:
        if not verdict.approved:
            refused.setdefault(list_key, set()).add(index)
    kept = dict(result)
    for list_key, indexes in refused.items():
        if list_key == "instructions":
            del kept["instructions"]
        else:
            kept[list_key] = [item for index, item in enumerate(result[list_key]) if index not in indexes]
    return kept


def _error(request_id: Any, code: int, message: str, verdicts: list[Verdict]) -> dict[str, Any]:
    data = {"lockstep": [{"component": v.ref, "reason": v.reason.value, "digest": v.digest,
                          "approved": list(v.approved_digests)} for v in verdicts[:20]]}
    return jsonrpc.error(request_id, code, message, data)


def _shape_method(result: dict[str, Any]) -> str:
    for list_key in _LIST_KINDS:
        if isinstance(result.get(list_key), list):
            return LIST_METHOD_OF[list_key]
    return "server/discover"
