"""What the proxy lets through: JSON-RPC messages judged component by component.

:class:`InterfacePolicy` sees every message on the path, both ways, classified the way the most lenient
client takes it (:func:`lockstep.proxy.messages.classify`):

- a **response** (anything with ``result`` or ``error`` and no ``method``) that bears interface
  (``instructions`` of ``initialize`` / ``server/discover``, and the lists of ``tools/list``,
  ``prompts/list``, ``resources/list``, ``resources/templates/list``, every page) is judged by the
  :class:`ComponentGate`. It is recognised by its shape, whatever stream it travels on, and by the method
  of the request it answers when that is known (so a list answer without its list is refused, not
  passed). Tool definitions in a 2026-07-28 ``inputRequests`` (sampling requests embedded in a result)
  are judged like a list, and a ``prompts/get`` result's ``description`` must be an approved prompt's;
- a message that is **more than one class** (``method`` beside ``result``, a ``method`` that is not a
  string...) is refused: clients disagree on what it is;
- a **server-to-client request**: ``sampling/createMessage`` ``params.tools`` are judged like a list
  (their system prompt and messages are data, as a call result is); once :attr:`~InterfacePolicy.isolated`
  every server-to-client message is refused;
- a **call** (``tools/call``, ``prompts/get``, ``resources/read``) to a component that is not approved, or
  whose last definition seen (by any caller, or by the sidecar's probe) was not approved, is refused
  without reaching the server.

Modes: ``quarantine`` withholds what is not approved (the client gets the list without it,
and calls to it fail with a JSON-RPC error naming the reason); ``block`` refuses the whole
response; ``audit`` passes everything and reports it. Refusals name kinds, places in a list and digests,
never a key or other text the server chose.
"""

from __future__ import annotations

import enum
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from lockstep.core.gate import ComponentGate, GateReason, Verdict
from lockstep.core.mcp_methods import (
    CALL_METHODS,
    INPUT_REQUESTS_KEY,
    INTERFACE_METHODS,
    LIST_METHOD_OF,
    LIST_METHODS,
    OPENING_METHODS,
    PROMPT_GET_METHOD,
    SAMPLING_METHOD,
)
from lockstep.core.model import ComponentKind, Interface
from lockstep.proxy import jsonrpc
from lockstep.proxy.jsonrpc import REFUSED_CODE, UNKNOWN_COMPONENT_CODE
from lockstep.proxy.messages import MessageClass, classify

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
#: Resource URIs outside the approval remembered as withheld, pod-wide (least recently withheld forgotten).
MAX_WITHHELD_URIS = 20_000
#: Where a refused piece sits in what it was judged in: the keys down to its list (or field), and its
#: index in that list (-1: the field itself, e.g. ``instructions``).
Path = tuple[str, ...]
_FIELD = -1


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


@dataclass(frozen=True)
class _Judged:
    """One verdict, and where its piece sits (see :data:`Path`)."""

    path: Path
    index: int
    verdict: Verdict


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


@dataclass
class _PodMemory:
    """What the server last showed of each component, to anyone (S6-8: decided per pod, not per token).

    ``served``: the digest of the last definition of each *approved key* the proxy judged in any answer, and
    for prompts their description. Only keys the gate approves are kept, so a server that lists endless
    names cannot evict one (a key outside the approval is refused without memory); the map is bounded by
    the approval. ``observed``: the definitions the sidecar's probe saw last (bounded by the reader's
    limits). ``withheld_uris``: resource URIs outside the approval that were withheld (a read of a URI
    outside the approval is otherwise forwarded: one made from an approved template has no entry of its
    own); bounded, an evicted URI is forwarded like any URI outside the approval."""

    served: dict[tuple[ComponentKind, str], tuple[str, Any]] = field(default_factory=dict)
    observed: dict[tuple[ComponentKind, str], Any] = field(default_factory=dict)
    withheld_uris: OrderedDict[str, Verdict] = field(default_factory=OrderedDict)

    def serve(self, verdict: Verdict, definition: Any) -> None:
        key = (verdict.kind, verdict.key)
        if verdict.approved_digests:
            description = definition.get("description") if isinstance(definition, dict) else None
            self.served[key] = (verdict.digest, description)
        elif verdict.kind is ComponentKind.RESOURCE and not verdict.approved:
            self.withheld_uris.pop(verdict.key, None)
            self.withheld_uris[verdict.key] = verdict
            if len(self.withheld_uris) > MAX_WITHHELD_URIS:
                self.withheld_uris.popitem(last=False)
        elif verdict.kind is ComponentKind.RESOURCE:
            self.withheld_uris.pop(verdict.key, None)


