"""The PrometheusRule: complete alerts, runbooks that exist, metrics the code exports, and (with promtool)
rules that Prometheus accepts and that fire on the series a drift, an isolation or an outage produce."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from lockstep_testing.chart_render import ALL_ON, REPO, Render, one
from lockstep_testing.promql_names import check_expression, code_metrics

RUNBOOK = REPO / "docs" / "alerts.md"
PROMTOOL = shutil.which("promtool") or "promtool"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool not installed (apt-get install prometheus)")


@pytest.fixture(scope="module")
def rules(render: Render) -> list[dict[str, Any]]:
    rule = one(render(ALL_ON), "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


@pytest.fixture(scope="module")
def rule_file(render: Render, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "lockstep.rules.yaml"
    path.write_text(yaml.safe_dump(one(render(ALL_ON), "PrometheusRule")["spec"]))
    return path


def runbook_anchors() -> set[str]:
    return {re.sub(r"[^a-z0-9-]", "", line[3:].strip().lower().replace(" ", "-"))
            for line in RUNBOOK.read_text().splitlines() if line.startswith("## ")}


def test_every_alert_is_complete_and_links_to_its_runbook_section(rules: list[dict[str, Any]]) -> None:
    anchors = runbook_anchors()
    assert len(rules) == 7
    for rule in rules:
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["labels"]["team"] == "platform", "additionalLabels must reach every alert"
        assert re.fullmatch(r"\d+m", rule["for"]), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        url = rule["annotations"]["runbook_url"]
        assert url.endswith(f"docs/alerts.md#{name.lower()}"), url
        assert name.lower() in anchors, f"docs/alerts.md has no section {name}"


def test_alert_expressions_use_only_metrics_the_code_exports(rules: list[dict[str, Any]]) -> None:
    problems = [p for rule in rules for p in check_expression(rule["expr"], code_metrics())]
    assert not problems, problems


def test_thresholds_come_from_values(render: Render) -> None:
    values = {**ALL_ON, "metrics": {**ALL_ON["metrics"], "prometheusRule": {
        "enabled": True, "isolatedForMinutes": 3, "webhookErrorRatio": 0.5}}}
    rules = {r["alert"]: r for g in one(render(values), "PrometheusRule")["spec"]["groups"] for r in g["rules"]}
    assert rules["LockstepPodIsolated"]["for"] == "3m"
    assert rules["LockstepWebhookErrors"]["expr"].endswith("> 0.5")


@needs_promtool
def test_promtool_accepts_the_rules(rule_file: Path) -> None:
    result = subprocess.run([PROMTOOL, "check", "rules", str(rule_file)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _fill(template: str, labels: dict[str, str], value: str) -> str:
    """The few Go-template forms the descriptions use, for the expected annotations."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], template)
    return re.sub(r"\{\{ \$value( \| \w+)? \}\}", value, text)


def _expected(rule: dict[str, Any], labels: dict[str, str], value: str) -> dict[str, Any]:
    annotations = {k: _fill(v, labels, value) for k, v in rule["annotations"].items()}
    return {"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": annotations}


