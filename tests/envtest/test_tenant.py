"""Issue 25, the admission side of the trust boundary on a real kube-apiserver: the chart's
ValidatingAdmissionPolicies and the operator's pod webhooks (as the chart registers them) against a
deployer bound to the built-in ClusterRole ``edit`` in the app's namespace, acting with its own token.
Each attack of the issue is refused by admission (or by RBAC, the platform's part), and the approver
and the operator still do their jobs. The kubelet's own mint of the sidecar's token is the real node's
to show (tests/e2e/test_tenant.py): this control plane has no kubelet identity.
"""

from __future__ import annotations

import contextlib
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from lockstep_testing.cluster_objects import weather_pod
from lockstep.demo.control_plane import ControlPlane, ControlPlaneError
from lockstep_testing.lockstep_install import Installation, api_path, apply, render_chart
from lockstep_testing.tenant import (
    APPROVER,
    DEPLOYER,
    FORGED_STAMP,
    STAMP,
    Answer,
    approver_objects,
    call_as,
    deployer_objects,
    policies_of,
    privileged_pods,
    stamp_patch,
)

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PLURALS = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
           "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}
MERGE = "application/merge-patch+json"
TOKEN_REFUSAL = "only the kubelet (group system:nodes) may request one"
EXEC_REFUSAL = "nobody may exec into, attach to or copy from the container lockstep-sidecar"
STAMP_REFUSAL = "may write the pod annotation lockstep.dev/last-report"
BASELINE_REFUSAL = "Lockstep enforces Pod Security baseline on pods it guards"


@pytest.fixture
def policies(control_plane: ControlPlane) -> Iterator[list[dict[str, Any]]]:
    """The chart's policies created for real; deleted afterwards (the control plane is shared by the
    session, and the kubelet stand-in of other tests mints the sidecar's token as an admin)."""
    bodies = policies_of(render_chart())
    for body in bodies:
        path = f"{ADMISSION}/{PLURALS[body['kind']]}"
        with contextlib.suppress(ControlPlaneError):
            control_plane.call("DELETE", f"{path}/{body['metadata']['name']}")
        _retry(lambda: control_plane.call("POST", path, body))
    yield bodies
    for body in reversed(bodies):
        with contextlib.suppress(ControlPlaneError):
            control_plane.call("DELETE", f"{ADMISSION}/{PLURALS[body['kind']]}/{body['metadata']['name']}")


