"""Lockstep installed on a real control plane the way the chart installs it, for the envtest tier and the
benches: the demo's installation (lockstep/demo/install.py), re-exported here.

    async with install_lockstep(plane, folder) as lockstep:
        lockstep.operator.report_port, lockstep.config, lockstep.ca_pem
"""

from __future__ import annotations

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
    install_lockstep,
    loopback_webhooks,
    render_chart,
)

__all__ = ["KINDS", "RBAC_KINDS", "RELEASE", "SIDECAR_IMAGE", "SYSTEM_NAMESPACE", "Installation", "api_path",
           "apply", "install_crds", "install_lockstep", "loopback_webhooks", "render_chart"]