class InterfacePolicy:
    def __init__(self, gate: ComponentGate, mode: Mode = Mode.QUARANTINE,
                 on_finding: Callable[[Finding], None] | None = None) -> None:
        self.gate, self.mode = gate, mode
        self._on_finding = on_finding or (lambda finding: None)
        self._views: OrderedDict[str, _View] = OrderedDict()
        self._memory = _PodMemory()
        #: Enforcement Isolate, once the pod's verdict is not True: why (None: not isolated). Every message
        #: from the server is then refused: a response becomes an isolation error, a server-to-client
        #: request or notification is dropped (see :meth:`may_relay`).
        self.isolated: str | None = None

    # ------------------------------------------------------------ what the probe sees

    def observed(self, interface: Interface) -> None:
        """The sidecar's probe read ``interface`` just now (it replaces the previous view): a call to a component
        whose observed definition is not approved is refused, for every caller, until a later observation
        shows an approved one or the approval covers this one. Call it on every successful probe."""
        self._memory.observed = {(component.kind, component.name): component.definition for component in interface}

    # ------------------------------------------------------------ server messages

    def may_relay(self, message: Any) -> bool:
        """Whether a message from the server may reach a client now, unchanged or judged (False: once
        isolated, every message that any client takes as one; what no client takes passes)."""
        return self.isolated is None or classify(message) is MessageClass.NONE

    def filter_response(self, message: Any, method: str | None, principal: str, client: str) -> Any | None:
        """The message to send instead of ``message`` (any message from the server, of any class); None to
        send it unchanged. ``method``: of the request it answers, when known."""
        kind = classify(message)
        if kind is MessageClass.NONE:
            return None
        if self.isolated is not None:
            return _isolated(message, kind)
        if kind is MessageClass.REQUEST or kind is MessageClass.NOTIFICATION:
            return self.filter_server_request(message, principal, client)
        if kind is MessageClass.AMBIGUOUS and self.mode is not Mode.AUDIT:
            self._report([Verdict(_kind_of(method), "?", GateReason.INVALID, "", (), "ambiguous message")],
                         "blocked", method or "?", principal, client)
            return jsonrpc.error(_reply_id(message), REFUSED_CODE,
                                 "lockstep: refused a message that is more than one of request, notification, "
                                 "result and error: it cannot be checked")
        return self._filter_result(message, method, principal, client)

    def filter_server_request(self, message: dict[str, Any], principal: str, client: str) -> Any | None:
        """A server-to-client request or notification as it goes on (None: unchanged). The tools of a
        ``sampling/createMessage`` are tool definitions given to the client's model: judged as a
        ``tools/list`` is. Its system prompt and messages, and an elicitation's message, are data the server
        chose for this one request (as a call result is): they pass unless the pod is isolated."""
        if self.isolated is not None:
            return _isolated(message, classify(message))
        params = message.get("params")
        if message.get("method") != SAMPLING_METHOD or not isinstance(params, dict):
            return None
        judged = [_Judged(("params", "tools"), index, verdict)
                  for index, verdict in self._judge_items(ComponentKind.TOOL, params.get("tools"))]
        refused = [entry for entry in judged if not entry.verdict.approved]
        if not refused:
            return None
        return self._refuse(message, SAMPLING_METHOD, refused, principal, client, dropped=True)

    def _filter_result(self, message: dict[str, Any], method: str | None, principal: str,
                       client: str) -> Any | None:
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
        view = self._view(principal) if judged else None
        served: dict[tuple[ComponentKind, str], _Judged] = {}
        for entry in judged:
            if entry.path[0] in _LIST_KINDS and len(entry.path) == 1:
                assert view is not None
                view.remember(entry.verdict)
                key = (entry.verdict.kind, entry.verdict.key)
                if key not in served or served[key].verdict.approved:  # a key twice: the worse definition counts
                    served[key] = entry
        for entry in served.values():
            self._memory.serve(entry.verdict, result[entry.path[0]][entry.index])
        refused = [entry for entry in judged if not entry.verdict.approved]
        if not refused:
            return None
        label = method or _shape_method(result)
        refusal = self._refuse(message, label, refused, principal, client)
        if refusal is None or self.mode is not Mode.QUARANTINE:
            return refusal
        return {**message, "result": refusal}

    def _refuse(self, message: dict[str, Any], label: str, refused: list[_Judged], principal: str, client: str,
                *, dropped: bool = False) -> Any | None:
        """Audit: None (reported); block: the error that replaces ``message`` (a request is dropped: the
        error has no id); quarantine: ``message``'s result (or, ``dropped``, the whole message) without the
        refused pieces."""
        verdicts = [entry.verdict for entry in refused]
        if self.mode is Mode.AUDIT:
            self._report(verdicts, "audited", label, principal, client)
            return None
        if self.mode is Mode.BLOCK:
            self._report(verdicts, "blocked", label, principal, client)
            return _error(None if dropped else message.get("id"), REFUSED_CODE,
                          f"lockstep: {label} refused: " + "; ".join(
                              entry.verdict.describe(entry.index) for entry in refused[:5]), refused)
        self._report(verdicts, "withheld", label, principal, client)
        if dropped:
            return _without(message, refused)
        return _without(message["result"], refused)

    def _judge(self, result: dict[str, Any], method: str | None) -> Iterator[_Judged]:
        """Every component the result carries, and every piece of interface text it must hold to."""
        if isinstance(result.get("instructions"), str) and (method in _OPENING_METHODS or "capabilities" in result):
            verdict = self.gate.check(ComponentKind.INSTRUCTIONS, result["instructions"])
            yield _Judged(("instructions",), _FIELD, verdict)
        for list_key, kind in _LIST_KINDS.items():
            for index, verdict in self._judge_items(kind, result.get(list_key)):
                yield _Judged((list_key,), index, verdict)
        requests = result.get(INPUT_REQUESTS_KEY)
        if isinstance(requests, dict):
            for name, request in requests.items():
                params = request.get("params") if isinstance(request, dict) else None
                if isinstance(request, dict) and request.get("method") == SAMPLING_METHOD and isinstance(params, dict):
                    for index, verdict in self._judge_items(ComponentKind.TOOL, params.get("tools")):
                        yield _Judged((INPUT_REQUESTS_KEY, name, "params", "tools"), index, verdict)
        if "description" in result and (method == PROMPT_GET_METHOD or (
                method is None and isinstance(result.get("messages"), list))) \
                and not self._approved_prompt_description(result["description"]):
            yield _Judged(("description",), _FIELD, Verdict(
                ComponentKind.PROMPT, "?", GateReason.CHANGED, "", (), "a description no approved prompt has"))

    def _judge_items(self, kind: ComponentKind, items: Any) -> Iterator[tuple[int, Verdict]]:
        """(index, verdict) of every item of a list of components (nothing when ``items`` is not a list)."""
        if not isinstance(items, list):
            return
        seen: set[str] = set()
        for index, item in enumerate(items):
            verdict = self.gate.check(kind, item)
            if verdict.approved and verdict.key in seen:  # one key twice on a page: keep the first
                verdict = Verdict(kind, verdict.key, GateReason.INVALID, verdict.digest,
                                  verdict.approved_digests, "listed twice")
            seen.add(verdict.key)
            yield index, verdict

    def _approved_prompt_description(self, description: Any) -> bool:
        """Whether ``description`` (of a ``prompts/get`` result, which does not say which prompt it is) is the
        description of an approved definition of a prompt the proxy knows: one it judged in a list, or the
        probe's last view. None (no description) is always fine; any other non-string never is."""
        if description is None:
            return True
        if not isinstance(description, str):
            return False
        for (kind, key), (digest, known) in self._memory.served.items():
            if kind is ComponentKind.PROMPT and known == description and \
                    digest in self.gate.approved_digests(kind, key):
                return True
        return any(kind is ComponentKind.PROMPT and isinstance(definition, dict)
                   and definition.get("description") == description
                   and self.gate.check(kind, definition).approved
                   for (kind, _), definition in self._memory.observed.items())

    def _malformed(self, message: dict[str, Any], method: str, principal: str, client: str,
                   detail: str) -> dict[str, Any] | None:
        verdict = Verdict(_kind_of(method), "?", GateReason.INVALID, "", (), detail)
        if self.mode is Mode.AUDIT:
            self._report([verdict], "audited", method, principal, client)
            return None
        self._report([verdict], "blocked", method, principal, client)
        return _error(message.get("id"), REFUSED_CODE, f"lockstep: {method} refused: {detail}",
                      [_Judged((), _FIELD, verdict)])

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
        approved = self.gate.approved_digests(kind, key)
        verdict = self._refusal(kind, key, approved, principal)
        if verdict is None:
            served = self._memory.served.get((kind, key))
            return CallDecision(kind, key, None, (served[0],) if served and served[0] else approved)
        if self.mode is Mode.AUDIT:
            self._report([verdict], "audited", message["method"], principal, client)
            return CallDecision(kind, key, None, verdict.approved_digests)
        self._report([verdict], "refused-call", message["method"], principal, client)
        error = _error(message.get("id"), UNKNOWN_COMPONENT_CODE,
                       f"Unknown {kind.value}: withheld by lockstep: {verdict.describe()}",
                       [_Judged((), _FIELD, verdict)])
        return CallDecision(kind, key, error, verdict.approved_digests)

    def _refusal(self, kind: ComponentKind, key: str, approved: tuple[str, ...], principal: str) -> Verdict | None:
        """Why a call to ``key`` is refused (None: it is not). Any of: the last definition this caller was sent,
        the last one the server showed anyone, or the probe's last view, was not approved; or no approved
        revision has the key (a resource read may name a URI made from an approved template, which has no
        entry of its own: refused only while remembered as withheld)."""
        view = self._views.get(principal)
        last = view.verdicts.get((kind, key)) if view is not None else None
        if last is not None and not last.approved:
            return last
        if not approved:
            if kind is ComponentKind.RESOURCE:
                return self._memory.withheld_uris.get(key)
            return Verdict(kind, key, GateReason.UNAPPROVED, "", ())
        served = self._memory.served.get((kind, key))
        if served is not None and served[0] not in approved:
            return Verdict(kind, key, GateReason.CHANGED if served[0] else GateReason.INVALID, served[0], approved)
        observed = self._memory.observed.get((kind, key))
        if observed is not None:
            verdict = self.gate.check(kind, observed)
            if not verdict.approved:
                return verdict
        return None

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


