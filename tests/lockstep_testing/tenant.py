"""The tenants of issue 25's trust boundary (docs/threat-model.md#trust-boundary), for the real control
plane and the real node: the deployer (a ServiceAccount bound to the built-in ClusterRole ``edit`` in
the app's namespace) and the approver (a Role with write access to MCPServerInterface), the chart's
ValidatingAdmissionPolicies, and requests sent as one of them. No pytest import.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["APPROVER", "DEPLOYER", "FORGED_STAMP", "POLICY_KINDS", "STAMP", "Answer", "approver_objects", "call_as",
           "container_environment", "deployer_objects", "policies_of", "privileged_pods", "stamp_patch"]

DEPLOYER = "deployer"
APPROVER = "approver"
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
STAMP = "lockstep.dev/last-report"
#: The stamp the issue's attacker wrote: a boot far in the future, so every genuine report looked replayed.
FORGED_STAMP = json.dumps({"bootId": "f" * 32, "bootTime": "2099-01-01T00:00:00+00:00", "sequence": 1})


def policies_of(rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chart's ValidatingAdmissionPolicies and their bindings, policies first."""
    return sorted((body for body in rendered if body["kind"] in POLICY_KINDS),
                  key=lambda body: POLICY_KINDS.index(body["kind"]))


def deployer_objects(namespace: str, name: str = DEPLOYER) -> list[dict[str, Any]]:
    """The deploying team as it is usually set up: a ServiceAccount bound to ClusterRole edit."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": f"{name}-edit", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
    ]


def approver_objects(namespace: str, name: str = APPROVER) -> list[dict[str, Any]]:
    """The approving team: write access to MCPServerInterface in the namespace, nothing on pods."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": f"{name}-interfaces", "namespace": namespace},
         "rules": [{"apiGroups": ["lockstep.dev"], "resources": ["mcpserverinterfaces"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": f"{name}-interfaces", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{name}-interfaces"},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
    ]


def stamp_patch(value: str | None = FORGED_STAMP) -> dict[str, Any]:
    """A merge patch that sets (or, with None, removes) the replay-stamp annotation."""
    return {"metadata": {"annotations": {STAMP: value}}}


def privileged_pods(base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``base`` (a pod) changed in each way that reaches the sidecar's token file from beside it."""
    import copy

    pods: dict[str, dict[str, Any]] = {}
    pod = copy.deepcopy(base)
    pod["spec"]["hostPID"] = True
    pods["hostPID"] = pod
    pod = copy.deepcopy(base)
    pod["spec"]["volumes"] = [{"name": "kubelet", "hostPath": {"path": "/var/lib/kubelet/pods"}}]
    pod["spec"]["containers"][0].setdefault("volumeMounts", []).append({"name": "kubelet", "mountPath": "/host"})
    pods["hostPath"] = pod
    pod = copy.deepcopy(base)
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    pods["privileged"] = pod
    return pods


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else str(self.body)


def call_as(server: str, ca_file: str, token: str, method: str, path: str, body: Any = None, *,
            content_type: str = "application/json") -> Answer:
    """One request with a bearer token; the answer whatever its status (a refusal is an answer here)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json",
                                              "Authorization": f"Bearer {token}"})
    context = ssl.create_default_context(cafile=ca_file)
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read()
    try:
        return Answer(status, json.loads(text) if text else None)
    except ValueError:
        return Answer(status, text.decode(errors="replace"))


#: The real node's containerd (../shared/realnode/README.md); LOCKSTEP_E2E_CONTAINERD moves it.
CONTAINERD = os.environ.get("LOCKSTEP_E2E_CONTAINERD", "/run/realnode/containerd/containerd.sock")


def container_environment(pod: Any, container: str) -> dict[str, str]:
    """The environment the kubelet gave ``container`` of ``pod`` (a kubernetes client V1Pod), read from
    the node's containerd (the OCI spec's process.env), not through the API server: nobody execs into
    the sidecar (the chart's policy refuses it), but the node's own administrator is inside the trust
    boundary. Raises RuntimeError where this machine is not the node."""
    statuses = list(pod.status.init_container_statuses or []) + list(pod.status.container_statuses or [])
    ids = [status.container_id for status in statuses if status.name == container and status.container_id]
    if not ids or not ids[0].startswith("containerd://"):
        raise RuntimeError(f"no containerd container {container!r} in pod {pod.metadata.name}")
    if shutil.which("ctr") is None or not os.path.exists(CONTAINERD):
        raise RuntimeError(f"no ctr or no containerd socket at {CONTAINERD}: not on the real node")
    info = subprocess.run(["ctr", "--address", CONTAINERD, "-n", "k8s.io", "containers", "info",
                           ids[0].removeprefix("containerd://")], capture_output=True, text=True, check=True,
                          timeout=30)
    pairs = (entry.split("=", 1) for entry in json.loads(info.stdout)["Spec"]["process"]["env"])
    return {pair[0]: pair[1] if len(pair) > 1 else "" for pair in pairs}
