"""The Grafana dashboard: importable on its own, shipped by the chart, and built only from metrics,
labels and label values that the operator's and the sidecar's code really export."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from lockstep_testing.chart_render import ALL_ON, CHART_DIR, Render, one
from lockstep_testing.promql_names import RegisteredMetric, check_expression, code_metrics

DASHBOARD_PATH = CHART_DIR / "dashboards" / "lockstep.json"
@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD_PATH.read_text())


@pytest.fixture(scope="module")
def registered() -> dict[str, RegisteredMetric]:
    return code_metrics()


def expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable["definition"])
            assert inner, variable["definition"]
            exprs.append(f"count by ({inner[2]}) ({inner[1]})")
    return exprs


def test_every_query_uses_metrics_labels_and_values_the_code_exports(dashboard: dict[str, Any], registered: dict[str, RegisteredMetric]) -> None:
    problems = [p for expr in expressions(dashboard) for p in check_expression(expr, registered)]
    assert not problems, problems


def test_the_cross_check_catches_a_renamed_metric_and_label(registered: dict[str, RegisteredMetric]) -> None:
    assert check_expression("sum(lockstep_pod{state='x'})", registered) == [
        "lockstep_pod is not registered by the code"]
    expr = 'sum by (tool) (lockstep_pods{state="drift"})'
    assert check_expression(expr, registered) == [
        "lockstep_pods{state} never takes ['drift']", f"grouping by unknown label tool in {expr!r}"]


def test_datasource_is_the_first_variable_then_namespace(dashboard: dict[str, Any]) -> None:
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names[:2] == ["datasource", "namespace"]
    assert dashboard["uid"] == "lockstep-overview"


def test_every_panel_has_a_unit_a_description_and_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in dashboard["panels"]:
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
        assert len(panel.get("description", "")) > 40, panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]


def test_the_panels_answer_the_questions_the_issue_asks(dashboard: dict[str, Any]) -> None:
    titles = {p["title"] for p in dashboard["panels"]}
    assert {"Drift over time, per namespace and server", "Isolated pods",
            "Drift findings by component kind, change and severity", "Verification latency",
            "Stale reports", "Currently drifted interfaces"} <= titles
    table = next(p for p in dashboard["panels"] if p["title"] == "Currently drifted interfaces")
    assert table["type"] == "table"
    latency = next(p for p in dashboard["panels"] if p["title"] == "Verification latency")
    assert all("histogram_quantile" in t["expr"] for t in latency["targets"])


def test_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & mine, panel["title"]
        assert grid["x"] + grid["w"] <= 24
        cells |= mine


def test_the_json_is_what_the_generator_writes() -> None:
    result = subprocess.run([sys.executable, str(CHART_DIR / "hack" / "dashboard.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_the_chart_ships_the_dashboard_in_a_labelled_configmap(render: Render, dashboard: dict[str, Any]) -> None:
    configmap = one(render(ALL_ON), "ConfigMap", "demo-lockstep-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["lockstep.json"]) == dashboard


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_every_query_is_valid_promql(dashboard: dict[str, Any], tmp_path: Path) -> None:
    """promtool parses each panel query (Grafana's variables filled in) as a recording rule."""
    rules = [{"record": f"lockstep:panel_{panel['id']}_{target['refId'].lower()}",
              "expr": target["expr"].replace("$__rate_interval", "1m").replace("$namespace", ".*")
              .replace("$interface", ".*")}
             for panel in dashboard["panels"] for target in panel["targets"]]
    rule_file = tmp_path / "panels.rules.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    result = subprocess.run(["promtool", "check", "rules", str(rule_file)], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout
