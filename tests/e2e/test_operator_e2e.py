"""The Lockstep story on a real cluster, as a platform team lives it.

An app is deployed into an opted-in namespace and held NotReady until its interface is pinned;
`lockstep snapshot` through a port-forward pins it, `kubectl apply` lets the pods in; agents in the
cluster reach both pods through the Service; a rug pull on one pod takes exactly that pod out of the
Service; `lockstep diff` shows the drift and `lockstep approve --apply` brings it back without a
restart. Also: an app that runs as another user, a Service whose name collides with the sidecar's
variables, Quarantine (agents through the Service see only the approved subset), and the operator's
owner replica deleted without a flap.

Needs KUBECONFIG and Lockstep installed with its image reachable by the cluster (docs/e2e.md).
``LOCKSTEP_E2E_IMAGE`` names the image that runs the test MCP server and the agent (it needs Python
and the ``mcp`` SDK: the Lockstep image has both).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml
from lockstep_testing.real_cluster import CONDITION, POISON, Cluster, app_objects, eventually
from lockstep_testing.tenant import container_environment

pytestmark = pytest.mark.e2e

SYSTEM_NAMESPACE = "lockstep-system"
FAST_PROBE = {"interval": "5s", "timeout": "5s", "staleAfter": "60s"}


def snapshot_through_port_forward(cluster: Cluster, pod: str, name: str, *extra: str) -> dict[str, Any]:
    """`kubectl port-forward` to the pod's MCP port, then `lockstep snapshot` as the README says."""
    for attempt in range(5):
        # The app's process may still be starting on a loaded node (Running is the container's start, not
        # its server's): a refused or dropped connection is retried, as a user would, with a new
        # port-forward (kubectl's ends when its connection into the pod is refused). It reaches the server
        # on 127.0.0.1: kubectl port-forward connects inside the pod's network namespace.
        forward, local_port = cluster.port_forward(pod, 8080)
        try:
            result = cluster.lockstep("snapshot", f"http://127.0.0.1:{local_port}/mcp", "--name", name,
                                      "-n", cluster.namespace, "--endpoint-port", "8080", *extra, check=False)
        finally:
            forward.terminate()
            forward.wait(timeout=10)
        if result.returncode == 0 or "disconnected" not in result.stderr and "onnect" not in result.stderr:
            break
        time.sleep(2 * (attempt + 1))
    if result.returncode != 0:
        raise AssertionError(f"lockstep snapshot exited {result.returncode}: {result.stderr}")
    assert result.returncode == 0, result.stderr
    manifest = dict(yaml.safe_load(result.stdout))
    assert manifest["spec"]["endpoint"]["port"] == 8080  # the pod's port, not the port-forward's
    return manifest


def restart(cluster: Cluster, deployment: str) -> None:
    """`kubectl rollout restart`: the new pods are injected with the resource's probe settings."""
    import kubernetes

    kubernetes.client.AppsV1Api(cluster.api).patch_namespaced_deployment(
        deployment, cluster.namespace,
        {"spec": {"template": {"metadata": {"annotations": {"e2e/restartedAt": str(time.time())}}}}})


def all_verified(cluster: Cluster, app: str, count: int) -> bool:
    verdicts = cluster.verdicts(app)
    return len(verdicts) == count and all(v == ("True", "Verified") for v in verdicts.values()) \
        and len(cluster.ready(app)) == count