@needs_promtool
def test_alerts_fire_on_drift_isolation_staleness_refusals_and_outage_and_not_before(rules: list[dict[str, Any]], rule_file: Path, tmp_path: Path) -> None:
    by_name = {r["alert"]: r for r in rules}
    weather = {"namespace": "agents", "interface": "weather"}
    finding = 'component_kind="tool", change="changed", severity="high"'
    series = [
        # Two operator replicas: the active one (a) sees the drift, the paused one (b) exports zeros.
        {"series": f'lockstep_drift_findings{{namespace="agents", interface="weather", {finding}, instance="a"}}',
         "values": "0x4 2x30"},
        {"series": f'lockstep_drift_findings{{namespace="agents", interface="weather", {finding}, instance="b"}}',
         "values": "0x34"},
        {"series": 'lockstep_pods{namespace="agents", interface="weather", state="drifted", instance="a"}',
         "values": "0x4 1x30"},
        {"series": 'lockstep_pods{namespace="agents", interface="weather", state="stale", instance="a"}',
         "values": "0x9 2x25"},
        # An Audit interface that drifted: its pods still serve, so it is not isolated.
        {"series": 'lockstep_pods{namespace="agents", interface="notes", state="audit", instance="a"}',
         "values": "3x34"},
        {"series": 'up{job="lockstep", namespace="lockstep-system", instance="a"}', "values": "1x14 0x20"},
        # The pod webhook injects 10 pods a minute; from minute 15 it also refuses 5 a minute.
        {"series": 'lockstep_webhook_requests_total{webhook="mutate", outcome="injected", instance="a"}',
         "values": "0+10x34"},
        {"series": 'lockstep_webhook_requests_total{webhook="mutate", outcome="refused", instance="a"}',
         "values": "0x15 0+5x19"},
        # A quarantined interface gets a Service that bypasses its proxy at minute 10.
        {"series": 'lockstep_proxy_bypassing_services{namespace="agents", interface="weather", instance="a"}',
         "values": "0x9 1x25"},
    ]
    ops = {"LockstepInterfaceDrifted": by_name["LockstepInterfaceDrifted"],
           "LockstepPodIsolated": by_name["LockstepPodIsolated"]}
    cases = [
        {"eval_time": "5m", "alertname": "LockstepInterfaceDrifted", "exp_alerts": []},
        {"eval_time": "7m", "alertname": "LockstepInterfaceDrifted",
         "exp_alerts": [_expected(ops["LockstepInterfaceDrifted"], weather, "2")]},
        {"eval_time": "12m", "alertname": "LockstepPodIsolated", "exp_alerts": []},
        # drifted since 5m and stale since 10m: 3 pods isolated for more than 10 minutes at 16m.
        {"eval_time": "16m", "alertname": "LockstepPodIsolated",
         "exp_alerts": [_expected(ops["LockstepPodIsolated"], weather, "3")]},
        {"eval_time": "16m", "alertname": "LockstepSidecarReportsStale", "exp_alerts": []},
        {"eval_time": "21m", "alertname": "LockstepSidecarReportsStale",
         "exp_alerts": [_expected(by_name["LockstepSidecarReportsStale"], weather, "2")]},
        {"eval_time": "18m", "alertname": "LockstepOperatorDown", "exp_alerts": []},
        {"eval_time": "21m", "alertname": "LockstepOperatorDown",
         "exp_alerts": [_expected(by_name["LockstepOperatorDown"], {}, "1")]},
        {"eval_time": "14m", "alertname": "LockstepProxyBypassed", "exp_alerts": []},
        {"eval_time": "16m", "alertname": "LockstepProxyBypassed",
         "exp_alerts": [_expected(by_name["LockstepProxyBypassed"], weather, "1")]},
        {"eval_time": "18m", "alertname": "LockstepWebhookErrors", "exp_alerts": []},
        {"eval_time": "24m", "alertname": "LockstepWebhookErrors",
         "exp_alerts": [_expected(by_name["LockstepWebhookErrors"], {"webhook": "mutate"}, "33.33%")]},
    ]
    tests = {"rule_files": [str(rule_file)], "evaluation_interval": "1m",
             "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": cases}]}
    test_file = tmp_path / "alerts_test.yaml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_notices_an_alert_that_does_not_fire(rules: list[dict[str, Any]], rule_file: Path, tmp_path: Path) -> None:
    """The harness itself can fail: expecting a drift alert on clean series is an error."""
    rule = next(r for r in rules if r["alert"] == "LockstepInterfaceDrifted")
    tests = {"rule_files": [str(rule_file)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": 'lockstep_drift_findings{namespace="agents", interface="weather", '
                                    'component_kind="tool", change="changed", severity="high"}', "values": "0x20"}],
        "alert_rule_test": [{"eval_time": "10m", "alertname": "LockstepInterfaceDrifted",
                             "exp_alerts": [_expected(rule, {"namespace": "agents", "interface": "weather"}, "2")]}],
    }]}
    test_file = tmp_path / "alerts_test.yaml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, check=False)
    assert result.returncode != 0
