"""releases/: the source of earlier releases that the upgrade tier builds and installs (tools/release-source).

A CI checkout may hold neither the tags nor the history, so the previous release travels as an archive with
a checksum. What a user of the upgrade tier relies on: every archive has its checksum line and matches it, it
unpacks into a tree that builds that release's image and installs its chart, it is the tag's own tree where
the tag is known, and a replaced or altered archive is refused before anything is built from it."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from lockstep_testing.chart_render import REPO

RELEASES = REPO / "releases"
TOOL = REPO / "tools" / "release-source"
ARCHIVES = sorted(RELEASES.glob("v*.tar.gz"))


def tag_of(archive: Path) -> str:
    return archive.name.removesuffix(".tar.gz")


def unpack(tag: str, into: Path, releases: Path = RELEASES, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TOOL), "unpack", tag, str(into)], check=False, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "RELEASES": str(releases), **env}, timeout=60)


def checksums(releases: Path = RELEASES) -> dict[str, str]:
    lines = (releases / "SHA256SUMS").read_text().splitlines()
    return {name: digest for digest, name in (line.split("  ", 1) for line in lines if line)}


def tag_commit(tag: str) -> str | None:
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}"], cwd=REPO,
                           check=False, capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else None


def test_the_upgrade_tiers_previous_release_is_shipped() -> None:
    previous = previous_tag()
    assert (RELEASES / f"{previous}.tar.gz").is_file(), f"tools/realnode-e2e installs {previous} first"


def previous_tag() -> str:
    for line in (REPO / "tools" / "realnode-e2e").read_text().splitlines():
        if line.startswith("PREVIOUS_TAG="):
            return line.split(":-", 1)[1].rstrip('}"')
    raise AssertionError("tools/realnode-e2e names no PREVIOUS_TAG")


def test_every_archive_has_its_checksum() -> None:
    sums = checksums()
    assert sorted(sums) == [archive.name for archive in ARCHIVES]
    for archive in ARCHIVES:
        assert hashlib.sha256(archive.read_bytes()).hexdigest() == sums[archive.name], archive.name


@pytest.mark.parametrize("archive", ARCHIVES, ids=tag_of)
def test_an_archive_unpacks_into_a_tree_that_builds_its_release(archive: Path, tmp_path: Path) -> None:
    result = unpack(tag_of(archive), tmp_path)
    assert result.returncode == 0, result.stderr
    version = tag_of(archive).removeprefix("v")
    chart = yaml.safe_load((tmp_path / "charts" / "lockstep" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (version, version)
    assert f'__version__ = "{version}"' in (tmp_path / "lockstep" / "__init__.py").read_text()
    for needed in ("Dockerfile", "pyproject.toml", "README.md", "tools/image/build.sh"):
        assert (tmp_path / needed).is_file(), needed


@pytest.mark.parametrize("archive", ARCHIVES, ids=tag_of)
def test_an_archive_is_its_tags_tree(archive: Path) -> None:
    """Where the tag is in the clone: the archive records the tag's commit and holds exactly its files."""
    tag = tag_of(archive)
    commit = tag_commit(tag)
    if commit is None:
        pytest.skip(f"the tag {tag} is not in this clone (a shallow or tagless checkout)")
    recorded = subprocess.run(["git", "get-tar-commit-id"], input=gzip.decompress(archive.read_bytes()),
                              check=True, capture_output=True).stdout.decode().strip()
    assert recorded == commit
    shipped = subprocess.run(["tar", "-tzf", str(archive)], check=True, capture_output=True, text=True)
    tree = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit, "--", "Dockerfile", ".dockerignore",
                           "pyproject.toml", "README.md", "lockstep", "charts", "tools/image"],
                          cwd=REPO, check=True, capture_output=True, text=True)
    files = {name for name in shipped.stdout.splitlines() if not name.endswith("/")}
    assert files == set(tree.stdout.splitlines())


def copy_of_releases(tmp_path: Path) -> Path:
    copy = tmp_path / "releases"
    shutil.copytree(RELEASES, copy)
    return copy


@pytest.mark.parametrize("archive", ARCHIVES, ids=tag_of)
def test_an_altered_archive_is_refused_before_anything_is_unpacked(archive: Path, tmp_path: Path) -> None:
    releases = copy_of_releases(tmp_path)
    altered = releases / archive.name
    altered.write_bytes(gzip.compress(gzip.decompress(archive.read_bytes()) + b"\0" * 512))
    into = tmp_path / "tree"
    result = unpack(tag_of(archive), into, releases)
    assert result.returncode == 2
    assert "does not match its SHA-256" in result.stderr
    assert not into.exists() or not any(into.iterdir())


def test_an_archive_without_a_checksum_line_is_refused(tmp_path: Path) -> None:
    releases = copy_of_releases(tmp_path)
    shutil.copy(ARCHIVES[0], releases / "v9.9.9.tar.gz")
    result = unpack("v9.9.9", tmp_path / "tree", releases)
    assert result.returncode == 2
    assert "v9.9.9.tar.gz has no line in" in result.stderr


@pytest.mark.parametrize("archive", ARCHIVES, ids=tag_of)
def test_a_checksum_line_of_a_look_alike_name_does_not_vouch_for_the_archive(archive: Path, tmp_path: Path) -> None:
    """The name in SHA256SUMS is compared whole: `v0a1a0.tar.gz`'s good line says nothing of `v0.1.0.tar.gz`."""
    releases = copy_of_releases(tmp_path)
    look_alike = archive.name.removesuffix(".tar.gz").replace(".", "a") + ".tar.gz"
    shutil.copy(archive, releases / look_alike)
    (releases / "SHA256SUMS").write_text(f"{checksums()[archive.name]}  {look_alike}\n")
    (releases / archive.name).write_bytes(gzip.compress(gzip.decompress(archive.read_bytes()) + b"\0" * 512))
    result = unpack(tag_of(archive), tmp_path / "tree", releases)
    assert result.returncode == 2
    assert f"{archive.name} has no line in" in result.stderr


def test_a_release_that_is_not_shipped_says_how_to_make_it(tmp_path: Path) -> None:
    result = unpack("v0.0.1", tmp_path / "tree")
    assert result.returncode == 2
    assert "no source archive of v0.0.1" in result.stderr
    assert "tools/release-source pack v0.0.1" in result.stderr


@pytest.mark.parametrize("archive", ARCHIVES, ids=tag_of)
def test_an_archive_made_from_another_commit_than_the_tag_is_refused(archive: Path, tmp_path: Path) -> None:
    """A moved tag, or an archive replaced together with its checksum line: the tag, where known, decides."""
    clone = tmp_path / "clone"
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "elsewhere"], check=True)
    subprocess.run([*git, "tag", tag_of(archive)], check=True)
    into = tmp_path / "tree"
    result = unpack(tag_of(archive), into, GIT_DIR=str(clone / ".git"))
    assert result.returncode == 2
    assert f"but the tag {tag_of(archive)} in this clone is" in result.stderr
    assert not into.exists()
