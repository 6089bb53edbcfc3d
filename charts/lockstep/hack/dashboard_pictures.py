"""Draw the Grafana dashboard's panels from docs/img/dashboard-data.json (written by dashboard_demo.py).

    python charts/lockstep/hack/dashboard_pictures.py

Writes docs/img/dashboard.png (every panel, laid out by the dashboard's gridPos) and one
docs/img/panel-<slug>.png per panel. Each panel draws exactly the series Prometheus returned for the
panel's own query; the legend follows the panel's legendFormat. Needs matplotlib (docs only).
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DASHBOARD = HERE.parent / "dashboards" / "lockstep.json"
DATA = REPO / "docs" / "img" / "dashboard-data.json"
IMG = REPO / "docs" / "img"
BACKGROUND, PANEL, TEXT, GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"
COLORS = ["#73bf69", "#f2cc0c", "#5794f2", "#ff780a", "#f2495c", "#b877d9", "#8ab8ff", "#ffb357"]


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def legend(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m[1], ""), template).strip() or \
        ", ".join(f"{k}={v}" for k, v in labels.items()) or "value"


def style(ax: Axes, title: str) -> None:
    ax.set_facecolor(PANEL)
    ax.set_title(title, color=TEXT, fontsize=10, loc="left", pad=6)
    ax.tick_params(colors=TEXT, labelsize=7)
    for spine in ax.spines.values():
        spine.set_color(GRID)


def unit_label(unit: str) -> str:
    return {"s": "seconds", "reqps": "per second", "none": ""}.get(unit, unit)


def timeseries(ax: Axes, panel: dict[str, Any], queries: list[dict[str, Any]], started: float,
               timeline: dict[str, int]) -> None:
    stacked = panel["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {}).get("mode") == "normal"
    series = [(legend(q["legend"], s["metric"]), s["values"]) for q in queries for s in q["result"]]
    bottoms: dict[float, float] = {}
    for index, (name, values) in enumerate(sorted(series)):
        times = [datetime.datetime.fromtimestamp(float(t), datetime.UTC) for t, _ in values]
        numbers = [float(v) for _, v in values]
        color = COLORS[index % len(COLORS)]
        if stacked:
            base = [bottoms.get(float(t), 0.0) for t, _ in values]
            tops = [b + n for b, n in zip(base, numbers)]
            ax.fill_between(times, base, tops, color=color, alpha=0.35, step="post")
            ax.step(times, tops, where="post", color=color, linewidth=1.2, label=name)
            for (t, _), top in zip(values, tops):
                bottoms[float(t)] = top
        else:
            ax.plot(times, numbers, color=color, linewidth=1.4, label=name)
    for event, second in timeline.items():
        if event != "end":
            moment = datetime.datetime.fromtimestamp(started + second, datetime.UTC)
            ax.axvline(moment, color=GRID, linestyle=":", linewidth=0.8)
            ax.text(moment, 1.0, event.replace("_", " "), transform=ax.get_xaxis_transform(), color="#8e8e8e",
                    fontsize=6, rotation=90, va="top", ha="right")
    if queries:
        ax.set_xlim(datetime.datetime.fromtimestamp(queries[0]["start"], datetime.UTC),
                    datetime.datetime.fromtimestamp(queries[0]["end"], datetime.UTC))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    ax.grid(color=GRID, linewidth=0.5)
    ax.set_ylabel(unit_label(panel["fieldConfig"]["defaults"]["unit"]), color=TEXT, fontsize=7)
    ax.set_ylim(bottom=0)
    if series:
        ax.legend(fontsize=6, facecolor=PANEL, edgecolor=GRID, labelcolor=TEXT, loc="upper left")
    else:
        ax.text(0.5, 0.5, "No data", color="#8e8e8e", ha="center", va="center", transform=ax.transAxes)


def stat(ax: Axes, panel: dict[str, Any], queries: list[dict[str, Any]]) -> None:
    values = [float(s["value"][1]) for q in queries for s in q["result"]]
    value = values[0] if values else None
    steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
    color = "#73bf69"
    for step in steps:
        if value is not None and step["value"] is not None and value >= step["value"]:
            color = "#f2495c" if step["color"] == "red" else step["color"]
    unit = panel["fieldConfig"]["defaults"]["unit"]
    text = "No data" if value is None else (f"{value:.0f} s" if unit == "s" else f"{value:g}")
    ax.text(0.5, 0.45, text, color=color, fontsize=26, ha="center", va="center", transform=ax.transAxes,
            fontweight="bold")
    ax.set_xticks([])
    ax.set_yticks([])


def bars(ax: Axes, panel: dict[str, Any], queries: list[dict[str, Any]]) -> None:
    rows = sorted(((legend(q["legend"], s["metric"]), float(s["value"][1])) for q in queries for s in q["result"]),
                  key=lambda row: row[1])
    if not rows:
        ax.text(0.5, 0.5, "No data", color="#8e8e8e", ha="center", va="center", transform=ax.transAxes)
        return
    ax.barh([r[0] for r in rows], [r[1] for r in rows], color=COLORS[4], height=0.5)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(color=GRID, linewidth=0.5, axis="x")
    ax.set_xlabel("findings", color=TEXT, fontsize=7)


def table(ax: Axes, panel: dict[str, Any], queries: list[dict[str, Any]]) -> None:
    rows = [[s["metric"].get("namespace", ""), s["metric"].get("interface", ""), s["metric"].get("severity", ""),
             f"{float(s['value'][1]):g}"] for q in queries for s in q["result"]]
    ax.set_xticks([])
    ax.set_yticks([])
    if not rows:
        ax.text(0.5, 0.5, "No data", color="#8e8e8e", ha="center", va="center", transform=ax.transAxes)
        return
    cells = ax.table(cellText=rows, colLabels=["namespace", "interface", "severity", "findings"], loc="upper center",
                     cellLoc="left")
    for cell in cells.get_celld().values():
        cell.set_facecolor(PANEL)
        cell.set_edgecolor(GRID)
        cell.get_text().set_color(TEXT)
    cells.scale(1, 1.4)


def draw(ax: Axes, panel: dict[str, Any], queries: list[dict[str, Any]], data: dict[str, Any]) -> None:
    style(ax, panel["title"])
    kind = panel["type"]
    if kind == "timeseries":
        timeseries(ax, panel, queries, data["started"], data["timeline"])
    elif kind == "stat":
        stat(ax, panel, queries)
    elif kind == "barchart":
        bars(ax, panel, queries)
    else:
        table(ax, panel, queries)


def main() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    data = json.loads(DATA.read_text())
    by_panel: dict[str, list[dict[str, Any]]] = {}
    for query in data["queries"]:
        by_panel.setdefault(query["panel"], []).append(query)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    figure = plt.figure(figsize=(16, rows * 0.5), facecolor=BACKGROUND)
    grid = figure.add_gridspec(rows, 24, hspace=3.0, wspace=1.2, top=0.96, bottom=0.02, left=0.06, right=0.99)
    for panel in dashboard["panels"]:
        x, y, w, h = (panel["gridPos"][k] for k in ("x", "y", "w", "h"))
        draw(figure.add_subplot(grid[y:y + h, x:x + w]), panel, by_panel.get(panel["title"], []), data)
    figure.suptitle("Lockstep (dashboard uid lockstep-overview): a rug pull, a stale sidecar, forged reports, "
                    "an approval", color=TEXT, fontsize=12, y=0.99)
    figure.savefig(IMG / "dashboard.png", dpi=80, facecolor=BACKGROUND)
    plt.close(figure)
    for panel in dashboard["panels"]:
        small = plt.figure(figsize=(8 if panel["gridPos"]["w"] > 6 else 3.5, 3.2), facecolor=BACKGROUND)
        draw(small.add_subplot(1, 1, 1), panel, by_panel.get(panel["title"], []), data)
        small.savefig(IMG / f"panel-{slug(panel['title'])}.png", dpi=90, facecolor=BACKGROUND, bbox_inches="tight")
        plt.close(small)


if __name__ == "__main__":
    main()
