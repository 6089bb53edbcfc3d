"""The upgrade tier (issue 26): the previous release, upgraded, rolled back, upgraded again and uninstalled
with the real Helm (tests/e2e/helm.py runs Helm's own Go actions), while injected pods serve a client.

A cluster that started at the previous release (``LOCKSTEP_E2E_PREVIOUS``, e.g. ``v0.1.0``: its chart from its
source archive in releases/, its image loaded by tools/realnode-e2e): the fresh release that
tools/realnode-e2e installed is uninstalled and its CRD deleted, then the previous chart installed (its CRD
from ``crds/``, without Helm's ownership metadata). Three pods of the e2e weather server behind a Service,
enforcement Isolate, each with the previous release's sidecar, and a client in the node's network namespace
that calls a tool through the Service's ClusterIP on a new connection every 0.2 s (a new MCP session each
time), while a watch records every Ready transition of those pods. Then, as docs/upgrades.md orders it:

1. ``helm upgrade`` to the working tree: refused until the CRD is adopted (Helm's ownership check, with
   docs/helm.md's message), accepted after the documented ``kubectl label`` / ``kubectl annotate``. The CRD
   is the release's now (labels, ``helm.sh/resource-policy: keep``), same uid, the working tree's schema.
2. A rug pull on a pod that still runs the previous sidecar: the new operator cuts it from the Service.
3. The restart with the release's Breaking change (0.1.0 to 0.2.0 in Isolate: the server on 127.0.0.1,
   the Service on ``lockstep-mcp``), with no request lost: the new pods get the new sidecar and become Ready.
4. ``helm rollback`` to revision 1: the previous operator judges the newer sidecars' reports; no pod flips.
5. ``helm upgrade`` again: the kept CRD is adopted again, no pod flips.
6. ``helm uninstall``: the pods keep their last verdict and stay in their Service, no webhook
   configuration or admission policy of Lockstep is left, a new pod in the opted-in namespace runs.

Throughout: no pod that nobody pulled or deleted leaves Ready, and no client call fails. The measurements
are printed (docs/upgrades.md, "Tested").
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e.in_node import NETNS, InNode, reachable
from lockstep_testing.real_cluster import (
    GROUP,
    IMAGE,
    PLURAL,
    POISON,
    VERSION,
    Cluster,
    app_objects,
    eventually,
)

from lockstep.operator.crd_check import CRD_NAME, missing_fields

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PREVIOUS = os.environ.get("LOCKSTEP_E2E_PREVIOUS", "")
PREVIOUS_IMAGE = f"ghcr.io/lockstep-dev/lockstep:{PREVIOUS.removeprefix('v')}"
RELEASE, SYSTEM_NAMESPACE = "lockstep", "lockstep-system"
VALUES = ("--set", "image.pullPolicy=Never")
HELM = (sys.executable, str(HERE / "helm.py"))
APP, REPLICAS = "weather", 3
SIDECAR = "lockstep-sidecar"
OPERATOR_PODS = "app.kubernetes.io/name=lockstep"
FAST_PROBE = {"interval": "5s", "timeout": "5s", "staleAfter": "60s"}
#: After the rollback and after the second upgrade, how long the pods are watched (three probe intervals:
#: every pod reports to the operator that now runs).
SETTLE = 15.0
CALL_TIMEOUT = 10.0
MANAGED_BY, RELEASE_NAME = "app.kubernetes.io/managed-by", "meta.helm.sh/release-name"
RESOURCE_POLICY = "helm.sh/resource-policy"

#: In the node's network namespace: call get_forecast through the Service every 0.2 s, each call on a new
#: connection and MCP session (kube-proxy balances connections); one JSON line per call, with its seconds.
#: A call fails when it is refused, reset, answered with an error, or unanswered for CALL_TIMEOUT seconds
#: (generous: the 2 cores CI shares run this tier beside other work).
CALLER = textwrap.dedent("""
    import http.client, json, sys, time
    host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    def post(conn, message, session=None):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if session:
            headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"})
        conn.request("POST", "/mcp", json.dumps(message), headers)
        response = conn.getresponse()
        body = response.read().decode("utf-8", "replace")
        if response.status >= 400:
            raise RuntimeError(f"HTTP {response.status}: {body[:120]}")
        if "text/event-stream" in (response.getheader("Content-Type") or ""):
            data = [l[5:].strip() for l in body.splitlines() if l.startswith("data:") and l[5:].strip()]
            body = data[-1] if data else ""
        return response.getheader("Mcp-Session-Id"), (json.loads(body) if body else {})
    def call():
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            session, _ = post(conn, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "upgrade-caller", "version": "1"}}})
            post(conn, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
            _, answer = post(conn, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                    "params": {"name": "get_forecast", "arguments": {"city": "Oslo"}}}, session)
            return answer["result"]["content"][0]["text"].rsplit("(", 1)[-1].rstrip(")")
        finally:
            conn.close()
    while True:
        started = time.time()
        try:
            by = call()
            print(json.dumps({"t": started, "s": time.time() - started, "ok": True, "by": by}), flush=True)
        except Exception as error:
            print(json.dumps({"t": started, "s": time.time() - started, "ok": False, "error": repr(error)[:200]}),
                  flush=True)
        time.sleep(0.2)
