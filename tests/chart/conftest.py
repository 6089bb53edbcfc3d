"""Fixtures for the Helm chart tests: the chart loaded once, and a render function."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helm_python.chart import Chart
from lockstep_testing.chart_render import CHART_DIR, NAMESPACE, RELEASE, Manifest, Render, documents


@pytest.fixture(scope="session")
def chart() -> Iterator[Chart]:
    with Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def render(chart: Chart) -> Render:
    def _render(values: dict[str, Any] | None = None) -> list[Manifest]:
        return documents(chart.render(values=values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True))
    return _render
