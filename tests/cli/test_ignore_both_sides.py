"""`--ignore` applies to both sides of every comparison (issue 12): before, `verify X --against X
--ignore P` exited 1 with "component digest differs; definitions unavailable", and `diff a.yaml b.json
--ignore P` did the same, because the rule reached one side only. docs/digest.md: both sides are
digested with the same rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from lockstep.cli import cli

INTERFACE = {"tools": [{"name": "get_forecast", "description": "Forecast.", "inputSchema": {"type": "object"},
                        "_meta": {"build": "2026-11-01"}}]}
REBUILT = {"tools": [{**INTERFACE["tools"][0], "_meta": {"build": "2026-11-23"}}]}


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    pinned, rebuilt = tmp_path / "pinned.json", tmp_path / "rebuilt.json"
    pinned.write_text(json.dumps(INTERFACE))
    rebuilt.write_text(json.dumps(REBUILT))
    manifest = tmp_path / "manifest.yaml"
    result = run("snapshot", str(pinned), "--name", "weather", "-n", "agents")
    assert result.exit_code == 0, result.output
    manifest.write_text(result.stdout)
    return pinned, rebuilt, manifest


def test_verify_a_file_against_itself_with_ignore(tmp_path: Path) -> None:
    pinned, _, manifest = files(tmp_path)
    for against in (pinned, manifest):
        result = run("verify", str(pinned), "--against", str(against), "--ignore", "/tools/*/_meta/build")
        assert result.exit_code == 0, result.output


def test_verify_ignores_the_volatile_field_on_both_sides(tmp_path: Path) -> None:
    _, rebuilt, manifest = files(tmp_path)
    assert run("verify", str(rebuilt), "--against", str(manifest)).exit_code == 1
    result = run("verify", str(rebuilt), "--against", str(manifest), "--ignore", "/tools/*/_meta/build")
    assert result.exit_code == 0, result.output


def test_diff_of_a_manifest_and_a_snapshot_with_ignore(tmp_path: Path) -> None:
    _, rebuilt, manifest = files(tmp_path)
    assert run("diff", str(manifest), str(rebuilt)).exit_code == 1
    result = run("diff", str(manifest), str(rebuilt), "--ignore", "/tools/*/_meta/build")
    assert result.exit_code == 0, result.output


def test_the_manifests_own_ignore_rules_reach_the_other_side_of_a_diff(tmp_path: Path) -> None:
    _, rebuilt, manifest = files(tmp_path)
    document = yaml.safe_load(manifest.read_text())
    ignoring = tmp_path / "ignoring.yaml"
    result = run("snapshot", str(tmp_path / "pinned.json"), "--name", "weather", "--ignore", "/tools/*/_meta/build")
    ignoring.write_text(result.stdout)
    assert document["spec"].get("ignore") is None
    assert run("diff", str(ignoring), str(rebuilt)).exit_code == 0


def test_ignore_with_a_digests_only_manifest_says_what_is_missing(tmp_path: Path) -> None:
    pinned, _, _ = files(tmp_path)
    bare = tmp_path / "bare.yaml"
    bare.write_text(run("snapshot", str(pinned), "--name", "weather", "--digests-only").stdout)
    result = run("verify", str(pinned), "--against", str(bare), "--ignore", "/tools/*/_meta/build")
    assert result.exit_code == 2
    assert "--digests-only" in result.output
