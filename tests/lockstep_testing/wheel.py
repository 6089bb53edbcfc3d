"""The working tree's wheel, built the way a user's `pip wheel .` builds it, for the packaging tests.

setuptools builds in the source folder (it writes `build/` and `*.egg-info` there), so two builds of the
checkout at once (pytest-xdist workers, or `make image` beside `make test`) race on those folders. Each
build here works on its own copy of the tree, and a failure shows pip's own output."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What a build never reads: local state, caches and earlier build outputs.
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "node_modules",
                                    ".hypothesis", ".pytest_cache", ".mypy_cache", ".ruff_cache")


class WheelBuildFailed(AssertionError):
    """`pip wheel` of the working tree exited non-zero; the message carries its output."""


def build_wheel(into: Path) -> Path:
    """Build the working tree's wheel into `into` from a private copy of the tree; return the wheel's path."""
    source = into / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--disable-pip-version-check",
                             "-w", str(into / "dist"), str(source)], check=False,
                             capture_output=True, text=True)
    if result.returncode != 0:
        raise WheelBuildFailed(f"pip wheel exited {result.returncode}:\n{result.stdout[-4000:]}{result.stderr[-4000:]}")
    (wheel,) = (into / "dist").glob("mcp_lockstep-*.whl")
    return wheel