def _without(value: dict[str, Any], refused: Iterable[_Judged]) -> dict[str, Any]:
    """``value`` with every refused piece taken out (a list item, or a field); every other field kept."""
    by_path: dict[Path, set[int]] = {}
    for entry in refused:
        by_path.setdefault(entry.path, set()).add(entry.index)
    for path, indexes in by_path.items():
        value = _drop(value, path, indexes)
    return value


def _drop(node: dict[str, Any], path: Path, indexes: set[int]) -> dict[str, Any]:
    head, rest = path[0], path[1:]
    kept = dict(node)
    if rest:
        kept[head] = _drop(node[head], rest, indexes)
    elif _FIELD in indexes:
        del kept[head]
    else:
        kept[head] = [item for index, item in enumerate(node[head]) if index not in indexes]
    return kept


def _error(request_id: Any, code: int, message: str, refused: list[_Judged]) -> dict[str, Any]:
    """A refusal. Its data names each piece by kind, place and digest: never by the key the server chose."""
    data = {"lockstep": [{"kind": entry.verdict.kind.value, "index": entry.index if entry.index >= 0 else None,
                          "reason": entry.verdict.reason.value, "digest": entry.verdict.digest,
                          "approved": list(entry.verdict.approved_digests)} for entry in refused[:20]]}
    return jsonrpc.error(request_id, code, message, data)


