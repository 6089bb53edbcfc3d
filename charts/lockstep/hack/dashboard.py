"""Generate charts/lockstep/dashboards/lockstep.json, the Grafana dashboard of Lockstep.

The dashboard is a build output: edit the panels here, then run

    python charts/lockstep/hack/dashboard.py           # rewrite the JSON
    python charts/lockstep/hack/dashboard.py --check   # exit 1 if the JSON is stale

Conventions: the first variable is the datasource and every panel uses it; then namespace and
interface, both multi-select. Every panel has a unit and a description. The operator runs with two
replicas and only the active one exports gauges with values, so gauges are combined with max by the
full label set before any sum: a sum straight over replicas would count each pod twice.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parent.parent / "dashboards" / "lockstep.json"
UID = "lockstep-overview"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCOPE = 'namespace=~"$namespace", interface=~"$interface"'
ISOLATED_STATES = "drifted|stale|unreachable|invalid|conflict"


def pods(states: str) -> str:
    """Pods in the given states, deduplicated over operator replicas."""
    return f'max by (namespace, interface, state) (lockstep_pods{{{SCOPE}, state=~"{states}"}})'


def findings() -> str:
    """Drift findings, deduplicated over operator replicas."""
    return ("max by (namespace, interface, component_kind, change, severity) "
            f"(lockstep_drift_findings{{{SCOPE}}})")


def target(expr: str, legend: str, ref: str = "A", instant: bool = False, table: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref,
                           "range": not instant, "instant": instant}
    if table:
        out["format"] = "table"
    return out


def panel(kind: str, title: str, description: str, unit: str, targets: list[dict[str, Any]],
          grid: tuple[int, int, int, int], **extra: Any) -> dict[str, Any]:
    x, y, w, h = grid
    body: dict[str, Any] = {
        "type": kind, "title": title, "description": description, "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit, **extra.pop("defaults", {})}, "overrides": []},
        "targets": targets,
    }
    body.update(extra)
    return body


def panels() -> list[dict[str, Any]]:
    stacked = {"custom": {"stacking": {"mode": "normal"}, "fillOpacity": 30}}
    thresholds_bad = {"thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                                                   {"color": "red", "value": 1}]}}
    items = [
        panel("stat", "Pods out of service",
              "Pods that Lockstep keeps out of their Services now: drifted, stale, unreachable, invalid or "
              "conflicting interface. Zero is the healthy value.", "none",
              [target(f"sum({pods(ISOLATED_STATES)}) or vector(0)", "isolated", instant=True)],
              (0, 0, 6, 4), defaults=thresholds_bad),
        panel("stat", "Drifted interfaces",
              "MCPServerInterfaces with at least one pod whose live interface differs from every approved "
              "revision (Audit ones included).", "none",
              [target(f"count(sum by (namespace, interface) ({findings()}) > 0) or vector(0)", "drifted",
                      instant=True)],
              (6, 0, 6, 4), defaults=thresholds_bad),
        panel("stat", "Verified pods",
              "Pods whose live interface matches an approved revision.", "none",
              [target(f'sum({pods("verified")}) or vector(0)', "verified", instant=True)],
              (12, 0, 6, 4)),
        panel("stat", "Oldest verdict",
              "Seconds since the operator last reached a verdict for the least recently verified "
              "MCPServerInterface. Growing without bound means reports stopped arriving.", "s",
              [target(f"max(time() - max by (namespace, interface) "
                      f"(lockstep_last_verification_timestamp_seconds{{{SCOPE}}}))", "age", instant=True)],
              (18, 0, 6, 4)),
        panel("timeseries", "Drift over time, per namespace and server",
              "Drift findings (components added, removed or changed against the closest approved "
              "revision) per MCPServerInterface. A step up is a rug pull or an unreviewed release.", "none",
              [target(f"sum by (namespace, interface) ({findings()})", "{{namespace}}/{{interface}}")],
              (0, 4, 12, 8)),
        panel("timeseries", "Isolated pods",
              "Pods out of their Services, by MCPServerInterface and state. Under Isolate enforcement a "
              "drifted pod stays here until its interface is approved or rolled back.", "none",
              [target(f"sum by (namespace, interface, state) ({pods(ISOLATED_STATES)}) > 0",
                      "{{namespace}}/{{interface}} {{state}}")],
              (12, 4, 12, 8), defaults=stacked),
        panel("barchart", "Drift findings by component kind, change and severity",
              "What drifted now: tools, prompts, resources, resource templates or instructions, whether "
              "they were added, removed or changed, and how severe the change is (a tool that stops being "
              "read-only, or a description that gains instructions, is high).", "none",
              [target(f"sum by (component_kind, change, severity) ({findings()})",
                      "{{component_kind}} {{change}} {{severity}}", instant=True, table=True)],
              (0, 12, 12, 8), options={"xField": "component_kind", "orientation": "horizontal"}),
        panel("timeseries", "Verification latency",
              "Time from a sidecar report's arrival at the operator to its verdict being written to the "
              "pod (50th, 90th and 99th percentile of accepted reports).", "s",
              [target(f"histogram_quantile({q}, sum by (le) (rate(lockstep_report_duration_seconds_bucket"
                      f'{{outcome="accepted"}}[$__rate_interval])))', f"p{int(q * 100)}", ref=ref)
               for q, ref in ((0.5, "A"), (0.9, "B"), (0.99, "C"))],
              (12, 12, 12, 8)),
        panel("timeseries", "Stale reports",
              "Pods whose sidecar sent no report within spec.probe.staleAfter. Lockstep fails closed, so "
              "they are isolated too; look at the sidecar's logs and the network path to the operator.",
              "none",
              [target(f'sum by (namespace, interface) ({pods("stale")}) > 0', "{{namespace}}/{{interface}}")],
              (0, 20, 12, 8)),
        panel("timeseries", "Verdicts and rejected reports",
              "Verdicts per second by condition reason, and reports the operator refused by reason (an "
              "unauthenticated or uid-mismatched report can be a forgery attempt).", "reqps",
              [target(f"sum by (result) (rate(lockstep_verifications_total{{{SCOPE}}}[$__rate_interval]))",
                      "verdict {{result}}"),
               target("sum by (reason) (rate(lockstep_reports_rejected_total[$__rate_interval])) > 0",
                      "rejected {{reason}}", ref="B")],
              (12, 20, 12, 8)),
        panel("timeseries", "Admission webhook requests",
              "Admission requests the operator answered, by webhook (mutate: sidecar injection into pods, "
              "validate: MCPServerInterface checks) and outcome.", "reqps",
              [target("sum by (webhook, outcome) (rate(lockstep_webhook_requests_total[$__rate_interval]))",
                      "{{webhook}} {{outcome}}")],
              (0, 28, 12, 8)),
        panel("table", "Currently drifted interfaces",
              "Every MCPServerInterface with drift now, with the number of findings per severity. Run "
              "`lockstep diff` on a row's resource to see the changed fields.", "none",
              [target(f"sum by (namespace, interface, severity) ({findings()}) > 0", "", instant=True,
                      table=True)],
              (12, 28, 12, 8),
              transformations=[{"id": "organize", "options": {
                  "excludeByName": {"Time": True},
                  "renameByName": {"Value": "findings"}}}]),
        panel("timeseries", "Components withheld by the in-line proxy",
              "Enforcement Quarantine: components the pods' proxies kept from clients (or, in audit, let "
              "through), per second, by interface, component kind, reason and client. A client that keeps "
              "being refused is an agent the server tried to poison.", "reqps",
              [target(f"sum by (namespace, interface, component_kind, reason, client) "
                      f"(rate(lockstep_proxy_withheld_total{{{SCOPE}}}[$__rate_interval])) > 0",
                      "{{namespace}}/{{interface}} {{component_kind}} {{reason}} {{client}}")],
              (0, 36, 12, 8)),
        panel("timeseries", "Services past the proxy",
              "Service ports that select the pods of an enforcement Quarantine interface but target a port "
              "other than lockstep-mcp: their clients are not checked.", "none",
              [target(f"max by (namespace, interface) (lockstep_proxy_bypassing_services{{{SCOPE}}}) > 0",
                      "{{namespace}}/{{interface}}")],
              (12, 36, 12, 8)),
    ]
    for number, item in enumerate(items, start=1):
        item["id"] = number
    return items


def variables() -> list[dict[str, Any]]:
    def query(name: str, expr: str) -> dict[str, Any]:
        return {"name": name, "label": name, "type": "query", "datasource": DATASOURCE,
                "query": {"query": expr, "refId": name}, "definition": expr, "refresh": 2,
                "multi": True, "includeAll": True, "allValue": ".*", "sort": 1,
                "current": {"text": "All", "value": "$__all"}}
    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {"text": "default", "value": "default"}, "hide": 0},
        query("namespace", "label_values(lockstep_pods, namespace)"),
        query("interface", 'label_values(lockstep_pods{namespace=~"$namespace"}, interface)'),
    ]


def dashboard() -> dict[str, Any]:
    return {
        "uid": UID,
        "title": "Lockstep",
        "description": "MCP server interface drift: which servers drifted, which pods are isolated, how fast "
                       "Lockstep judges. Generated by charts/lockstep/hack/dashboard.py.",
        "tags": ["lockstep", "mcp"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": variables()},
        "annotations": {"list": []},
        "panels": panels(),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the JSON is up to date")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.name} is stale: run python charts/lockstep/hack/dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