""")


# ---------------------------------------------------------------------------------------------- helpers


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The Helm command line as a user types it (tests/e2e/helm.py: Helm's own actions)."""
    result = subprocess.run([*HELM, *args], capture_output=True, text=True, timeout=400, cwd=REPO)
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr or result.stdout}"
    return result


def kubectl(*args: str) -> None:
    result = subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"


def revisions() -> list[tuple[int, str, str]]:
    """``helm history``: (revision, status, chart) per revision."""
    lines = helm("history", RELEASE, "-n", SYSTEM_NAMESPACE).stdout.splitlines()[1:]
    return [(int(fields[0]), fields[1], fields[2]) for fields in (line.split("\t") for line in lines)]


class Phases:
    """When each step of the tier began, to say in which step a call failed or a pod left Ready."""

    def __init__(self) -> None:
        self.started: list[tuple[float, str]] = []

    def mark(self, name: str) -> None:
        self.started.append((time.time(), name))

    def of(self, at: float) -> str:
        return next((name for begun, name in reversed(self.started) if begun <= at), "before")

    def table(self, calls: list[dict[str, Any]]) -> str:
        rows = []
        for _, name in self.started:
            mine = [c for c in calls if self.of(c["t"]) == name]
            if mine:
                slowest = max(c.get("s", 0.0) for c in mine)
                rows.append(f"{name}: {len(mine)} calls, {sum(not c['ok'] for c in mine)} failed, "
                            f"slowest {slowest:.2f} s")
        return "; ".join(rows)