def _reply_id(message: dict[str, Any]) -> Any:
    """The id an error in place of ``message`` carries: its own, when a client could have sent it."""
    request_id = message.get("id")
    return request_id if isinstance(request_id, (str, int)) and not isinstance(request_id, bool) else None


def _isolated(message: dict[str, Any], kind: MessageClass) -> dict[str, Any]:
    """What replaces any message from the server while the pod is isolated: the isolation error for a
    response (its id), a dropped request or notification (an error with no id, which every client discards)."""
    if kind is MessageClass.REQUEST or kind is MessageClass.NOTIFICATION:
        return jsonrpc.isolated(None, "a message from the server was dropped")
    return jsonrpc.isolated(_reply_id(message))


def _kind_of(method: str | None) -> ComponentKind:
    """The kind of component an answer to ``method`` carries (instructions when it is not a list method)."""
    list_key = INTERFACE_METHODS.get(method or "")
    return _LIST_KINDS[list_key] if list_key is not None else ComponentKind.INSTRUCTIONS


def _shape_method(result: dict[str, Any]) -> str:
    for list_key in _LIST_KINDS:
        if isinstance(result.get(list_key), list):
            return LIST_METHOD_OF[list_key]
    if isinstance(result.get(INPUT_REQUESTS_KEY), dict):
        return "an input request"
    if isinstance(result.get("messages"), list):
        return PROMPT_GET_METHOD
    return "server/discover"
