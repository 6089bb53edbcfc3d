"""Fuzz targets shared by the hypothesis properties (tests/fuzz) and the coverage-guided harness
(fuzz/run.py, atheris): each takes hostile input and fails only if the code under test raises something
other than its named errors, which a user would see as a traceback (or an HTTP 500) instead of a clear
refusal. No pytest import: the atheris harness runs them too."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lockstep.core import LockstepError
from lockstep.core.canonical import canonical_json
from lockstep.core.manifest import load_pinned
from lockstep.core.model import Interface, loads_strict
from lockstep.core.report import Freshness, Observation

__all__ = ["BYTE_TARGETS", "VALUE_TARGETS", "Crash", "value_from_bytes"]


class Crash(AssertionError):
    """The target raised something other than its named errors."""


def _expect(allowed: tuple[type[BaseException], ...], call: Callable[[], Any], what: str) -> Any:
    try:
        return call()
    except allowed:
        return None
    except Exception as error:
        raise Crash(f"{what}: {type(error).__name__}: {str(error)[:200]}") from error


def value_from_bytes(data: bytes) -> Any:
    """A JSON value from arbitrary bytes (None when they are not JSON), for the value targets."""
    try:
        return loads_strict(data)
    except (ValueError, LockstepError):
        return None


# ---------------------------------------------------------------- targets on JSON values


def canonical_form(value: Any) -> None:
    """The canonical form of any JSON value: bytes, or a named error (a lone surrogate, NaN...)."""
    out = _expect((LockstepError,), lambda: canonical_json(value), "canonical_json")
    if out is not None and canonical_json(json.loads(out)) != out:
        raise Crash("canonical_json is not idempotent")


def interface_parser(value: Any) -> None:
    _expect((LockstepError,), lambda: Interface.from_document(value), "Interface.from_document")


def manifest_loader(value: Any) -> None:
    _expect((LockstepError,), lambda: load_pinned(value), "load_pinned")


def report_parser(value: Any) -> None:
    _expect((LockstepError,), lambda: Observation.from_dict(value), "Observation.from_dict")
    _expect((LockstepError,), lambda: Freshness.from_dict(value), "Freshness.from_dict")


def admission_handler(value: Any) -> None:
    """The pure admission decisions on any pod-shaped (or not) object."""
    from lockstep.operator.admission_policy import update_violations, violations
    from lockstep.operator.injection import Binding, BindingError, InjectionSettings, plan_injection
    from lockstep.operator.webhooks import resolve_binding

    if not _pod_typed(value):
        return
    settings = InjectionSettings(image="img", report_url="https://operator")
    _expect((BindingError,), lambda: plan_injection(value, settings, Binding()), "plan_injection")
    _expect((), lambda: violations(value, planned_sidecar={"name": "lockstep-sidecar"}, planned_token_volume=None),
            "violations")
    _expect((), lambda: update_violations(value, value), "update_violations")
    # Interfaces passed the CRD schema (and the validating webhook) before the webhook lists them.
    interfaces = [{"metadata": {"name": "weather"}, "spec": {"selector": {"matchLabels": {"app": "weather"}},
                                                             "enforcement": "Isolate", "approval": "Manual"}},
                  {"metadata": {"name": "lenient"}, "spec": {"selector": {"matchExpressions": [
                      {"key": "tier", "operator": "Exists"}]}, "enforcement": "Audit"}}]
    _expect((), lambda: resolve_binding(value, interfaces), "resolve_binding")


def _pod_typed(value: Any) -> bool:
    """What a webhook can be sent: the API server decodes a pod into its typed form first (metadata an
    object with string maps, spec an object whose container lists hold objects), so other shapes never
    reach the handler. Within these types anything goes."""
    if not isinstance(value, dict):
        return False
    metadata, spec = value.get("metadata", {}), value.get("spec", {})
    if not isinstance(metadata, dict) or not isinstance(spec, dict):
        return False
    if any(not isinstance(metadata.get(key, {}), dict) for key in ("labels", "annotations")):
        return False
    if any(not all(isinstance(v, str) for v in metadata.get(key, {}).values()) for key in ("labels", "annotations")):
        return False
    for key in ("containers", "initContainers", "ephemeralContainers", "volumes", "readinessGates"):
        entries = spec.get(key, [])
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            return False
        for entry in entries:
            for listed in ("ports", "volumeMounts", "env"):
                inner = entry.get(listed, [])
                if not isinstance(inner, list) or not all(isinstance(item, dict) for item in inner):
                    return False
    return True


def proxy_policy(value: Any) -> None:
    """The proxy's judgement of any answer: it never raises, and in quarantine what it lets through holds
    only approved components (the value is tried as the result of a tools/list and of an unknown method,
    and in every message class: smuggling envelopes, sampling tools, embedded input requests, each read by
    the Python SDK's own union)."""
    from lockstep.core.gate import ComponentGate
    from lockstep.core.model import ComponentKind
    from lockstep.core.revision import Revision
    from lockstep.proxy.policy import InterfacePolicy

    approved = Interface.from_document({"instructions": "Weather.", "tools": [{"name": "name", "inputSchema": {}}]})
    gate = ComponentGate.of([Revision.of(approved)])
    policy = InterfacePolicy(gate)
    for method in ("tools/list", "initialize", None):
        message = {"jsonrpc": "2.0", "id": 1, "result": value}
        out = _expect((), lambda m=message, k=method: policy.filter_response(m, k, "p", "c"), "filter_response")
        sent = message if out is None else out
        result = sent.get("result")
        if not isinstance(result, dict):
            continue
        for list_key, kind in (("tools", ComponentKind.TOOL), ("prompts", ComponentKind.PROMPT),
                               ("resources", ComponentKind.RESOURCE),
                               ("resourceTemplates", ComponentKind.RESOURCE_TEMPLATE)):
            items = result.get(list_key)
            if isinstance(items, list) and not all(gate.check(kind, item).approved for item in items):
                raise Crash(f"quarantine let an unapproved {kind.value} through: {str(items)[:200]}")
        instructions = result.get("instructions")
        if (method == "initialize" or "capabilities" in result) and isinstance(instructions, str) \
                and not gate.check(ComponentKind.INSTRUCTIONS, instructions).approved:
            raise Crash("quarantine let unapproved instructions through")
    from lockstep_testing.lenient_wire import unapproved_components

    for message in _message_classes(value):  # what some client takes from each: only approved components
        for method in ("tools/list", "tools/call", None):
            out = _expect((), lambda m=message, k=method: policy.filter_response(m, k, "p", "c"), "filter_response")
            sent = message if out is None else out
            if unapproved := unapproved_components([sent], gate):
                raise Crash(f"quarantine let {unapproved} through in {str(message)[:200]} -> {str(sent)[:200]}")
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": value}
    _expect((), lambda: policy.decide_call(call, "p", "c"), "decide_call")


#: Keys beside a ``result`` that make the Python SDK's union take it as the response while the message also
#: looks like a request (S6-1), and an ``error`` beside it.
SMUGGLING_ENVELOPES: list[dict[str, Any]] = [{"method": None}, {"method": 5}, {"method": "tools/list", "params": 5},
                                             {"method": "x", "params": []}, {"error": {"code": 1, "message": "m"}}]


def _sampling(tools: Any, request_id: Any = "s-1") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "sampling/createMessage",
            "params": {"messages": [], "maxTokens": 1, "tools": tools}}