def _retry(action: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except ControlPlaneError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Tenant:
    """Requests as one ServiceAccount of the namespace, with a token of its own."""

    def __init__(self, plane: ControlPlane, namespace: str, account: str) -> None:
        self.plane, self.namespace = plane, namespace
        self.token = plane.request_token(namespace, account, seconds=3600)

    def __call__(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Answer:
        return call_as(self.plane.server, str(self.plane.ca_file), self.token, method, path, body,
                       content_type=content_type)


def _tenants(plane: ControlPlane, namespace: str) -> tuple[Tenant, Tenant]:
    for body in deployer_objects(namespace) + approver_objects(namespace):
        apply(plane, body)
    return Tenant(plane, namespace, DEPLOYER), Tenant(plane, namespace, APPROVER)


def _token_request(audience: str, pod: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                            "spec": {"audiences": [audience], "expirationSeconds": 600}}
    if pod is not None:
        body["spec"]["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                          "uid": pod["metadata"]["uid"]}
    return body


def _wait_enforced(deployer: Tenant, namespace: str) -> Answer:
    """Policies take effect once the API server's policy informer has them: ask until refused."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default/token"
    deadline = time.monotonic() + 30
    while True:
        answer = deployer("POST", path, _token_request("lockstep.dev"))
        if answer.status == 403 or time.monotonic() > deadline:
            return answer
        time.sleep(0.3)


def _until_refused(send: Any, timeout: float = 30.0) -> Answer:
    """``send()`` again until it is refused: each policy takes effect once the API server's policy
    informer has it, independently of the others. Only for requests without a side effect when allowed
    (a dry run, an exec with no kubelet behind it, a token)."""
    deadline = time.monotonic() + timeout
    while True:
        answer: Answer = send()
        if answer.status == 403 or time.monotonic() > deadline:
            return answer
        time.sleep(0.3)


def _exec_path(namespace: str, pod: str, container: str, kind: str = "exec") -> str:
    query = [("container", container), ("stdout", "true")]
    if kind == "exec":
        query += [("command", "cat"), ("command", "/var/run/secrets/lockstep.dev/token")]
    return f"/api/v1/namespaces/{namespace}/pods/{pod}/{kind}?{urllib.parse.urlencode(query)}"


def test_the_chart_policies_type_check_cleanly(control_plane: ControlPlane,
                                              policies: list[dict[str, Any]]) -> None:
    """The API server type-checks each policy's CEL against the matched kinds: no warning (a field
    misspelt in an expression is a warning, not an error, and the policy would then fail every request)."""
    deadline = time.monotonic() + 30
    for body in policies:
        if body["kind"] != "ValidatingAdmissionPolicy":
            continue
        while True:
            stored = control_plane.call("GET", f"{ADMISSION}/validatingadmissionpolicies/{body['metadata']['name']}")
            if "typeChecking" in (stored.get("status") or {}) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not (stored["status"].get("typeChecking") or {}).get("expressionWarnings"), stored["status"]


async def test_a_namespace_editor_can_neither_mint_nor_read_the_sidecars_token(
        control_plane: ControlPlane, lockstep: Installation, policies: list[dict[str, Any]], namespace: str) -> None:
    plane = control_plane
    deployer, _ = _tenants(plane, namespace)
    pod = apply(plane, weather_pod(namespace, "weather-0"))
    assert "lockstep-sidecar" in [c["name"] for c in pod["spec"]["initContainers"]]
    assert TOKEN_REFUSAL in _wait_enforced(deployer, namespace).message

    # Issue 25, route 2: the TokenRequest the issue's deployer was granted, bound to the pod.
    minted = deployer("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/default/token",
                      _token_request("lockstep.dev", pod))
    assert minted.status == 403 and TOKEN_REFUSAL in minted.message, minted
    # Among several audiences too.
    both = _token_request("vault")
    both["spec"]["audiences"].append("lockstep.dev")
    assert deployer("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/default/token", both).status == 403
    # Another audience is the deployer's to mint, as before.
    other = deployer("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/default/token",
                     _token_request("vault", pod))
    assert other.status == 201 and other.body["status"]["token"], other
    # Not even a cluster admin mints one: only a node does.
    with pytest.raises(ControlPlaneError, match="HTTP 403"):
        plane.request_token(namespace, "default", audience="lockstep.dev", pod=("weather-0", pod["metadata"]["uid"]))

    # Route 1: exec and attach into the sidecar are refused by admission, before the API server looks for
    # a kubelet (this control plane has none: any other container gets a different error).
    _until_refused(lambda: deployer("POST", _exec_path(namespace, "weather-0", "lockstep-sidecar")))
    for kind in ("exec", "attach"):
        for method in ("POST", "GET"):
            answer = deployer(method, _exec_path(namespace, "weather-0", "lockstep-sidecar", kind))
            assert answer.status == 403 and EXEC_REFUSAL in answer.message, (kind, method, answer)
    app = deployer("POST", _exec_path(namespace, "weather-0", "server"))
    assert EXEC_REFUSAL not in app.message and app.status != 403, app
    # A debug container that joins the sidecar, or mounts its token, is the pod webhook's (issue 10).


async def test_the_replay_stamp_is_the_operators_alone(
        control_plane: ControlPlane, lockstep: Installation, policies: list[dict[str, Any]], namespace: str) -> None:
    plane = control_plane
    deployer, _ = _tenants(plane, namespace)
    apply(plane, weather_pod(namespace, "weather-0"))
    _wait_enforced(deployer, namespace)
    pod_path = api_path("Pod", namespace, "weather-0")

    # Route 4: the deployer's annotation that froze the pod Ready.
    _until_refused(lambda: deployer("PATCH", pod_path + "?dryRun=All", stamp_patch(), content_type=MERGE))
    forged = deployer("PATCH", pod_path, stamp_patch(), content_type=MERGE)
    assert forged.status == 403 and STAMP_REFUSAL in forged.message, forged
    # Through pods/status, where the operator writes it: RBAC already refuses the deployer (edit has no
    # pods/status), the platform's part.
    status = deployer("PATCH", pod_path + "/status", stamp_patch(), content_type=MERGE)
    assert status.status == 403 and 'cannot patch resource "pods/status"' in status.message, status
    # Nor with a pod that carries it from the start (a Deployment's template would be refused the same way).
    stamped = weather_pod(namespace, "stamped")
    stamped["metadata"]["annotations"] = {STAMP: FORGED_STAMP}
    created = deployer("POST", api_path("Pod", namespace), stamped)
    assert created.status == 403 and STAMP_REFUSAL in created.message, created
    # Nobody but the operator: a cluster admin's patch of pods/status is refused too.
    with pytest.raises(ControlPlaneError, match="HTTP 403.*lockstep.dev/last-report"):
        plane.call("PATCH", pod_path + "/status", stamp_patch(), content_type=MERGE)

    # The operator's own write, a merge patch of pods/status with its ServiceAccount's token (the request
    # arrives as UPDATE of pods, subresource status), is allowed, and so is its removal.
    operator = call_as(plane.server, str(plane.ca_file), lockstep.operator_token, "PATCH", pod_path + "/status",
                       stamp_patch('{"bootId":"a","bootTime":"2026-01-01T00:00:00+00:00","sequence":1}'),
                       content_type=MERGE)
    assert operator.status == 200 and STAMP in operator.body["metadata"]["annotations"], operator
    # Anyone's other changes to a stamped pod still pass (the stamp is unchanged).
    labelled = deployer("PATCH", pod_path, {"metadata": {"labels": {"release": "canary"}}}, content_type=MERGE)
    assert labelled.status == 200, labelled
    # Removing the operator's stamp is a change of it.
    removed = deployer("PATCH", pod_path, stamp_patch(None), content_type=MERGE)
    assert removed.status == 403 and STAMP_REFUSAL in removed.message, removed
    cleared = call_as(plane.server, str(plane.ca_file), lockstep.operator_token, "PATCH", pod_path + "/status",
                      stamp_patch(None), content_type=MERGE)
    assert cleared.status == 200 and STAMP not in (cleared.body["metadata"].get("annotations") or {})


async def test_pods_that_reach_the_sidecars_files_are_refused_and_the_approver_still_approves(
        control_plane: ControlPlane, lockstep: Installation, policies: list[dict[str, Any]], namespace: str) -> None:
    plane = control_plane
    deployer, approver = _tenants(plane, namespace)
    apply(plane, {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface",
                  "metadata": {"name": "weather", "namespace": namespace},
                  "spec": {"selector": {"matchLabels": {"app": "weather"}}, "approval": "FirstSeen"}})

    # Route 5, server-side dry run as the deployer, through the operator's pod webhook.
    for field, pod in privileged_pods(weather_pod(namespace, "attacker")).items():
        answer = deployer("POST", api_path("Pod", namespace) + "?dryRun=All", pod)
        assert answer.status == 403 and BASELINE_REFUSAL in answer.message, (field, answer)
    plain = deployer("POST", api_path("Pod", namespace) + "?dryRun=All", weather_pod(namespace, "plain"))
    assert plain.status == 201, plain

    # Traffic around the gate: a Service that publishes NotReady addresses would keep routing agents to a
    # drifted (NotReady) pod. Refused in an opted-in namespace; an ordinary Service is not.
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "weather", "namespace": namespace},
               "spec": {"selector": {"app": "weather"}, "ports": [{"port": 8080}],
                        "publishNotReadyAddresses": True}}
    around = _until_refused(lambda: deployer("POST", api_path("Service", namespace) + "?dryRun=All", service))
    assert around.status == 403 and "spec.publishNotReadyAddresses" in around.message, around
    service["spec"]["publishNotReadyAddresses"] = False
    assert deployer("POST", api_path("Service", namespace) + "?dryRun=All", service).status == 201

    # Separation of duties: the deployer cannot change the approval, the approver can.
    path = api_path("MCPServerInterface", namespace, "weather")
    change = {"spec": {"probe": {"interval": "30s"}}}
    denied = deployer("PATCH", path, change, content_type=MERGE)
    assert denied.status == 403 and "mcpserverinterfaces" in denied.message, denied
    approved = approver("PATCH", path, change, content_type=MERGE)
    assert approved.status == 200 and approved.body["spec"]["probe"]["interval"] == "30s", approved
