"""Releases (issue 26): Lockstep's version has one home, ``lockstep.__version__``; the distribution reads it,
the chart's version and appVersion, the image's label, CHANGELOG.md's latest release and ``lockstep --version``
say the same, and every report of the sidecar carries it."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import httpx2
import yaml
from click.testing import CliRunner
from lockstep.cli import cli
from lockstep.sidecar.metrics import SidecarMetrics
from lockstep.sidecar.reporter import Reporter

from lockstep import __version__
from lockstep.core import Interface
from lockstep.core.report import Freshness, ReportError
from lockstep.core.skew import Version

REPO = Path(__file__).resolve().parents[2]


def test_the_version_is_semver() -> None:
    assert Version.parse(__version__) is not None and not Version.parse(__version__).suffix  # type: ignore[union-attr]


def test_the_distribution_reads_the_version_from_its_one_home() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "lockstep.__version__"}
    # setuptools reads it without importing lockstep: a plain string assignment
    assert re.search(rf'^__version__ = "{re.escape(__version__)}"$', (REPO / "lockstep/__init__.py").read_text(),
                     re.MULTILINE)


def test_the_chart_and_the_image_are_in_step() -> None:
    chart = yaml.safe_load((REPO / "charts/lockstep/Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(rf"^ARG LOCKSTEP_VERSION={re.escape(__version__)}$", dockerfile, re.MULTILINE)
    assert 'org.opencontainers.image.version="${LOCKSTEP_VERSION}"' in dockerfile
    # The ARG is declared in the stage that carries the label (an ARG before FROM is not seen by LABEL).
    runtime = dockerfile[dockerfile.rindex("\nFROM "):]
    assert "ARG LOCKSTEP_VERSION=" in runtime and "org.opencontainers.image.version" in runtime


def test_the_changelog_names_this_release_first_and_the_previous_one() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, re.MULTILINE)
    assert [version for version, _ in releases][:2] == [__version__, "0.1.0"]
    assert "## [Unreleased]" in text  # Keep a Changelog: what is landing goes there first
    latest = text[text.index(f"## [{__version__}]"):text.index("## [0.1.0]")]
    for section in ("### Added", "### Changed", "### Breaking", "### Security"):
        assert section in latest, section
    for version, _ in releases:
        assert re.search(rf"^\[{re.escape(version)}\]: \S+$", text, re.MULTILINE), f"no link for {version}"


def test_lockstep_dash_dash_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output == f"lockstep, version {__version__}\n"


def test_the_version_is_an_optional_typed_field_of_the_report() -> None:
    stamp = Freshness("0" * 32, "2026-11-22T02:00:00Z", 1, "2026-11-22T02:00:00Z", "0.2.0")
    assert stamp.to_dict()["sidecarVersion"] == "0.2.0"
    assert Freshness.from_dict(stamp.to_dict()) == stamp
    older = {key: value for key, value in stamp.to_dict().items() if key != "sidecarVersion"}
    assert "sidecarVersion" not in Freshness(*list(older.values())).to_dict()
    assert Freshness.from_dict(older).sidecar_version is None  # a sidecar from before 0.2.0
    assert Freshness.from_dict({**older, "sidecarVersion": "nightly"}).sidecar_version == "nightly"  # judged by skew
    for bad in (2, ["0.2.0"], "9" * 65):
        try:
            Freshness.from_dict({**older, "sidecarVersion": bad})
        except ReportError as error:
            assert "sidecarVersion" in str(error)
        else:
            raise AssertionError(f"{bad!r} accepted")


async def test_every_report_of_the_sidecar_carries_its_version(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("token")
    sent: list[dict[str, Any]] = []

    def operator(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(202, json={"verdict": {"status": "True", "reason": "Verified", "message": "ok"},
                                          "digests": True})

    from lockstep.core.report import Observation

    observation = Observation.of_interface(Interface.from_document({"tools": [
        {"name": "t", "description": "d", "inputSchema": {"type": "object"}}]}), "2026-11-22T02:00:00Z")
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(operator)) as client:
        reporter = Reporter("https://operator/v1/reports", token, client, SidecarMetrics())
        for _ in range(2):  # a full report, then a digest-only one
            await reporter._deliver(observation)
    assert ["definitions" in body for body in sent] == [True, False]
    assert [body["sidecarVersion"] for body in sent] == [__version__, __version__]
