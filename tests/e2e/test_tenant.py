"""Issue 25 on the real node: the team that deploys an MCP server (a ServiceAccount bound to the built-in
ClusterRole ``edit`` in the app's namespace, acting with ``kubectl --as``) tries each route to a Ready pod
that the approval does not cover, and each is refused with Lockstep's message; the injected pod itself
still gets its token from the kubelet and is verified, and the approver still changes the approval.

The routes (docs/threat-model.md#trust-boundary): read the sidecar's token (exec, cp, attach, a default
container annotation), mint one (TokenRequest), forge the operator's replay stamp, pods that reach the
sidecar's files from beside it (hostPID, hostPath over the kubelet's pod folders, privileged; a
privileged debug container), and the routes nobody named: a copy of the pod with the sidecar's image
swapped, a pod that opts out but mounts a lockstep.dev token, a counterfeit sidecar container.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from lockstep_testing.real_cluster import IMAGE, Cluster, app_objects, eventually
from lockstep_testing.tenant import APPROVER, DEPLOYER, FORGED_STAMP, STAMP, approver_objects, \
    container_environment, deployer_objects, privileged_pods

TOKEN = "/var/run/secrets/lockstep.dev/token"
EXEC_REFUSAL = "nobody may exec into, attach to or copy from the container lockstep-sidecar"
TOKEN_REFUSAL = "only the kubelet (group system:nodes) may request one"
STAMP_REFUSAL = "may write the pod annotation lockstep.dev/last-report"
BASELINE_REFUSAL = "Lockstep enforces Pod Security baseline on pods it guards"
TIMEOUT = 90.0


def kubectl(*args: str, as_user: str | None = None, stdin: str | None = None,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
    argv = ["kubectl", *(["--as", as_user] if as_user else []), *args]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)


class Tenant:
    def __init__(self, namespace: str, account: str) -> None:
        """``account`` "" is the kubeconfig's own user (a cluster admin)."""
        self.namespace = namespace
        self.user = f"system:serviceaccount:{namespace}:{account}" if account else None

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return kubectl("-n", self.namespace, *args, as_user=self.user, stdin=stdin)

    def refused(self, *args: str, stdin: str | None = None, because: str = "") -> str:
        result = self(*args, stdin=stdin)
        assert result.returncode != 0, f"kubectl {' '.join(args)} was allowed: {result.stdout[-500:]}"
        assert "Lockstep" in result.stderr and because in result.stderr, result.stderr
        assert not result.stdout.startswith("ey"), "a token was printed"
        return result.stderr


@pytest.fixture
def tenants(cluster: Cluster) -> Iterator[tuple[Tenant, Tenant]]:
    for body in deployer_objects(cluster.namespace) + approver_objects(cluster.namespace):
        body["metadata"]["namespace"] = cluster.namespace
        applied = kubectl("apply", "-f", "-", stdin=json.dumps(body))
        assert applied.returncode == 0, applied.stderr
    policies = kubectl("get", "validatingadmissionpolicies", "-o", "name")
    if "sidecar-token" not in policies.stdout:
        pytest.fail("the chart's ValidatingAdmissionPolicies are not installed (helm install lockstep charts/lockstep)")
    yield Tenant(cluster.namespace, DEPLOYER), Tenant(cluster.namespace, APPROVER)


def _interface(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface",
            "metadata": {"name": "weather", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": "weather"}}, "approval": "FirstSeen",
                     "endpoint": {"port": 8080, "path": "/mcp", "transport": "streamable-http"},
                     "probe": {"interval": "10s", "timeout": "5s", "staleAfter": "60s"}}}


def _plain_pod(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                                                            "labels": {"app": "weather"}},
            "spec": {"containers": [{"name": "mcp", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                                     "command": ["sleep", "3600"]}]}}


