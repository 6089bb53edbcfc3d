"""`lockstep check` on the real node against the release installed as the README says: every check of
the installed release passes (the webhook's check is a dry-run pod through the real admission chain), and
`--pre` passes for the cluster admin."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def _check(*args: str) -> tuple[int, dict[str, list[dict[str, str]]]]:
    result = subprocess.run([sys.executable, "-m", "lockstep.cli", "check", "-o", "json", *args],
                            capture_output=True, text=True, timeout=120, env=os.environ)
    assert result.returncode in (0, 1), result.stderr
    checks: dict[str, list[dict[str, str]]] = {}
    for item in json.loads(result.stdout)["checks"]:
        checks.setdefault(item["name"], []).append(item)
    return result.returncode, checks


def test_the_installed_release_passes_every_check(e2e_namespace: str) -> None:
    code, checks = _check("--pods")
    failed = {name: items for name, items in checks.items() if any(i["status"] == "fail" for i in items)}
    assert code == 0 and not failed, failed
    for name in ("kubernetes-version", "crd", "operator", "webhooks", "admission-policies", "certificates",
                 "clock-skew", "pods"):
        assert any(item["status"] == "ok" for item in checks[name]), (name, checks.get(name))
    assert "gets the sidecar and the readiness gate" in checks["webhooks"][0]["message"]
    assert checks["pod-security"][0]["status"] == "warn"  # the e2e namespace enforces no Pod Security labels
    code, checks = _check("--pre")
    assert code == 0 and checks["install-rights"][0]["status"] == "ok"