def _message_classes(value: Any) -> list[dict[str, Any]]:
    """Messages of every class around ``value``: a result in each smuggling envelope, a sampling request whose
    tools are ``value``, and a 2026-07-28 result whose ``inputRequests`` embed that request."""
    message = {"jsonrpc": "2.0", "id": 1, "result": value}
    embedded = {"resultType": "input_required", "inputRequests": {"a": {
        key: item for key, item in _sampling(value).items() if key in ("method", "params")}}}
    return [*({**message, **envelope} for envelope in SMUGGLING_ENVELOPES), _sampling(value),
            {"jsonrpc": "2.0", "id": 1, "result": embedded}]


#: Content-Type values of an answer (each list: the headers in order), as servers and attackers send them.
ANSWER_CONTENT_TYPES: list[list[str]] = [
    ["application/json"], ["application/json; charset=utf-8"], ["text/event-stream"],
    ['text/plain; profile="application/json"'], ["text/plain", "application/json"], ["application/json", "text/plain"],
    ["text/event-stream", "application/json"], ["Application/JSON"], ["text/html; x=text/event-stream"], ["text/plain"],
    [],
]
#: The request each answer is for: (HTTP method, pending ids and their methods).
ANSWER_EXCHANGES: list[tuple[str, dict[Any, str]]] = [("POST", {1: "tools/call"}), ("POST", {1: "tools/list"}),
                                                      ("POST", {}), ("GET", {})]


def _answer_app() -> Any:
    from lockstep.core.gate import ComponentGate
    from lockstep.core.revision import Revision
    from lockstep.proxy.app import ProxyApp

    approved = Interface.from_document({"instructions": "Weather.", "tools": [{"name": "name", "inputSchema": {}}]})
    gate = ComponentGate.of([Revision.of(approved)])
    return ProxyApp("http://127.0.0.1:9/mcp", gate, max_body=4096), gate