def test_a_namespace_editor_cannot_get_an_unapproved_interface_ready(cluster: Cluster,
                                                                      tenants: tuple[Tenant, Tenant]) -> None:
    deployer, approver = tenants
    cluster.apply_interface(_interface(cluster.namespace))
    cluster.create(app_objects("weather", cluster.namespace, replicas=1))

    # The kubelet still mints the sidecar's lockstep.dev token (a node may), and the pod reports and is
    # verified: the policies leave the genuine path alone, and the operator's stamp write passes.
    pod = eventually(lambda: (p := cluster.pods("weather")) and cluster.verdicts("weather")[p[0].metadata.name]
                     == ("True", "Verified") and p[0], "the injected pod verified", timeout=TIMEOUT)
    name, uid = pod.metadata.name, pod.metadata.uid
    stored = cluster.core.read_namespaced_pod(name, cluster.namespace)
    assert STAMP in (stored.metadata.annotations or {}), "the operator's stamp write did not land"

    # The node's own administrator is inside the boundary: containerd still shows the sidecar's spec.
    assert container_environment(stored, "lockstep-sidecar").get("LOCKSTEP_TOKEN_PATH") == TOKEN

    # Route 1: read the sidecar's token.
    deployer.refused("exec", name, "-c", "lockstep-sidecar", "--", "cat", TOKEN, because=EXEC_REFUSAL)
    deployer.refused("cp", "-c", "lockstep-sidecar", f"{name}:{TOKEN}", "/tmp/stolen-token", because=EXEC_REFUSAL)
    deployer.refused("attach", name, "-c", "lockstep-sidecar", because=EXEC_REFUSAL)
    # The app's own container stays the deployer's to exec into.
    assert deployer("exec", name, "-c", "mcp", "--", "true").returncode == 0

    # Route 2: mint one with TokenRequest, bound to the pod as the kubelet's is.
    account = pod.spec.service_account_name or "default"
    bound = ("--bound-object-kind", "Pod", "--bound-object-name", name, "--bound-object-uid", uid)
    deployer.refused("create", "token", account, "--audience", "lockstep.dev", *bound, because=TOKEN_REFUSAL)
    other = deployer("create", "token", account, "--audience", "vault", *bound)
    assert other.returncode == 0 and other.stdout.strip(), other.stderr

    # Route 4: forge the replay stamp that froze the pod Ready.
    deployer.refused("annotate", "pod", name, "--overwrite", f"{STAMP}={FORGED_STAMP}", because=STAMP_REFUSAL)
    deployer.refused("annotate", "pod", name, f"{STAMP}-", because=STAMP_REFUSAL)

    # Route 5: pods whose other containers reach the sidecar's files (server-side dry run), and a
    # privileged debug container.
    for field, spec in privileged_pods(_plain_pod(cluster.namespace, "attacker")).items():
        deployer.refused("create", "--dry-run=server", "-f", "-", stdin=json.dumps(spec), because=BASELINE_REFUSAL)
    # Debug containers: `edit` may not add them (RBAC, the platform's part); whoever may (here a cluster
    # admin) gets neither a privileged one nor one in the sidecar's process namespace (the pod webhook).
    debug = ("debug", name, f"--image={IMAGE}", "--image-pull-policy=Never", "--attach=false")
    forbidden = deployer(*debug, "--profile=sysadmin", "-c", "debugger", "--", "sleep", "60")
    assert forbidden.returncode != 0 and 'cannot patch resource "pods/ephemeralcontainers"' in forbidden.stderr
    admin = Tenant(cluster.namespace, "")
    admin.refused(*debug, "--profile=sysadmin", "-c", "debugger", "--", "sleep", "60", because=BASELINE_REFUSAL)
    admin.refused(*debug, "--target=lockstep-sidecar", "-c", "peeker", "--", "sleep", "60",
                  because="sidecar's process namespace")

    # Routes nobody named.
    # a) Make the sidecar the pod's default container, then exec without -c: kubectl names the container.
    annotated = deployer("annotate", "pod", name, "kubectl.kubernetes.io/default-container=lockstep-sidecar")
    assert annotated.returncode == 0, annotated.stderr
    deployer.refused("exec", name, "--", "cat", TOKEN, because=EXEC_REFUSAL)
    # b) A copy of the live pod (what `kubectl debug --copy-to` creates) with the sidecar's image swapped for
    #    the attacker's: it would keep the token mount. And a copy that shares its process namespace.
    live = json.loads(kubectl("-n", cluster.namespace, "get", "pod", name, "-o", "json").stdout)
    for suffix, change, because in (
            ("copy", lambda spec: next(c for c in spec["initContainers"] if c["name"] == "lockstep-sidecar")
             .update(image=f"{IMAGE}-evil"), "that Lockstep did not inject"),
            ("shared", lambda spec: spec.update(shareProcessNamespace=True), "spec.shareProcessNamespace")):
        copy = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{name}-{suffix}", "labels": live["metadata"]["labels"]},
                "spec": json.loads(json.dumps(live["spec"]))}
        copy["spec"].pop("nodeName", None)
        change(copy["spec"])
        deployer.refused("create", "--dry-run=server", "-f", "-", stdin=json.dumps(copy), because=because)
    # c) A pod that opts out of injection but mounts a lockstep.dev token in its own container.
    opted_out = _plain_pod(cluster.namespace, "opted-out")
    opted_out["metadata"]["labels"]["lockstep.dev/inject"] = "disabled"
    opted_out["spec"]["volumes"] = [{"name": "t", "projected": {"sources": [
        {"serviceAccountToken": {"audience": "lockstep.dev", "path": "token", "expirationSeconds": 600}}]}}]
    opted_out["spec"]["containers"][0]["volumeMounts"] = [{"name": "t", "mountPath": "/t"}]
    deployer.refused("create", "--dry-run=server", "-f", "-", stdin=json.dumps(opted_out), because="may not opt out")
    # d) A counterfeit sidecar: an app container named lockstep-sidecar.
    counterfeit = _plain_pod(cluster.namespace, "counterfeit")
    counterfeit["spec"]["containers"].append({"name": "lockstep-sidecar", "image": IMAGE, "command": ["sleep", "9"]})
    deployer.refused("create", "--dry-run=server", "-f", "-", stdin=json.dumps(counterfeit),
                     because="is reserved for the sidecar Lockstep injects")

    # e) A Service that publishes NotReady addresses: it would route agents to a drifted, NotReady pod.
    around = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "around", "namespace": cluster.namespace},
              "spec": {"selector": {"app": "weather"}, "ports": [{"port": 8080}], "publishNotReadyAddresses": True}}
    deployer.refused("create", "--dry-run=server", "-f", "-", stdin=json.dumps(around),
                     because="spec.publishNotReadyAddresses")
    # Hand-written Endpoints or EndpointSlices to the pod's IP: `edit` may not write them (RBAC).
    for resource in ("endpoints", "endpointslices.discovery.k8s.io"):
        assert deployer("auth", "can-i", "create", resource).stdout.strip() == "no"
    # The platform's other parts (RBAC): `edit` writes no pod status (conditions, the stamp) and adds no
    # ephemeral containers; the tests above would not catch a cluster that grants more.
    for subresource in ("status", "ephemeralcontainers"):
        assert deployer("auth", "can-i", "patch", "pods", f"--subresource={subresource}").stdout.strip() == "no"

    # After all that the pod is as it was: verified by its own sidecar's reports.
    assert cluster.verdicts("weather")[name] == ("True", "Verified")

    # Separation of duties: only the approver changes the approval.
    change = json.dumps({"spec": {"approval": "Manual", "probe": {"interval": "15s"}}})
    denied = deployer("patch", "mcpserverinterface", "weather", "--type", "merge", "-p", change)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr
    approved = approver("patch", "mcpserverinterface", "weather", "--type", "merge", "-p",
                        json.dumps({"spec": {"probe": {"interval": "15s"}}}))
    assert approved.returncode == 0, approved.stderr