class ReadyWatch:
    """Every Ready transition of one app's pods, from a watch (a sample would miss a short flap)."""

    def __init__(self, api: Any, namespace: str, app: str) -> None:
        import kubernetes

        self._core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(api.configuration))
        self._namespace, self._selector = namespace, f"app={app}"
        self._ready: dict[str, bool] = {}
        #: (time, pod, Ready, being deleted) whenever a pod's Ready changes.
        self.changes: list[tuple[float, str, bool, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _record(self, pod: Any, gone: bool = False) -> None:
        ready = not gone and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        if self._ready.get(pod.metadata.name) != ready:
            self._ready[pod.metadata.name] = ready
            self.changes.append((time.time(), pod.metadata.name, ready, pod.metadata.deletion_timestamp is not None))

    def _run(self) -> None:
        import kubernetes

        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    listing = self._core.list_namespaced_pod(self._namespace, label_selector=self._selector)
                    for pod in listing.items:
                        self._record(pod)
                    version = listing.metadata.resource_version
                watch = kubernetes.watch.Watch()
                for event in watch.stream(self._core.list_namespaced_pod, self._namespace,
                                          label_selector=self._selector, resource_version=version, timeout_seconds=5):
                    self._record(event["object"], gone=event["type"] == "DELETED")
                    version = event["object"].metadata.resource_version
                    if self._stop.is_set():
                        watch.stop()
            except kubernetes.client.ApiException as error:
                if error.status != 410:  # 410 Gone: the version is too old, list again
                    raise
                version = ""

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def left_ready(self, spared: set[str]) -> list[tuple[float, str]]:
        """Pods that left Ready while nobody deleted them, except ``spared``."""
        return [(at, pod) for at, pod, ready, deleting in self.changes
                if not ready and not deleting and pod not in spared and self._was_ready(pod, at)]

    def _was_ready(self, pod: str, before: float) -> bool:
        return any(name == pod and ready and at < before for at, name, ready, _ in self.changes)


def sidecar_image(pod: Any) -> str:
    return next((c.image for c in pod.spec.init_containers or [] if c.name == SIDECAR), "")


def operator_images(core: Any) -> set[str]:
    pods = core.list_namespaced_pod(SYSTEM_NAMESPACE, label_selector=OPERATOR_PODS).items
    return {c.image for p in pods if p.metadata.deletion_timestamp is None for c in p.spec.containers}


def installed_crd(api: Any) -> Any:
    import kubernetes
    return kubernetes.client.ApiextensionsV1Api(api).read_custom_resource_definition(CRD_NAME)


def serving(cluster: Cluster, count: int) -> list[str] | None:
    """The app's pods when ``count`` are verified, Ready and the Service's endpoints; else None."""
    names = {p.metadata.name for p in cluster.pods(APP)}
    verified = [name for name, verdict in cluster.verdicts(APP).items() if verdict == ("True", "Verified")]
    if len(names) == count and len(verified) == count and set(cluster.ready(APP)) == names \
            and cluster.ready_endpoints(APP) == names:
        return sorted(names)
    return None


def lockstep_admission_leftovers(api: Any) -> list[str]:
    import kubernetes
    admission = kubernetes.client.AdmissionregistrationV1Api(api)
    found = [f"{kind} {item.metadata.name}" for kind, items in (
        ("MutatingWebhookConfiguration", admission.list_mutating_webhook_configuration().items),
        ("ValidatingWebhookConfiguration", admission.list_validating_webhook_configuration().items),
        ("ValidatingAdmissionPolicy", admission.list_validating_admission_policy().items),
        ("ValidatingAdmissionPolicyBinding", admission.list_validating_admission_policy_binding().items))
        for item in items]
    return [entry for entry in found if "lockstep" in entry]


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def previous_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's chart, from its source archive in releases/ (tools/release-source)."""
    if not PREVIOUS:
        pytest.skip("set LOCKSTEP_E2E_PREVIOUS to the previous release's tag, its image loaded (tools/realnode-e2e)")
    if os.geteuid() != 0 or not Path(NETNS).exists():
        pytest.skip(f"the client runs in the node's network namespace ({NETNS}, as root)")
    folder = tmp_path_factory.mktemp("previous")
    unpacked = subprocess.run([str(REPO / "tools" / "release-source"), "unpack", PREVIOUS, str(folder)],
                              check=False, capture_output=True, text=True)
    if unpacked.returncode != 0:
        pytest.fail(f"the source of {PREVIOUS} did not unpack: {unpacked.stderr.strip()}")
    return folder / "charts" / "lockstep"


@pytest.fixture
def caller(cluster: Cluster) -> Iterator[list[InNode]]:
    """Holds the client once started, and stops it whatever happens."""
    started: list[InNode] = []
    yield started
    for process in started:
        process.stop()


# ---------------------------------------------------------------------------------------------- steps


def start_at_the_previous_release(cluster: Cluster, chart: Path) -> None:
    """A cluster that started at the previous release: no release, no CRD, then its install."""
    import kubernetes

    if helm("history", RELEASE, "-n", SYSTEM_NAMESPACE, check=False).returncode == 0:
        helm("uninstall", RELEASE, "-n", SYSTEM_NAMESPACE, "--wait")
    extensions = kubernetes.client.ApiextensionsV1Api(cluster.api)
    try:
        extensions.delete_custom_resource_definition(CRD_NAME)
    except kubernetes.client.ApiException as error:
        assert error.status == 404, error
    eventually(lambda: CRD_NAME not in {c.metadata.name for c in extensions.list_custom_resource_definition().items},
               "the kept CRD deleted", timeout=60, interval=0.5)
    helm("install", RELEASE, str(chart), "-n", SYSTEM_NAMESPACE, "--create-namespace", *VALUES, "--wait",
         "--timeout", "3m")
    assert operator_images(cluster.core) == {PREVIOUS_IMAGE}
    crd = installed_crd(cluster.api)
    assert MANAGED_BY not in (crd.metadata.labels or {}), "the previous release's crds/ pass sets no Helm metadata"
    eventually(lambda: validation_serving(cluster), "the previous release's validating webhook serving", timeout=60,
               interval=0.5)


def app_interface(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface",
            "metadata": {"name": APP, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": APP}}, "endpoint": {"port": 8080, "path": "/mcp"},
                     "enforcement": "Isolate", "approval": "FirstSeen", "probe": FAST_PROBE}}


def validation_serving(cluster: Cluster) -> bool:
    """A dry-run create of the app's interface passes the validating webhook: part of an install being
    done, since `helm install --wait` ends when the operator's pod is Ready, a moment before kube-proxy
    routes the webhook's Service to it (a clean-clone run's first create was refused: connection refused)."""
    import kubernetes

    try:
        cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, PLURAL, app_interface(cluster.namespace),
            dry_run="All")
    except kubernetes.client.ApiException as error:
        if error.status == 500 and "failed calling webhook" in str(error.body):
            return False
        raise
    return True


def deploy_the_app(cluster: Cluster) -> list[str]:
    """Three pods with the previous sidecar (no proxy in its Isolate): the server on the pod's IP."""
    cluster.apply_interface(app_interface(cluster.namespace))
    cluster.create(app_objects(APP, cluster.namespace, replicas=REPLICAS, host="0.0.0.0", service_port="mcp"))
    pods = eventually(lambda: serving(cluster, REPLICAS), f"{REPLICAS} pods verified and in the Service")
    assert {sidecar_image(p) for p in cluster.pods(APP)} == {PREVIOUS_IMAGE}
    return pods


def adopt_and_upgrade(cluster: Cluster) -> float:
    """docs/helm.md: the upgrade is refused until the crds/ CRD is handed to the release, once."""
    uid = installed_crd(cluster.api).metadata.uid
    refused = helm("upgrade", RELEASE, "charts/lockstep", "-n", SYSTEM_NAMESPACE, *VALUES, "--wait", check=False)
    assert refused.returncode == 1 and "exists and cannot be imported into the current release" in refused.stderr \
        and CRD_NAME in refused.stderr, refused.stderr
    kubectl("label", "crd", CRD_NAME, f"{MANAGED_BY}=Helm", "--overwrite")
    kubectl("annotate", "crd", CRD_NAME, "--overwrite", f"{RELEASE_NAME}={RELEASE}",
            f"meta.helm.sh/release-namespace={SYSTEM_NAMESPACE}")
    started = time.monotonic()
    helm("upgrade", RELEASE, "charts/lockstep", "-n", SYSTEM_NAMESPACE, *VALUES, "--wait", "--timeout", "3m")
    took = time.monotonic() - started
    assert operator_images(cluster.core) == {IMAGE}
    assert_crd_is_the_releases(cluster, uid)
    return took


def assert_crd_is_the_releases(cluster: Cluster, uid: str) -> None:
    """Adopted, kept on uninstall, the working tree's schema (nothing the operator needs is pruned), and
    the MCPServerInterface written under the old CRD still there."""
    crd = installed_crd(cluster.api)
    assert crd.metadata.uid == uid, "the CRD was re-created (its objects with it)"
    assert (crd.metadata.labels or {}).get(MANAGED_BY) == "Helm"
    assert (crd.metadata.annotations or {}).get(RESOURCE_POLICY) == "keep"
    assert missing_fields(cluster.api.sanitize_for_serialization(crd)) == []
    assert cluster.interface(APP)["spec"]["enforcement"] == "Isolate"


def rug_pull(cluster: Cluster, pod: str) -> float:
    """The poisoned description on a pod with the previous sidecar; seconds until the Service drops it."""
    assert sidecar_image(cluster.core.read_namespaced_pod(pod, cluster.namespace)) == PREVIOUS_IMAGE
    pulled_at = time.monotonic()
    cluster.write_file(pod, "/data/description", POISON)
    eventually(lambda: pod not in cluster.ready_endpoints(APP), f"{pod} cut from the Service", timeout=60,
               interval=0.1)
    cut = time.monotonic() - pulled_at
    assert cluster.verdicts(APP)[pod] == ("False", "InterfaceChanged")
    return cut


def restart_with_the_breaking_change(cluster: Cluster, old: list[str]) -> list[str]:
    """docs/upgrades.md, 0.1.0 to 0.2.0 in Isolate, without a lost request: the new pods (server on
    127.0.0.1, its port no longer named like the Service's target) come up beside the old ones, which are
    scaled down only minReadySeconds after the new ones are Ready; the Service moves to lockstep-mcp
    as soon as they are."""
    import kubernetes

    kubernetes.client.AppsV1Api(cluster.api).patch_namespaced_deployment(APP, cluster.namespace, {"spec": {
        "minReadySeconds": 10, "strategy": {"rollingUpdate": {"maxSurge": REPLICAS, "maxUnavailable": 0}},
        "template": {"spec": {"containers": [{"name": "mcp", "env": [{"name": "HOST", "value": "127.0.0.1"}],
                                              "ports": [{"containerPort": 8080, "name": "http"}]}]}}}})

    def new_pods_ready() -> list[str] | None:
        fresh = [p for p in cluster.pods(APP) if p.metadata.name not in old]
        ready = set(cluster.ready(APP))
        return sorted(p.metadata.name for p in fresh) if len(fresh) == REPLICAS and all(
            p.metadata.name in ready for p in fresh) else None

    new = eventually(new_pods_ready, "the restarted pods Ready")
    cluster.core.patch_namespaced_service(APP, cluster.namespace,
                                          {"spec": {"ports": [{"port": 8080, "targetPort": "lockstep-mcp"}]}})
    eventually(lambda: serving(cluster, REPLICAS) == new, "only the restarted pods, verified, in the Service")
    for pod in cluster.pods(APP):
        assert sidecar_image(pod) == IMAGE
        assert "lockstep-mcp" in {port.name for c in pod.spec.init_containers for port in c.ports or []}
    return new


def rollback_to_the_previous_release(cluster: Cluster, pods: list[str]) -> None:
    """The previous operator judges newer sidecars (docs/upgrades.md, rollback): nothing flips."""
    helm("rollback", RELEASE, "1", "-n", SYSTEM_NAMESPACE, "--wait", "--timeout", "3m")
    assert operator_images(cluster.core) == {PREVIOUS_IMAGE}
    time.sleep(SETTLE)
    assert serving(cluster, REPLICAS) == pods
    assert {sidecar_image(p) for p in cluster.pods(APP)} == {IMAGE}


def upgrade_again(cluster: Cluster, pods: list[str], crd_uid: str) -> None:
    helm("upgrade", RELEASE, "charts/lockstep", "-n", SYSTEM_NAMESPACE, *VALUES, "--wait", "--timeout", "3m")
    assert operator_images(cluster.core) == {IMAGE}
    assert_crd_is_the_releases(cluster, crd_uid)
    # Helm's release history (Secrets): the refused upgrade left no revision, the rollback is one.
    assert revisions() == [(1, "superseded", f"lockstep-{PREVIOUS_IMAGE.rsplit(':', 1)[1]}"),
                           (2, "superseded", f"lockstep-{IMAGE.rsplit(':', 1)[1]}"),
                           (3, "superseded", f"lockstep-{PREVIOUS_IMAGE.rsplit(':', 1)[1]}"),
                           (4, "deployed", f"lockstep-{IMAGE.rsplit(':', 1)[1]}")]
    time.sleep(SETTLE)
    assert serving(cluster, REPLICAS) == pods


def uninstall(cluster: Cluster, pods: list[str]) -> None:
    """docs/upgrades.md, "Uninstalling": the pods keep their last verdict and stay in their Services."""
    import kubernetes

    helm("uninstall", RELEASE, "-n", SYSTEM_NAMESPACE, "--wait", "--timeout", "3m")
    assert lockstep_admission_leftovers(cluster.api) == []
    eventually(lambda: not cluster.core.list_namespaced_pod(SYSTEM_NAMESPACE, label_selector=OPERATOR_PODS).items,
               "the operator pods gone", timeout=120)
    rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.api)
    assert rbac.list_cluster_role(label_selector=OPERATOR_PODS).items == []
    time.sleep(SETTLE)  # nobody judges now: the conditions stay as last written
    assert serving(cluster, REPLICAS) == pods
    assert cluster.interface(APP)["metadata"]["name"] == APP, "crds.keep: the CRD and its objects stay"

    # A pod in the namespace still labelled lockstep.dev/inject=enabled is created and runs, untouched.
    cluster.core.create_namespaced_pod(cluster.namespace, {
        "metadata": {"name": "after-uninstall"},
        "spec": {"containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                                 "command": ["python", "-c", "import time; time.sleep(3600)"]}],
                 "terminationGracePeriodSeconds": 0}})
    pod = eventually(lambda: (p := cluster.core.read_namespaced_pod("after-uninstall", cluster.namespace))
                     .status.phase == "Running" and p, "a new pod to run without Lockstep", timeout=120)
    assert not pod.spec.init_containers and not pod.spec.readiness_gates


