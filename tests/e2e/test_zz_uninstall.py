"""Uninstalling Lockstep leaves nothing behind that holds pods back. Runs last (file name), and only when
``LOCKSTEP_E2E_UNINSTALL`` names the command that uninstalls the release, for example
``helm uninstall lockstep -n lockstep-system --wait`` (CI: ``python tests/e2e/helm.py uninstall ...``).

Like Helm, the uninstall keeps the CRDs (and with them every MCPServerInterface): what must go is
everything that acts on pods, above all the webhook configurations, whose failurePolicy Fail would
otherwise refuse every pod in an opted-in namespace once the operator is gone.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from typing import Any

import pytest
from lockstep_testing.real_cluster import IMAGE, eventually

pytestmark = pytest.mark.e2e
UNINSTALL = os.environ.get("LOCKSTEP_E2E_UNINSTALL", "")


@pytest.mark.skipif(not UNINSTALL, reason="set LOCKSTEP_E2E_UNINSTALL to the command that uninstalls the release")
def test_uninstall_leaves_nothing_that_holds_pods_back(kube_api: Any, e2e_namespace: str) -> None:
    import kubernetes

    result = subprocess.run(shlex.split(UNINSTALL), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    admission = kubernetes.client.AdmissionregistrationV1Api(kube_api)
    rbac = kubernetes.client.RbacAuthorizationV1Api(kube_api)
    core = kubernetes.client.CoreV1Api(kube_api)
    selector = "app.kubernetes.io/name=lockstep"
    assert [w.metadata.name for w in admission.list_mutating_webhook_configuration().items
            if "lockstep" in w.metadata.name] == []
    assert [w.metadata.name for w in admission.list_validating_webhook_configuration().items
            if "lockstep" in w.metadata.name] == []
    assert rbac.list_cluster_role(label_selector=selector).items == []
    assert rbac.list_cluster_role_binding(label_selector=selector).items == []
    eventually(lambda: not core.list_pod_for_all_namespaces(label_selector=selector).items,
               "the operator pods to go", timeout=120)

    # A pod in a namespace still labelled lockstep.dev/inject=enabled is created and runs, untouched.
    core.create_namespaced_pod(e2e_namespace, {
        "metadata": {"name": "after-uninstall"},
        "spec": {"containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                                 "command": ["python", "-c", "import time; time.sleep(3600)"]}],
                 "terminationGracePeriodSeconds": 0}})
    pod = eventually(lambda: (p := core.read_namespaced_pod("after-uninstall", e2e_namespace)).status.phase
                     == "Running" and p, "the pod to run without Lockstep", timeout=120)
    assert not pod.spec.init_containers and not pod.spec.readiness_gates