# ---------------------------------------------------------------- issue 32 item 4: nothing answers past the proxy

SIDE_SERVER = ("import os, subprocess, sys; subprocess.Popen([sys.executable, '/app/server.py'], "
               "env={**os.environ, 'HOST': %r, 'PORT': %r}); os.execvp(sys.executable, [sys.executable, '/app/server.py'])")
V6_LISTENER = ("import os, socket, subprocess, sys\n"
               "s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)\n"
               "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n"
               "s.bind(('::', 9000)); s.listen(8)\n"
               "os.set_inheritable(s.fileno(), True)  # it outlives the exec into the approved server\n"
               "os.execvp(sys.executable, [sys.executable, '/app/server.py'])\n")
RAW_SOCKET = ("import socket\n"
              "try:\n    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); print('raw: opened')\n"
              "except PermissionError as error:\n    print('raw: refused', error)\n")


def _isolate_interface(namespace: str, app: str) -> dict[str, Any]:
    body = _interface(namespace)
    body["metadata"]["name"] = app
    body["spec"].update(selector={"matchLabels": {"app": app}}, enforcement="Isolate")
    return body


def _app_with(namespace: str, app: str, command: list[str], **service_ports: int) -> list[dict[str, Any]]:
    objects = app_objects(app, namespace, replicas=1)
    objects[1]["spec"]["template"]["spec"]["containers"][0]["command"] = command
    for name, port in service_ports.items():
        objects.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
                        "spec": {"selector": {"app": app}, "ports": [{"port": port, "targetPort": port}]}})
    return objects


