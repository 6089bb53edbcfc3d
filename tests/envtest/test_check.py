"""`lockstep check` against a real API server: what it finds wrong, named, with a hint and exit code 1;
a user who may not install gets `--pre` failing for that. (The healthy installed release, with its
webhook's dry run, is checked on the real node: tests/e2e/test_check.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from lockstep.demo.control_plane import ControlPlane


def _kubeconfig(plane: ControlPlane, folder: Path, token: str | None = None) -> Path:
    user: dict[str, Any] = ({"token": token} if token else
                            {"client-certificate": str(plane.admin_cert), "client-key": str(plane.admin_key)})
    path = folder / ("user.kubeconfig" if token else "admin.kubeconfig")
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "envtest",
        "clusters": [{"name": "envtest", "cluster": {"server": plane.server, "certificate-authority": str(plane.ca_file)}}],
        "users": [{"name": "envtest", "user": user}],
        "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "envtest"}}]}))
    return path


def _check(kubeconfig: Path, *args: str) -> tuple[int, dict[str, dict[str, str]]]:
    result = subprocess.run([sys.executable, "-m", "lockstep.cli", "check", "--kubeconfig", str(kubeconfig),
                             "-o", "json", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 1), result.stderr
    checks: dict[str, dict[str, str]] = {}
    for item in json.loads(result.stdout)["checks"]:
        checks.setdefault(item["name"], item)
    return result.returncode, checks


def test_a_missing_release_fails_each_check_by_name_with_a_hint(crds_installed: ControlPlane, tmp_path: Path) -> None:
    code, checks = _check(_kubeconfig(crds_installed, tmp_path), "--release", "absent", "-n", "nowhere")
    assert code == 1
    assert checks["kubernetes-version"]["status"] == "ok" and "v1.36" in checks["kubernetes-version"]["message"]
    assert checks["crd"]["status"] == "ok"  # the CRDs are installed (tests/envtest/conftest.py)
    for name in ("operator", "webhooks", "admission-policies"):
        assert checks[name]["status"] == "fail" and checks[name]["hint"], checks[name]
    assert checks["clock-skew"]["status"] == "ok"
    code, checks = _check(_kubeconfig(crds_installed, tmp_path), "--pre")
    assert code == 0 and checks["install-rights"]["status"] == "ok"


def test_pre_says_who_may_not_install(crds_installed: ControlPlane, tmp_path: Path) -> None:
    crds_installed.call("POST", "/api/v1/namespaces", {"metadata": {"name": "check-nobody"}})
    crds_installed.call("POST", "/api/v1/namespaces/check-nobody/serviceaccounts", {"metadata": {"name": "nobody"}})
    token = crds_installed.request_token("check-nobody", "nobody")
    code, checks = _check(_kubeconfig(crds_installed, tmp_path, token), "--pre")
    assert code == 1
    assert checks["install-rights"]["status"] == "fail"
    assert "customresourcedefinitions" in checks["install-rights"]["message"]


def test_an_unreachable_cluster_is_exit_2(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "nowhere.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    result = subprocess.run([sys.executable, "-m", "lockstep.cli", "check", "--kubeconfig", str(kubeconfig)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "cannot reach the cluster" in result.stderr
