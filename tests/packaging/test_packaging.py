"""Both an editable install and a plain wheel import lockstep, lockstep.operator and lockstep.sidecar,
and no importable package shadows the standard library's ``operator``."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from lockstep_testing.wheel import build_wheel

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import lockstep, lockstep.operator, lockstep.sidecar, lockstep.cli, operator, json;"
    "print(json.dumps({'lockstep': lockstep.__file__, 'operator_pkg': lockstep.operator.__file__,"
    " 'sidecar_pkg': lockstep.sidecar.__file__, 'stdlib_operator': operator.__file__}))"
)


def probe(cwd: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    import json

    output = subprocess.run([sys.executable, "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True,
                            check=True)
    return json.loads(output.stdout)


def test_the_installed_package_maps_operator_and_sidecar_folders(tmp_path):
    paths = probe(tmp_path)
    assert Path(paths["operator_pkg"]).parent.name == "operator"
    assert Path(paths["sidecar_pkg"]).parent.name == "sidecar"
    assert Path(paths["stdlib_operator"]).name == "operator.py"


def test_running_from_the_repository_root_keeps_the_stdlib_operator():
    assert Path(probe(ROOT)["stdlib_operator"]).name == "operator.py"


def test_python_dash_m_from_the_repository_root_imports_the_stdlib_operator():
    """`python -m` puts the working directory first on sys.path (the image build and `python -m pytest` do)."""
    output = subprocess.run([sys.executable, "-m", "operator"], cwd=ROOT, capture_output=True, text=True)
    assert "lockstep" not in output.stderr and "__init__" not in output.stderr
    assert not (ROOT / "operator").exists() and not (ROOT / "sidecar").exists()


@pytest.mark.slow
def test_a_plain_wheel_holds_and_imports_every_package(tmp_path):
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "lockstep/operator/__init__.py" in names and "lockstep/sidecar/__init__.py" in names
    assert not any(name.startswith(("operator/", "sidecar/", "tests/")) for name in names)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    paths = probe(tmp_path, env={**os.environ, "PYTHONPATH": str(target)})
    assert paths["lockstep"].startswith(str(target))
    assert paths["operator_pkg"] == str(target / "lockstep" / "operator" / "__init__.py")
    assert paths["sidecar_pkg"] == str(target / "lockstep" / "sidecar" / "__init__.py")
