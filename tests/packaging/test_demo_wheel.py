"""`lockstep demo` runs from an installed wheel (issue 27 item 7): the wheel installed with the `demo` extra
into a fresh venv, run from a folder outside any checkout, tells the whole story on the kmock emulation; the
real control-plane backend there says it needs a checkout for the chart."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from lockstep_testing.wheel import build_wheel

# Both tests on one pytest-xdist worker: the module's venv (a wheel build and a pip install, a minute under
# make test's load) is then made once, not once on each worker that draws one of them.
pytestmark = pytest.mark.xdist_group("demo-wheel")

#: A line of the story that only the loop prints: the rug pull cut, by the sidecar and the operator.
DRIFT_CAUGHT = "drift caught in"


@pytest.fixture(scope="module")
def demo_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the working tree's wheel and its `demo` extra (from PyPI; pip's cache makes it quick)."""
    folder = tmp_path_factory.mktemp("demo-wheel")
    wheel = build_wheel(folder)
    venv.create(folder / "venv")  # no pip of its own: this interpreter's pip installs into it (--python)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(folder / "venv" / "bin" / "python"), "install",
                    "-q", "--disable-pip-version-check", f"{wheel}[demo]"], check=True, capture_output=True)
    return folder / "venv"


def outside_the_checkout(tmp_path: Path, **extra: str) -> dict[str, object]:
    """How to run a command with no checkout on its path: a fresh working folder, no PYTHONPATH."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("PYTHONPATH", "VIRTUAL_ENV", "KUBEBUILDER_ASSETS") and not name.startswith("LOCKSTEP_")}
    cwd = tmp_path / "elsewhere"
    cwd.mkdir(parents=True)
    return {"cwd": cwd, "env": {**env, **extra}, "capture_output": True, "text": True, "timeout": 120}


@pytest.mark.slow
def test_lockstep_demo_runs_the_whole_loop_from_the_wheel(demo_venv: Path, tmp_path: Path) -> None:
    where = subprocess.run([str(demo_venv / "bin" / "python"), "-c", "import lockstep; print(lockstep.__file__)"],
                           **outside_the_checkout(tmp_path / "probe"))
    assert where.stdout.startswith(str(demo_venv)), where.stdout + where.stderr
    result = subprocess.run([str(demo_venv / "bin" / "lockstep"), "demo", "--backend", "emulated"],
                            **outside_the_checkout(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Lockstep demo on the kmock emulation" in result.stdout
    assert DRIFT_CAUGHT in result.stdout and "0 poisoned ✓" in result.stdout
    assert "back in the Service" in result.stdout


@pytest.mark.slow
def test_the_real_backend_from_the_wheel_asks_for_a_checkout(demo_venv: Path, tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    for binary in ("etcd", "kube-apiserver", "kube-controller-manager"):
        (assets / binary).write_text("")
    result = subprocess.run([str(demo_venv / "bin" / "lockstep"), "demo", "--backend", "real"],
                            **outside_the_checkout(tmp_path, KUBEBUILDER_ASSETS=str(assets)))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "charts/lockstep" in result.stderr and "--backend emulated" in result.stderr
