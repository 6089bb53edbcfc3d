"""Which metrics and labels a PromQL expression uses, and which the code registers.

A small lexer, not a PromQL parser: it is enough for the expressions of the chart's dashboard and
alerts, and it errs on the side of reporting a name (an unknown name fails the cross-check test).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prometheus_client.metrics import MetricWrapperBase

__all__ = ["RegisteredMetric", "Selector", "check_expression", "code_metrics", "registered_metrics", "selectors"]

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
             "offset", "inf", "nan"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")')


@dataclass(frozen=True)
class Selector:
    """One metric name of an expression with the label names it matches on."""

    metric: str
    matchers: dict[str, str]


@dataclass(frozen=True)
class RegisteredMetric:
    name: str  # as exposed: counters with _total, histograms as _bucket/_sum/_count
    labels: frozenset[str]


def selectors(expr: str) -> tuple[list[Selector], set[str]]:
    """Metric selectors of ``expr`` and the label names used in by/without/on/ignoring clauses."""
    grouping: set[str] = set()
    for _, labels in _GROUPING.findall(expr):
        grouping |= {label.strip() for label in labels.split(",") if label.strip()}
    text = _GROUPING.sub(" ", expr)
    found: list[Selector] = []
    position = 0
    while match := _IDENT.search(text, position):
        position = match.end()
        name = match.group()
        before = text[:match.start()]
        if _inside(before, "{", "}") or _inside(before, "[", "]") or before.count('"') % 2:
            continue
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or name.lower() in _KEYWORDS or name.startswith("$"):
            continue
        matchers: dict[str, str] = {}
        if rest.startswith("{"):
            body = rest[1:rest.index("}")]
            matchers = {label: value.strip('"') for label, _, value in _MATCHER.findall(body)}
        found.append(Selector(name, matchers))
    return found, grouping


def _inside(before: str, opening: str, closing: str) -> bool:
    without_strings = _STRING.sub("", before)
    return without_strings.count(opening) > without_strings.count(closing)


def registered_metrics(*holders: object) -> dict[str, RegisteredMetric]:
    """The metrics held as attributes of these objects (the code's Metrics classes), by exposed name."""
    out: dict[str, RegisteredMetric] = {}
    for holder in holders:
        for metric in vars(holder).values():
            if not isinstance(metric, MetricWrapperBase):
                continue
            labels = frozenset(metric._labelnames)
            for name in _exposed_names(metric._name, metric._type):
                out[name] = RegisteredMetric(name, labels | ({"le"} if name.endswith("_bucket") else set()))
    return out


def _exposed_names(name: str, kind: str) -> list[str]:
    if kind == "counter":
        return [f"{name}_total"]
    if kind == "histogram":
        return [f"{name}_bucket", f"{name}_sum", f"{name}_count"]
    return [name]


#: Series Prometheus makes itself for every scrape target.
SYNTHETIC = {"up": RegisteredMetric("up", frozenset({"job", "instance", "namespace"}))}


def code_metrics() -> dict[str, RegisteredMetric]:
    """Every metric the operator and the sidecar register, plus Prometheus's own ``up``."""
    from lockstep.operator.metrics import Metrics
    from lockstep.sidecar.metrics import SidecarMetrics
    return {**registered_metrics(Metrics(), SidecarMetrics()), **SYNTHETIC}


def label_values() -> dict[tuple[str, str], set[str]]:
    """Values the code gives to enumerated labels, by (metric, label)."""
    from lockstep.operator.judge import PodState
    from lockstep.operator.metrics import REJECTION_REASONS
    return {
        ("lockstep_pods", "state"): {state.value for state in PodState},
        ("lockstep_reports_rejected_total", "reason"): set(REJECTION_REASONS),
        ("lockstep_report_duration_seconds_bucket", "outcome"): {"accepted", "rejected"},
        ("lockstep_webhook_requests_total", "outcome"): webhook_outcomes(),
        ("lockstep_webhook_requests_total", "webhook"): webhook_names(),
    }


def webhook_outcomes() -> set[str]:
    """The outcomes the admission handlers count, read from their source: literal ``outcome`` arguments
    of ``webhook_requests.labels(webhook, outcome)``, and of calls to a local helper that calls it."""
    import ast
    import inspect

    from lockstep.operator import validation, webhooks

    outcomes: set[str] = set()
    for module in (webhooks, validation):
        tree = ast.parse(inspect.getsource(module))
        helpers = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                   and not any(isinstance(inner, ast.FunctionDef) for inner in ast.walk(node) if inner is not node)
                   and "webhook_requests" in ast.unparse(node)}
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Attribute) and call.func.attr == "labels" \
                    and "webhook_requests" in ast.unparse(call.func) and len(call.args) == 2:
                outcomes |= _literals(call.args[1])
            elif isinstance(call.func, ast.Name) and call.func.id in helpers and call.args:
                outcomes |= _literals(call.args[0])
    return outcomes


def webhook_names() -> set[str]:
    """The ``webhook`` label values: literal first arguments of ``webhook_requests.labels(...)``."""
    import ast
    import inspect

    from lockstep.operator import validation, webhooks

    names: set[str] = set()
    for module in (webhooks, validation):
        for call in (n for n in ast.walk(ast.parse(inspect.getsource(module))) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Attribute) and call.func.attr == "labels" \
                    and "webhook_requests" in ast.unparse(call.func) and call.args:
                names |= _literals(call.args[0])
    return names


def _literals(node: object) -> set[str]:
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _literals(node.body) | _literals(node.orelse)
    return set()


def check_expression(expr: str, registered: dict[str, RegisteredMetric]) -> list[str]:
    """Problems of one expression: unknown metrics, labels, or label values."""
    problems: list[str] = []
    found, grouping = selectors(expr)
    if not found:
        problems.append(f"no metric in {expr!r}")
    labels_in_play: set[str] = set()
    for selector in found:
        metric = registered.get(selector.metric)
        if metric is None:
            problems.append(f"{selector.metric} is not registered by the code")
            continue
        labels_in_play |= metric.labels
        for label, value in selector.matchers.items():
            if label not in metric.labels:
                problems.append(f"{selector.metric} has no label {label}")
            known = label_values().get((selector.metric, label))
            if known and not value.startswith("$"):
                unknown = set(value.split("|")) - known
                if unknown:
                    problems.append(f"{selector.metric}{{{label}}} never takes {sorted(unknown)}")
    problems += [f"grouping by unknown label {label} in {expr!r}" for label in grouping - labels_in_play]
    return problems


