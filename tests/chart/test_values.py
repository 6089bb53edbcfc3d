"""values.yaml is the single source of the chart's documentation and schema; the schema refuses typos."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml
from helm_python import HelmRenderError, HelmValuesError
from helm_python.chart import Chart
from lockstep_testing.chart_render import ALL_ON, CHART_DIR, NAMESPACED

HACK = CHART_DIR / "hack" / "values_docs.py"


@pytest.mark.parametrize("values", [{}, ALL_ON, NAMESPACED], ids=["defaults", "all-on", "namespaced"])
def test_the_schema_accepts_the_documented_scenarios(chart: Chart, values: dict[str, Any]) -> None:
    chart.validate_schema(values)


@pytest.mark.parametrize("values, complaint", [
    ({"operator": {"replicaCout": 3}}, "replicaCout"),
    ({"metrics": {"serviceMonitor": {"enabled": True, "label": {"release": "x"}}}}, "label"),
    ({"webhook": {"failurePolicy": "fail"}}, "failurePolicy"),
    ({"webhook": {"timeoutSeconds": 31}}, "timeoutSeconds"),
    ({"logLevel": "verbose"}, "logLevel"),
    ({"operator": {"watchNamespaces": "agents"}}, "watchNamespaces"),
], ids=["typo-top", "typo-nested", "enum", "maximum", "log-level", "type"])
def test_the_schema_refuses_a_typo_or_a_bad_value(chart: Chart, values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(HelmValuesError, match=complaint):
        chart.validate_schema(values)


def test_an_install_with_a_typo_fails_instead_of_ignoring_it(chart: Chart) -> None:
    with pytest.raises((HelmValuesError, HelmRenderError), match="replicaCout"):
        chart.render(values={"operator": {"replicaCout": 3}}, name="demo", namespace="lockstep-system")


def test_every_value_is_described_in_the_schema(chart: Chart) -> None:
    def walk(schema: dict[str, Any], path: str) -> list[str]:
        if "properties" not in schema:
            return [] if schema.get("description") else [path]
        assert schema["additionalProperties"] is False, path
        return [p for key, child in schema["properties"].items() for p in walk(child, f"{path}.{key}")]
    assert chart.schema is not None
    assert walk(chart.schema, "") == []


def test_schema_defaults_are_the_values_defaults(chart: Chart) -> None:
    def defaults(schema: dict[str, Any]) -> Any:
        if "properties" in schema:
            return {key: defaults(child) for key, child in schema["properties"].items()}
        return schema["default"]
    assert chart.schema is not None
    assert defaults(chart.schema) == yaml.safe_load((CHART_DIR / "values.yaml").read_text())


def test_schema_and_readme_are_generated_from_values_yaml() -> None:
    result = subprocess.run([sys.executable, str(HACK), "--check"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_contradictory_values_fail_the_render_with_a_reason(chart: Chart) -> None:
    with pytest.raises(HelmRenderError, match="peering"):
        chart.render(values={"operator": {"peering": {"enabled": False}}}, name="demo", namespace="ns")
    with pytest.raises(HelmRenderError, match="issuerRef.kind"):
        chart.render(values={"tls": {"certManager": {"enabled": True, "issuerRef": {"name": "corp"}}}},
                     name="demo", namespace="ns")