def check_forwarded_answer(app: Any, gate: Any, method: str, methods: dict[Any, str], status: int,
                           content_types: list[str], body: bytes) -> None:
    """What the proxy forwards for this upstream answer, parsed by each client's rules, carries only approved
    components (raises Crash otherwise, or when the proxy raises)."""
    from lockstep.proxy.app import _Exchange
    from lockstep_testing.lenient_wire import accepted_messages, unapproved_components

    exchange = _Exchange("p", "c", dict(methods))
    out = _expect((), lambda: app.forwarded(method, status, list(content_types), body, exchange), "forwarded")
    sent_status, sent_types, sent_body = out
    for rules in ("ts-1.17", "ts-current", "python"):
        messages = accepted_messages(rules, sent_status, sent_types, sent_body, has_requests=bool(methods),
                                     method=method)
        if unapproved := unapproved_components(messages, gate, rules):  # type: ignore[arg-type]
            raise Crash(f"{rules} accepts {unapproved} from {method} {status} {content_types}: {body[:300]!r} "
                        f"-> {sent_body[:300]!r}")


def _renderings(value: Any) -> list[bytes]:
    """Bodies built around a JSON value: a response carrying it, alone, in a batch, as events of two types; in
    a smuggling envelope (JSON), as embedded sampling tools (JSON), and every message class as events."""
    message = {"jsonrpc": "2.0", "id": 1, "result": value}
    other = {"jsonrpc": "2.0", "id": "other", "result": value}
    text = json.dumps(message, allow_nan=True).encode()
    classes = _message_classes(value)
    return [text, json.dumps([other, message]).encode(), json.dumps(value).encode(),
            b"event: message\ndata: " + text + b"\n\n", b"id: 1\r\ndata: " + json.dumps(other).encode() + b"\r\n\r\n",
            b"event: other\ndata: " + text + b"\n\n",
            json.dumps(classes[0], allow_nan=True).encode(), json.dumps(classes[-1], allow_nan=True).encode(),
            b"".join(b"data: " + json.dumps(each, allow_nan=True).encode() + b"\n\n" for each in classes)]


def proxy_answer(value: Any) -> None:
    """The differential property: for any answer around ``value`` (alone, in a batch, for another id, as events),
    any Content-Type (a parameter, two headers) and any exchange, what the proxy forwards, parsed the way
    each client parses it (the TypeScript SDK 1.17 and current, the Python SDK), holds only approved
    components."""
    app, gate = _answer_app()
    for body in _renderings(value):
        for method, methods in ANSWER_EXCHANGES:
            for content_types in ANSWER_CONTENT_TYPES:
                check_forwarded_answer(app, gate, method, methods, 200, content_types, body)


def proxy_answer_bytes(data: bytes) -> None:
    """The same property for raw answer bytes: the first byte picks the Content-Type and the exchange."""
    app, gate = _answer_app()
    pick = data[0] if data else 0
    content_types = ANSWER_CONTENT_TYPES[pick % len(ANSWER_CONTENT_TYPES)]
    method, methods = ANSWER_EXCHANGES[(pick // len(ANSWER_CONTENT_TYPES)) % len(ANSWER_EXCHANGES)]
    check_forwarded_answer(app, gate, method, methods, 200, content_types, data[1:])


def proxy_report(value: Any) -> None:
    from lockstep.core.report import ProxyReport

    _expect((LockstepError,), lambda: ProxyReport.from_dict({"proxy": value}), "ProxyReport.from_dict")


VALUE_TARGETS: dict[str, Callable[[Any], None]] = {
    "canonical": canonical_form, "interface": interface_parser, "manifest": manifest_loader,
    "report": report_parser, "admission": admission_handler, "proxy-policy": proxy_policy,
    "proxy-report": proxy_report, "proxy-answer": proxy_answer,
}


# ---------------------------------------------------------------- targets on raw bytes


def report_body(data: bytes) -> None:
    """The operator's report-body parser: a report, or ReportRejected (HTTP 400/413), never a 500."""
    from lockstep.operator.reports import ReportRejected, parse_report

    _expect((ReportRejected,), lambda: parse_report(data), "parse_report")


def cli_file(data: bytes) -> None:
    """The CLI's file loader (JSON or YAML): a document, or UsageError (exit 2 with one line)."""
    from lockstep.cli.targets import UsageError, load_document

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "input"
        path.write_bytes(data)
        _expect((UsageError,), lambda: load_document(str(path)), "load_document")


def event_stream(data: bytes) -> None:
    """The proxy's event-stream splitter: the events and the rest are the input, byte for byte, cut anywhere."""
    from lockstep.proxy.sse import EventSplitter, EventTooLargeError, parse_event

    for size in (1, 7, len(data) or 1):
        splitter, out = EventSplitter(1 << 20), []
        try:
            for start in range(0, len(data), size):
                out += splitter.feed(data[start:start + size])
        except EventTooLargeError:
            return
        if b"".join(out) + splitter.rest() != data:
            raise Crash(f"the splitter lost or changed bytes (chunks of {size})")
        for raw in out:
            _expect((), lambda event=raw: parse_event(event), "parse_event")


BYTE_TARGETS: dict[str, Callable[[bytes], None]] = {"report-body": report_body, "cli-file": cli_file,
                                                    "event-stream": event_stream,
                                                    "proxy-answer-bytes": proxy_answer_bytes}