def _never_verified(cluster: Cluster, app: str, what: str) -> tuple[str, str]:
    """The pod's verdict once it is ServerExposed, checked again a few seconds later: it does not come back."""
    verdict = eventually(lambda: (v := list(cluster.verdicts(app).values())) and v[0][1] == "ServerExposed" and v[0],
                         what, timeout=TIMEOUT)
    eventually(lambda: cluster.verdicts(app) and all(v == verdict for v in cluster.verdicts(app).values()) or None,
               "the verdict to hold", timeout=10)
    assert cluster.ready(app) == []
    return verdict


def test_a_second_listener_and_its_service_keep_the_pod_unverified(cluster: Cluster) -> None:
    """The real-node finding of issue 32: the approved server on 127.0.0.1 and a second one on 0.0.0.0:8081 with
    the deployer's own Service to it. Before: True/Verified, and an agent through that Service read the poison."""
    cluster.apply_interface(_isolate_interface(cluster.namespace, "second"))
    cluster.create(_app_with(cluster.namespace, "second", ["python", "-c", SIDE_SERVER % ("0.0.0.0", "8081")],
                             **{"second-direct": 8081}))
    assert _never_verified(cluster, "second", "the second listener found")[0] == "False"
    [pod] = cluster.pods("second")
    message = next(c.message for c in pod.status.conditions if c.type == "lockstep.dev/interface-verified")
    assert "tcp 0.0.0.0:8081" in message, message
    status = eventually(lambda: (cluster.interface("second").get("status") or {}).get("proxy", {})
                        .get("bypassingServices"), "the bypassing Service in status", timeout=TIMEOUT)
    assert "second-direct:8081" in status
    # Not Ready, so no agent is routed to it (the pod may have been verified for a moment before the second server
    # opened its port; the EndpointSlice follows its readiness within seconds).
    eventually(lambda: cluster.ready_endpoints("second-direct") == set() or None, "no endpoint for the Service",
               timeout=30)
    checks = json.loads(cluster.lockstep("check", "--pods", "-o", "json").stdout)["checks"]
    services = next(c for c in checks if c["name"] == "services")
    assert services["status"] == "fail" and f"{cluster.namespace}/second-direct:8081" in services["message"]


def test_an_ipv6_only_listener_keeps_the_pod_unverified(cluster: Cluster) -> None:
    """[::]:9000 with IPV6_V6ONLY beside the approved server on 127.0.0.1: the old check connected to the pod's
    IPv4 address only."""
    cluster.apply_interface(_isolate_interface(cluster.namespace, "sixonly"))
    cluster.create(_app_with(cluster.namespace, "sixonly", ["python", "-c", V6_LISTENER]))
    _never_verified(cluster, "sixonly", "the IPv6 listener found")
    [pod] = cluster.pods("sixonly")
    message = next(c.message for c in pod.status.conditions if c.type == "lockstep.dev/interface-verified")
    assert "tcp6 [::]:9000" in message, message