def test_snapshot_apply_rug_pull_isolates_one_pod_and_approve_restores(cluster: Cluster) -> None:
    cluster.create(app_objects("weather", cluster.namespace, replicas=2))
    pods = eventually(lambda: len(p := cluster.pods("weather")) == 2 and p, "two weather pods")
    for pod in pods:
        assert any(gate.condition_type == CONDITION for gate in pod.spec.readiness_gates or [])
        assert [c.name for c in pod.spec.init_containers] == ["lockstep-sidecar"]
    # No MCPServerInterface yet: the pods run but are held out of the Service (fail closed): the gate's
    # condition is missing or False, and an Event says why.
    eventually(lambda: all(p.status.phase == "Running" for p in cluster.pods("weather")), "the pods to run")
    time.sleep(3)
    assert all(verdict[0] != "True" for verdict in cluster.verdicts("weather").values())
    assert cluster.ready("weather") == [] and cluster.ready_endpoints("weather") == set()

    manifest = snapshot_through_port_forward(cluster, pods[0].metadata.name, "weather")
    manifest["spec"]["probe"] = FAST_PROBE
    cluster.apply_interface(manifest)
    # Admitted while no interface selected them, their sidecars run no in-line proxy: in Isolate they are never
    # verified (security review 2, S6-6), whatever they report. The interface's settings (the proxy, the probe)
    # reach pods at admission: roll the Deployment.
    eventually(lambda: (v := cluster.verdicts("weather")) and set(v.values()) == {("False", "ProxyMissing")},
               "both pods ProxyMissing after kubectl apply")
    assert cluster.ready("weather") == []
    restart(cluster, "weather")
    eventually(lambda: all_verified(cluster, "weather", 2) and {p.metadata.name for p in cluster.pods("weather")}
               .isdisjoint({p.metadata.name for p in pods}), "the restarted pods verified and Ready")
    pods = cluster.pods("weather")
    names = {pod.metadata.name for pod in pods}
    eventually(lambda: cluster.ready_endpoints("weather") == names, "both pods in the Service")

    cluster.start_agent()
    seen = cluster.agent_session("weather", calls=16)
    assert [tool["name"] for tool in seen["tools"]] == ["get_forecast"] and not seen["errors"], seen
    assert set(seen["served_by"]) == names, "the Service did not spread calls over both pods"

    # The rug pull on one pod: that pod, and only that pod, leaves the Service.
    pulled, other = sorted(names)
    cluster.write_file(pulled, "/data/description", POISON)
    eventually(lambda: cluster.verdicts("weather")[pulled] == ("False", "InterfaceChanged"), "the drift detected")
    eventually(lambda: cluster.ready_endpoints("weather") == {other}, "the drifted pod out of the Service")
    assert cluster.verdicts("weather")[other] == ("True", "Verified")
    seen = cluster.agent_session("weather", calls=12)
    assert set(seen["served_by"]) == {other}, "the Service still routed to the drifted pod"
    assert seen["tools"] == [{"name": "get_forecast", "description": "Forecast for a city."}]

    status = eventually(lambda: (s := cluster.interface("weather").get("status", {})).get("phase") == "Drifted"
                        and s, "phase Drifted")
    drifted = [entry for entry in status["observed"] if not entry["approved"]]
    assert [(f["kind"], f["name"], f["change"]) for f in drifted[0]["findings"]] == [("tool", "get_forecast",
                                                                                        "changed")]
    import kubernetes
    events = kubernetes.client.CoreV1Api(cluster.api).list_namespaced_event(
        cluster.namespace, field_selector="involvedObject.kind=Pod").items
    assert "InterfaceChanged" in {event.reason for event in events}

    # Review and approve, as the README says: the pod comes back without a restart.
    diff = cluster.lockstep("diff", "weather", "-n", cluster.namespace, "--color", "never")
    assert diff.returncode == 1 and "get_forecast" in diff.stdout and "~/.ssh/id_rsa" in diff.stdout, diff
    restarts = {p.metadata.name: sum(s.restart_count for s in p.status.container_statuses or [])
                for p in cluster.pods("weather")}
    approved = cluster.lockstep("approve", "weather", "-n", cluster.namespace, "--apply")
    assert approved.returncode == 0, approved.stderr
    eventually(lambda: all_verified(cluster, "weather", 2), "both pods verified again")
    eventually(lambda: cluster.ready_endpoints("weather") == names, "both pods back in the Service")
    assert {p.metadata.name: sum(s.restart_count for s in p.status.container_statuses or [])
            for p in cluster.pods("weather")} == restarts


