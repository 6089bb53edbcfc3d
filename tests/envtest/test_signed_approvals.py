"""Issue 33 on a real control plane: under an Enforce MCPApprovalPolicy, only a revision signed by approver keys is
trusted. The webhook refuses an unsigned one, even from a cluster administrator; with the webhook gone, the operator
still does not trust it (the pod that serves it is ApprovalUntrusted and out of its Service); a revision signed by
an approver brings the pod back."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from lockstep_testing.cluster_objects import GATE, POISON, condition, endpoint_ready, pod_of, weather_pod, \
    weather_service
from lockstep_testing.lockstep_install import Installation, api_path, apply
from lockstep_testing.loopback import McpServerHandle
from lockstep_testing.polling import eventually
from lockstep_testing.tenant import APPROVER, DEPLOYER, approver_objects, call_as, deployer_objects

from lockstep.core.approver_keys import generate_key, signer_of_pem
from lockstep.core.manifest import build_manifest
from lockstep.core.revision import Revision
from lockstep.core.signed_approval import ATTESTATION_FIELD, ApprovalStatement, SignedApproval
from lockstep.demo.control_plane import ControlPlane, ControlPlaneError
from lockstep.demo.kubelet import Kubelet
from lockstep.reader import read_interface

ALICE, BOB, CAROL = generate_key(), generate_key(), generate_key()


@pytest.fixture
def approval_policy(control_plane: ControlPlane, namespace: str) -> Iterator[dict[str, Any]]:
    body = {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPApprovalPolicy",
            "metadata": {"name": f"approvers-{namespace}"},
            "spec": {"threshold": 1, "keys": [{"name": "alice", "publicKey": ALICE.public_pem.decode()},
                                              {"name": "bob", "publicKey": BOB.public_pem.decode()}],
                     "scopes": [{"namespaces": [namespace], "mode": "Enforce"}]}}
    created = apply(control_plane, body)
    yield created
    with contextlib.suppress(ControlPlaneError):
        control_plane.call("DELETE", api_path("MCPApprovalPolicy", name=body["metadata"]["name"]))


def sign(manifest: dict[str, Any], sequence: int, *keys: Any, days: int = 1) -> dict[str, Any]:
    signed = copy.deepcopy(manifest)
    metadata = signed["metadata"]
    for entry in signed["spec"]["approved"]:
        statement = ApprovalStatement.of(Revision.from_spec(entry), metadata["namespace"], metadata["name"], sequence,
                                         datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=days))
        approval = SignedApproval.create(statement, signer_of_pem(keys[0].private_pem))
        for key in keys[1:]:
            approval = approval.add_signature(signer_of_pem(key.private_pem))
        entry[ATTESTATION_FIELD] = approval.to_dict()
    return signed


async def snapshot(mcp: McpServerHandle, namespace: str) -> dict[str, Any]:
    revision = Revision.of((await read_interface(mcp.url, timeout=10)).interface)
    manifest = build_manifest(revision, name="weather", namespace=namespace, selector={"app": "weather"},
                              endpoint={"port": mcp.port, "path": "/mcp", "transport": "streamable-http"})
    manifest["spec"]["probe"] = {"interval": "600s", "timeout": "5s"}
    return manifest


def replace(plane: ControlPlane, live: dict[str, Any]) -> None:
    """A merge patch of spec.approved (the operator writes the status meanwhile: a PUT of what was read may 409)."""
    plane.call("PATCH", api_path("MCPServerInterface", live["metadata"]["namespace"], live["metadata"]["name"]),
               {"spec": {"approved": live["spec"]["approved"]}}, content_type="application/merge-patch+json")


def gate(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    return next((dict(entry) for entry in (pod_of(plane, namespace, "weather-0").get("status") or {})
                 .get("conditions") or [] if entry["type"] == GATE), {})


async def test_only_a_signed_revision_is_trusted_whoever_writes_the_resource(
        control_plane: ControlPlane, lockstep: Installation, kubelet: Kubelet, namespace: str,
        mcp: McpServerHandle, approval_policy: dict[str, Any]) -> None:
    plane = control_plane
    clean = await snapshot(mcp, namespace)

    # A cluster administrator's unsigned approval is refused by the webhook, naming the revision and what it lacks.
    with pytest.raises(ControlPlaneError) as refused:
        apply(plane, clean)
    assert "spec.approved[0]" in str(refused.value) and "Unsigned" in str(refused.value)
    apply(plane, sign(clean, 1, ALICE))
    apply(plane, weather_service(namespace))
    apply(plane, weather_pod(namespace, "weather-0"))
    pod = await kubelet.start_pod(namespace, "weather-0", {"server": None}, mcp_port=mcp.port)
    try:
        await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), GATE) == "True", 30, "verified")
    except AssertionError:
        raise AssertionError(f"{gate(plane, namespace)}") from None
    await eventually(lambda: endpoint_ready(plane, namespace, "weather", pod.ip) is True, 30, "in the Service")

    # The webhook is gone (down, deleted, bypassed): the poisoned revision is written into spec.approved unsigned,
    # beside the signed one, and the server rug-pulls to it. The operator does not trust it.
    for configuration in plane.call("GET", api_path("ValidatingWebhookConfiguration"))["items"]:
        plane.call("DELETE", api_path("ValidatingWebhookConfiguration", name=configuration["metadata"]["name"]))
    mcp.server.update_tool("get_alerts", description=POISON)
    poisoned = await snapshot(mcp, namespace)
    live = plane.call("GET", api_path("MCPServerInterface", namespace, "weather"))
    live["spec"]["approved"].append(poisoned["spec"]["approved"][0])
    replace(plane, live)
    assert await mcp.server.notify("tools") >= 1
    await eventually(lambda: gate(plane, namespace).get("reason") == "ApprovalUntrusted", 30, "ApprovalUntrusted")
    assert gate(plane, namespace)["status"] == "False" and "Unsigned" in gate(plane, namespace)["message"]
    await eventually(lambda: endpoint_ready(plane, namespace, "weather", pod.ip) is False, 30, "out of the Service")

    # A signature by a key the policy does not list, or the clean revision's statement moved onto the poisoned
    # revision, changes nothing.
    live = plane.call("GET", api_path("MCPServerInterface", namespace, "weather"))
    live["spec"]["approved"][1][ATTESTATION_FIELD] = live["spec"]["approved"][0][ATTESTATION_FIELD]
    replace(plane, live)
    own_key = sign(poisoned, 2, generate_key())["spec"]["approved"][0][ATTESTATION_FIELD]
    live = plane.call("GET", api_path("MCPServerInterface", namespace, "weather"))
    live["spec"]["approved"][1][ATTESTATION_FIELD] = own_key
    replace(plane, live)
    await eventually(lambda: "BelowThreshold" in gate(plane, namespace).get("message", ""), 30, "still untrusted")
    assert gate(plane, namespace)["status"] == "False"

    # An approver signs the new revision: the pod is verified and back in its Service.
    approved = sign(poisoned, 2, BOB)
    live = plane.call("GET", api_path("MCPServerInterface", namespace, "weather"))
    live["spec"]["approved"] = approved["spec"]["approved"]
    replace(plane, live)
    await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), GATE) == "True", 30, "verified again")
    await eventually(lambda: endpoint_ready(plane, namespace, "weather", pod.ip) is True, 30, "back in the Service")
    # The floor that sequence 2 raised is recorded in the policy, where no namespace editor writes.
    recorded = plane.call("GET", api_path("MCPApprovalPolicy", name=approval_policy["metadata"]["name"]))
    await eventually(lambda: (plane.call("GET", api_path("MCPApprovalPolicy", name=approval_policy["metadata"]["name"]))
                              .get("status") or {}).get("floors", {}).get(f"{namespace}/weather") == 2,
                     30, "the floor recorded in the policy's status")
    assert recorded["spec"] == approval_policy["spec"]


def test_neither_a_namespace_editor_nor_the_gitops_account_can_change_the_trust_policy(
        control_plane: ControlPlane, crds_installed: ControlPlane, lockstep: Installation, namespace: str,
        approval_policy: dict[str, Any]) -> None:
    """The built-in edit role in the namespace, and a GitOps controller's account that may write every
    MCPServerInterface in the cluster (as Argo CD's or Flux's does), each with its own token: neither may create,
    change or delete an MCPApprovalPolicy, nor write its status (the floors), so neither can add its own key."""
    plane = control_plane
    for body in deployer_objects(namespace):
        apply(plane, body)
    gitops = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "gitops", "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"gitops-{namespace}"},
         "rules": [{"apiGroups": ["lockstep.dev"], "resources": ["mcpserverinterfaces"], "verbs": ["*"]},
                   {"apiGroups": [""], "resources": ["pods", "services", "configmaps"], "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"gitops-{namespace}"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"gitops-{namespace}"},
         "subjects": [{"kind": "ServiceAccount", "name": "gitops", "namespace": namespace}]},
    ]
    for body in gitops:
        apply(plane, body)
    name = approval_policy["metadata"]["name"]
    path = api_path("MCPApprovalPolicy", name=name)
    own_key = {"name": "mallory", "publicKey": generate_key().public_pem.decode()}
    added = {"spec": {"keys": [*approval_policy["spec"]["keys"], own_key]}}
    for account in (DEPLOYER, "gitops"):
        token = plane.request_token(namespace, account, seconds=600)

        def call(method: str, call_path: str, body: Any = None, content_type: str = "application/json",
                 token: str = token) -> int:
            return call_as(plane.server, str(plane.ca_file), token, method, call_path, body,
                           content_type=content_type).status

        assert call("PATCH", path, added, "application/merge-patch+json") == 403, account
        assert call("PATCH", f"{path}/status", {"status": {"floors": {f"{namespace}/weather": 0}}},
                    "application/merge-patch+json") == 403, account
        assert call("DELETE", path) == 403, account
        assert call("POST", api_path("MCPApprovalPolicy"), {**approval_policy, "metadata": {"name": f"own-{account}"},
                                                            "spec": {"keys": [own_key]}}) == 403, account
    assert plane.call("GET", path)["spec"] == approval_policy["spec"]


def three_approvers(namespace: str, threshold: int, **windows: dict[str, str]) -> dict[str, Any]:
    keys = [{"name": name, "publicKey": pair.public_pem.decode(), **windows.get(name, {})}
            for name, pair in (("alice", ALICE), ("bob", BOB), ("carol", CAROL))]
    return {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPApprovalPolicy",
            "metadata": {"name": f"approvers-{namespace}"},
            "spec": {"threshold": threshold, "keys": keys, "scopes": [{"namespaces": [namespace], "mode": "Enforce"}]}}


def refused(plane: ControlPlane, manifest: dict[str, Any]) -> str:
    with pytest.raises(ControlPlaneError) as error:
        apply(plane, manifest)
    return str(error.value)


async def test_each_forgery_of_an_approval_is_refused_at_admission(
        control_plane: ControlPlane, lockstep: Installation, namespace: str, mcp: McpServerHandle) -> None:
    """Through the real API server's admission chain: a statement replayed from another namespace or resource, an
    expired one, one signed by a retired key, 1 of 3 where 2 are required, and a lower sequence once a higher one
    was applied; 2 of 3 is admitted."""
    plane = control_plane
    name = f"approvers-{namespace}"
    apply(plane, three_approvers(namespace, 2, carol={"notAfter": "2026-01-01T00:00:00Z"}))
    try:
        clean = await snapshot(mcp, namespace)
        other_namespace = sign({**clean, "metadata": {**clean["metadata"], "namespace": "elsewhere"}}, 1, ALICE, BOB)
        replayed = copy.deepcopy(clean)
        replayed["spec"]["approved"][0][ATTESTATION_FIELD] = other_namespace["spec"]["approved"][0][ATTESTATION_FIELD]
        assert "WrongSubject" in refused(plane, replayed)
        other_resource = sign({**clean, "metadata": {**clean["metadata"], "name": "news"}}, 1, ALICE, BOB)
        replayed["spec"]["approved"][0][ATTESTATION_FIELD] = other_resource["spec"]["approved"][0][ATTESTATION_FIELD]
        assert "WrongSubject" in refused(plane, replayed)
        assert "Expired" in refused(plane, sign(clean, 1, ALICE, BOB, days=-1))
        assert "1 of 2 required" in refused(plane, sign(clean, 1, ALICE, CAROL))  # carol's key is retired
        assert "1 of 2 required" in refused(plane, sign(clean, 1, ALICE))
        apply(plane, sign(clean, 5, ALICE, BOB))  # 2 of 3: admitted
        # The approving team's account (patch on MCPServerInterface, no key) cannot add an unsigned revision, nor
        # put the signed statement on another revision.
        for body in approver_objects(namespace):
            apply(plane, body)
        token = plane.request_token(namespace, APPROVER, seconds=600)
        mcp.server.update_tool("get_alerts", description=POISON)
        poisoned = (await snapshot(mcp, namespace))["spec"]["approved"][0]
        signed_entry = plane.call("GET", api_path("MCPServerInterface", namespace, "weather"))["spec"]["approved"][0]
        path = api_path("MCPServerInterface", namespace, "weather")
        for approved in ([signed_entry, poisoned], [{**poisoned, ATTESTATION_FIELD: signed_entry[ATTESTATION_FIELD]}]):
            answer = call_as(plane.server, str(plane.ca_file), token, "PATCH", path, {"spec": {"approved": approved}},
                             content_type="application/merge-patch+json")
            assert answer.status == 422 and "not a trusted signed approval" in answer.message, answer
        await eventually(lambda: (plane.call("GET", api_path("MCPApprovalPolicy", name=name)).get("status") or {})
                         .get("floors", {}).get(f"{namespace}/weather") == 5, 30, "the floor recorded")
        with pytest.raises(ControlPlaneError) as rolled_back:
            live = plane.call("GET", api_path("MCPServerInterface", namespace, "weather"))
            live["spec"]["approved"] = sign(clean, 4, ALICE, BOB)["spec"]["approved"]
            replace(plane, live)
        assert "RolledBack" in str(rolled_back.value)
        # Deleted and created again from the older manifest: the floor is the policy's, not the resource's.
        plane.call("DELETE", api_path("MCPServerInterface", namespace, "weather"))
        assert "RolledBack" in refused(plane, sign(clean, 4, ALICE, BOB))
    finally:
        with contextlib.suppress(ControlPlaneError):
            plane.call("DELETE", api_path("MCPApprovalPolicy", name=name))


async def test_a_key_rotated_while_pods_serve_loses_no_ready_pod(
        control_plane: ControlPlane, lockstep: Installation, kubelet: Kubelet, namespace: str,
        mcp: McpServerHandle) -> None:
    """Alice's key is replaced by Carol's: Carol's key is added, the revision re-signed by both, Alice's key retired
    in the policy. The pod is never cut on the way (every condition the API server held for it is True)."""
    plane = control_plane
    name = f"approvers-{namespace}"
    apply(plane, three_approvers(namespace, 1))
    try:
        clean = await snapshot(mcp, namespace)
        apply(plane, sign(clean, 1, ALICE))
        apply(plane, weather_pod(namespace, "weather-0"))
        await kubelet.start_pod(namespace, "weather-0", {"server": None}, mcp_port=mcp.port)
        await eventually(lambda: gate(plane, namespace).get("status") == "True", 30, "verified")
        seen: list[str] = []

        async def watch_gate() -> None:
            while True:
                seen.append(gate(plane, namespace).get("status", "?"))
                await asyncio.sleep(0.2)

        watcher = asyncio.create_task(watch_gate())
        try:
            live = plane.call("GET", api_path("MCPServerInterface", namespace, "weather"))
            live["spec"]["approved"] = sign(clean, 2, ALICE, CAROL)["spec"]["approved"]
            replace(plane, live)
            rotated = three_approvers(namespace, 1, alice={"notAfter": "2026-01-01T00:00:00Z"})
            plane.call("PATCH", api_path("MCPApprovalPolicy", name=name), {"spec": rotated["spec"]},
                       content_type="application/merge-patch+json")
            await asyncio.sleep(3)  # the operator judged the pod again under the new policy (several rounds)
        finally:
            watcher.cancel()
        assert seen and set(seen) == {"True"}, seen
        # And the rotation really happened: a statement signed by Alice alone is now refused.
        live = plane.call("GET", api_path("MCPServerInterface", namespace, "weather"))
        live["spec"]["approved"] = sign(clean, 3, ALICE)["spec"]["approved"]
        with pytest.raises(ControlPlaneError) as retired:
            replace(plane, live)
        assert "0 of 1 required" in str(retired.value) and "alice is outside its validity window" in str(retired.value)
    finally:
        with contextlib.suppress(ControlPlaneError):
            plane.call("DELETE", api_path("MCPApprovalPolicy", name=name))