# ---------------------------------------------------------------------------------------------- the tier


def test_upgrade_rollback_upgrade_uninstall_with_pods_serving(cluster: Cluster, previous_chart: Path,
                                                              caller: list[InNode]) -> None:
    started, phases = time.monotonic(), Phases()
    phases.mark("install")
    start_at_the_previous_release(cluster, previous_chart)
    crd_uid = installed_crd(cluster.api).metadata.uid
    old = deploy_the_app(cluster)
    ip = cluster.core.read_namespaced_service(APP, cluster.namespace).spec.cluster_ip
    eventually(lambda: reachable(ip, 8080), "the Service's ClusterIP answering", interval=0.2)
    watch = ReadyWatch(cluster.api, cluster.namespace, APP)
    caller.append(InNode([sys.executable, "-c", CALLER, ip, "8080", str(CALL_TIMEOUT)]))
    eventually(lambda: sum(e.get("ok", False) for e in caller[0].entries) >= 5, "the client's first calls",
               timeout=60, interval=0.2)

    phases.mark("upgrade")
    upgrade_took = adopt_and_upgrade(cluster)
    phases.mark("rug pull")
    pulled = old[0]
    cut = rug_pull(cluster, pulled)
    phases.mark("restart")
    new = restart_with_the_breaking_change(cluster, old)
    phases.mark("rollback")
    rollback_to_the_previous_release(cluster, new)
    phases.mark("upgrade again")
    upgrade_again(cluster, new, crd_uid)
    phases.mark("uninstall")
    uninstall(cluster, new)

    calls = caller[0].stop()
    watch.stop()
    failed = [{**e, "phase": phases.of(e["t"])} for e in calls if not e.get("ok")]
    served_by = {e["by"] for e in calls if e.get("ok")}
    print(f"\nupgrade tier ({PREVIOUS} -> working tree): {time.monotonic() - started:.0f} s; upgrade "
          f"{upgrade_took:.1f} s; rug pull on the {PREVIOUS} sidecar cut from the Service in {cut:.2f} s; "
          f"{len(calls)} calls, {len(failed)} failed, served by {len(served_by)} pods; {phases.table(calls)}; "
          f"Ready transitions: {[(phases.of(t), pod, ready, deleting) for t, pod, ready, deleting in watch.changes]}")
    assert failed == [], f"{len(failed)} of {len(calls)} client calls failed: {failed[:5]}"
    assert served_by >= set(old[1:]) | set(new), f"not every serving pod was called: {served_by}"
    left = [(phases.of(t), pod) for t, pod in watch.left_ready(spared={pulled})]
    assert left == [], f"pods nobody pulled or deleted left Ready: {left}"