def test_an_app_running_as_another_user_beside_a_service_named_like_a_sidecar_variable(cluster: Cluster) -> None:
    """The sidecar reads its token as uid 65532 whatever user the app runs as (no fsGroup), and a Service
    named lockstep-proxy (the kubelet injects LOCKSTEP_PROXY_PORT=tcp://...) does not reach it: in Isolate
    the webhook's own value (the in-line proxy's port, issue 28) wins over the Service link."""
    decoy = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lockstep-proxy"},
             "spec": {"selector": {"app": "nothing"}, "ports": [{"port": 8090}]}}
    cluster.create([decoy])
    interface = {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface",
                 "metadata": {"name": "weather"},
                 "spec": {"selector": {"matchLabels": {"app": "weather"}},
                          "endpoint": {"port": 8080, "path": "/mcp", "transport": "streamable-http"},
                          "enforcement": "Isolate", "approval": "FirstSeen", "probe": FAST_PROBE}}
    cluster.apply_interface(interface)
    cluster.create(app_objects("weather", cluster.namespace, replicas=1,
                               pod_security={"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True}))
    eventually(lambda: all_verified(cluster, "weather", 1), "the pod verified and Ready")
    pod = cluster.pods("weather")[0]
    # What the kubelet gave the sidecar: the Service link's variables, except the one the webhook set. Before
    # issue 28 Isolate ran no proxy and the webhook set it empty; now it is the proxy's port (8090).
    # Nobody execs into the sidecar (the chart's policy, issue 25): its environment is read from the node.
    seen = {key: value for key, value in container_environment(pod, "lockstep-sidecar").items() if "PROXY" in key}
    assert seen.get("LOCKSTEP_PROXY_SERVICE_HOST"), f"the kubelet injected no Service links: {seen}"
    assert (seen["LOCKSTEP_PROXY_PORT"], seen["LOCKSTEP_PROXY_MODE"]) == ("8090", "isolate"), seen
    whoami = cluster.exec(pod.metadata.name, ["python", "-c", "import os; print(os.getuid())"], "mcp")
    assert whoami.strip() == "1000"


def test_quarantine_serves_agents_only_the_approved_subset(cluster: Cluster) -> None:
    # The server listens on 127.0.0.1 only; the Service targets the proxy's port (numeric, see docs/proxy.md).
    cluster.create(app_objects("tools", cluster.namespace, replicas=1, host="127.0.0.1", service_port="8090")[:2])
    cluster.create([{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "tools"},
                     "spec": {"selector": {"app": "tools"}, "ports": [{"port": 8080, "targetPort": 8090}]}}])
    pod = eventually(lambda: cluster.pods("tools") and cluster.pods("tools")[0], "the tools pod").metadata.name

    def listening() -> bool:  # the app container starts after the sidecar: an exec may find it not there yet
        import kubernetes
        try:
            return cluster.exec(pod, ["python", "-c", "import socket; socket.create_connection(('127.0.0.1', 8080));"
                                                      " print('up')"], "mcp").strip() == "up"
        except kubernetes.client.ApiException:
            return False

    eventually(listening, "the MCP server to listen")
    manifest = snapshot_through_port_forward(cluster, pod, "tools")
    manifest["spec"].update(enforcement="Quarantine", probe=FAST_PROBE, proxy={"port": 8090})
    cluster.apply_interface(manifest)
    restart(cluster, "tools")  # the proxy is injected at admission
    eventually(lambda: all_verified(cluster, "tools", 1) and cluster.pods("tools")[0].metadata.name != pod,
               "the restarted pod verified behind its proxy")
    pod = cluster.pods("tools")[0].metadata.name
    assert cluster.ready_endpoints("tools") == {pod}
    cluster.start_agent()
    seen = cluster.agent_session("tools", calls=1)
    assert [t["name"] for t in seen["tools"]] == ["get_forecast"] and seen["served_by"] == [pod], seen

    # The server adds a poisoned tool: the pod keeps serving, without it.
    cluster.write_file(pod, "/data/extra-tool", "exfiltrate")
    eventually(lambda: cluster.verdicts("tools")[pod] == ("True", "Quarantined"), "the pod quarantined")
    seen = cluster.agent_session("tools", calls=1)
    assert [t["name"] for t in seen["tools"]] == ["get_forecast"], seen
    assert "IMPORTANT" not in json.dumps(seen)
    assert cluster.ready_endpoints("tools") == {pod}


def test_deleting_the_resources_owner_replica_flaps_no_pod(cluster: Cluster) -> None:
    """Every operator replica serves; the one that owns the resource (lockstep.operator.replicas.membership: the
    entries in the peering object, with each replica's pod IP) is deleted: the other takes it over."""
    import kubernetes

    from lockstep.operator.replicas.membership import live_members, owner

    cluster.apply_interface({"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface",
                             "metadata": {"name": "weather"},
                             "spec": {"selector": {"matchLabels": {"app": "weather"}},
                                      "endpoint": {"port": 8080, "path": "/mcp"}, "approval": "FirstSeen",
                                      "probe": FAST_PROBE}})
    cluster.create(app_objects("weather", cluster.namespace, replicas=2))
    eventually(lambda: all_verified(cluster, "weather", 2), "both pods verified")
    core = kubernetes.client.CoreV1Api(cluster.api)
    operators = core.list_namespaced_pod(SYSTEM_NAMESPACE, label_selector="app.kubernetes.io/name=lockstep").items
    if len(operators) < 2:
        pytest.skip("the release runs one operator replica: no hand-over to test")
    [peering] = kubernetes.client.CustomObjectsApi(cluster.api).list_cluster_custom_object(
        "kopf.dev", "v1", "clusterkopfpeerings")["items"]
    members = live_members(peering.get("status") or {})
    by_ip = {p.status.pod_ip: p.metadata.name for p in operators}
    assert sorted(by_ip) == sorted(member.endpoint.host for member in members if member.endpoint), (members, by_ip)
    chosen = owner(f"{cluster.namespace}/weather", [member.priority for member in members])
    [owner_pod] = [by_ip[member.endpoint.host] for member in members if member.priority == chosen and member.endpoint]
    # Owner affinity: each answer names the owner's pod IP, and the sidecars send their next reports
    # straight there, verifying the Service's certificate name on that address: no report is relayed.
    time.sleep(12)  # two probe intervals: every pod has had an answer from the owner since both replicas run
    apps = [p.metadata.name for p in cluster.pods("weather")]
    first = {pod: report_counts(core, pod) for pod in by_ip.values()}
    direct_first = {pod: direct_reports(core, cluster.namespace, pod) for pod in apps}
    time.sleep(20)  # four more probe intervals of both pods
    second = {pod: report_counts(core, pod) for pod in by_ip.values()}
    direct_second = {pod: direct_reports(core, cluster.namespace, pod) for pod in apps}
    assert sum(second[pod]["relayed"] - first[pod]["relayed"] for pod in by_ip.values()) == 0, (first, second)
    assert second[owner_pod]["accepted"] - first[owner_pod]["accepted"] >= 4, (first, second)
    # ... because each sidecar sent them to the owner's pod IP, which verified (none fell back).
    for pod in apps:
        assert direct_second[pod]["answered"] - direct_first[pod]["answered"] >= 2, (direct_first, direct_second)
        assert direct_second[pod]["unreachable"] == 0, direct_second
    before = {p.metadata.name: next(c.last_transition_time for c in p.status.conditions if c.type == CONDITION)
              for p in cluster.pods("weather")}
    core.delete_namespaced_pod(owner_pod, SYSTEM_NAMESPACE)
    deadline = time.monotonic() + 30  # more than a hand-over and several probe intervals
    while time.monotonic() < deadline:
        assert all(v == ("True", "Verified") for v in cluster.verdicts("weather").values()), cluster.verdicts("weather")
        assert len(cluster.ready_endpoints("weather")) == 2
        time.sleep(0.5)
    after = {p.metadata.name: next(c.last_transition_time for c in p.status.conditions if c.type == CONDITION)
             for p in cluster.pods("weather")}
    assert after == before  # not even a False that came and went between two polls


def report_counts(core: Any, pod: str) -> dict[str, float]:
    """The operator replica's reports so far by outcome, from its metrics (port 8080, through the API's pod proxy)."""
    text = core.connect_get_namespaced_pod_proxy_with_path(f"{pod}:8080", SYSTEM_NAMESPACE, "metrics")
    counts = {"accepted": 0.0, "relayed": 0.0}
    for line in str(text).splitlines():
        for outcome in counts:
            if line.startswith(f'lockstep_report_duration_seconds_count{{outcome="{outcome}"}}'):
                counts[outcome] += float(line.rsplit(" ", 1)[1])
    return counts


def direct_reports(core: Any, namespace: str, pod: str) -> dict[str, float]:
    """The sidecar's reports sent straight to the owner replica (``lockstep_sidecar_direct_reports_total``)."""
    text = core.connect_get_namespaced_pod_proxy_with_path(f"{pod}:9090", namespace, "metrics")
    counts = {"answered": 0.0, "unreachable": 0.0}
    for line in str(text).splitlines():
        for result in counts:
            if line.startswith(f'lockstep_sidecar_direct_reports_total{{result="{result}"}}'):
                counts[result] = float(line.rsplit(" ", 1)[1])
    return counts