def test_net_raw_is_dropped_in_guarded_pods_and_refused_when_asked_for(cluster: Cluster,
                                                                       tenants: tuple[Tenant, Tenant]) -> None:
    deployer, _ = tenants
    asking = _plain_pod(cluster.namespace, "asking")
    asking["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["NET_RAW"]}}
    deployer.refused("create", "--dry-run=server", "-f", "-", stdin=json.dumps(asking), because="NET_RAW")
    escalating = _plain_pod(cluster.namespace, "escalating")
    escalating["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": True}
    deployer.refused("create", "--dry-run=server", "-f", "-", stdin=json.dumps(escalating),
                     because="allowPrivilegeEscalation is not false")

    # A root container that says nothing: the webhook drops NET_RAW, and the kernel refuses a packet socket.
    for namespace in (cluster.namespace, cluster.agent_namespace):
        pod = _plain_pod(namespace, "rooted")
        pod["spec"]["securityContext"] = {"runAsUser": 0}
        pod["spec"]["terminationGracePeriodSeconds"] = 0
        cluster.core.create_namespaced_pod(namespace, pod)
    for namespace in (cluster.namespace, cluster.agent_namespace):
        eventually(lambda ns=namespace: cluster.core.read_namespaced_pod("rooted", ns).status.phase == "Running",
                   f"the root pod in {namespace} running", timeout=TIMEOUT)
    guarded = cluster.core.read_namespaced_pod("rooted", cluster.namespace)
    security = guarded.spec.containers[0].security_context
    assert security.allow_privilege_escalation is False and "NET_RAW" in security.capabilities.drop
    assert "raw: refused" in cluster.exec("rooted", ["python", "-c", RAW_SOCKET], "mcp")
    # The control: the same pod where Lockstep does not guard it keeps containerd's default NET_RAW.
    assert "raw: opened" in cluster.exec("rooted", ["python", "-c", RAW_SOCKET], "mcp", cluster.agent_namespace)


def test_an_opted_out_counterfeit_cannot_gate_itself(cluster: Cluster, tenants: tuple[Tenant, Tenant]) -> None:
    """poc_opt_out_counterfeit.py on the real node: Lockstep's gate, a lockstep-sidecar of the deployer's own and a
    lockstep.dev token, in a pod that opts out, and in a namespace that never opted in."""
    deployer, _ = tenants
    counterfeit = _plain_pod(cluster.namespace, "counterfeit")
    counterfeit["metadata"]["labels"]["lockstep.dev/inject"] = "disabled"
    counterfeit["spec"].update(
        readinessGates=[{"conditionType": "lockstep.dev/interface-verified"}],
        initContainers=[{"name": "lockstep-sidecar", "image": IMAGE, "restartPolicy": "Always",
                         "command": ["sleep", "3600"], "volumeMounts": [{"name": "lockstep-token",
                                                                         "mountPath": "/var/run/secrets/lockstep.dev"}]}],
        volumes=[{"name": "lockstep-token", "projected": {"sources": [{"serviceAccountToken": {
            "audience": "lockstep.dev", "path": "token", "expirationSeconds": 600}}]}}])
    deployer.refused("create", "--dry-run=server", "-f", "-", stdin=json.dumps(counterfeit))
    elsewhere = json.loads(json.dumps(counterfeit))
    elsewhere["metadata"].update(namespace=cluster.agent_namespace)
    del elsewhere["metadata"]["labels"]["lockstep.dev/inject"]
    admin = Tenant(cluster.agent_namespace, "")
    admin.refused("create", "--dry-run=server", "-f", "-", stdin=json.dumps(elsewhere),
                  because="this pod is not one Lockstep injects")
    plain = _plain_pod(cluster.agent_namespace, "plain")
    assert admin("create", "--dry-run=server", "-f", "-", stdin=json.dumps(plain)).returncode == 0
