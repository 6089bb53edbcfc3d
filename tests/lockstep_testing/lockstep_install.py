"""Lockstep installed on a real control plane the way the chart installs it, for the envtest tier and the
benches: the demo's installation (lockstep/demo/install.py), re-exported here.

    async with install_lockstep(plane, folder) as lockstep:
        lockstep.operator.report_port, lockstep.config, lockstep.ca_pem
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from lockstep.demo.install import (
    KINDS,
    RBAC_KINDS,
    RELEASE,
    SIDECAR_IMAGE,
    SYSTEM_NAMESPACE,
    Installation,
    api_path,
    apply,
    install_crds,
    loopback_webhooks,
    render_chart,
)
from lockstep.demo.install import install_lockstep as install_lockstep_with
from lockstep_testing.timings import FAST_TIMINGS

__all__ = ["KINDS", "RBAC_KINDS", "RELEASE", "SIDECAR_IMAGE", "SYSTEM_NAMESPACE", "Installation", "api_path",
           "apply", "install_crds", "install_lockstep", "loopback_webhooks", "render_chart"]


def install_lockstep(plane: Any, folder: Path, **options: Any) -> contextlib.AbstractAsyncContextManager[Installation]:
    """The demo's installation with the tests' timings (FAST_TIMINGS)."""
    return install_lockstep_with(plane, folder, **{**FAST_TIMINGS, **options})
