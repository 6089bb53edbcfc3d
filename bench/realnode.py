"""Lockstep on a real node: how fast a rug pull takes a pod out of its Service, what the sidecar adds to
pod start-up and deletion, and what the sidecar and the operator cost in memory.

    tools/realnode-e2e            # or: REALNODE_KEEP=1 tools/realnode-e2e, to leave the node up
    export KUBECONFIG=$HOME/.cache/realnode/run/kubeconfig
    .venv/bin/python bench/realnode.py --trials 10

Needs a cluster with Lockstep installed and its image loaded (the chart's, repository:appVersion, or
--image). The "through the ClusterIP" figure connects from the node's network namespace
(/run/netns/realnode, ../shared/realnode) and needs root; elsewhere (kind) it is left out.

What is measured, per trial, with the host's clock (pods share it on one node):
- rug pull -> EndpointSlice: the server (examples/weather_server.py) is sent SIGUSR1 inside its pod,
  which rewrites a tool and sends list_changed; until the pod's EndpointSlice entry turns not ready,
  seen by a watch.
- rug pull -> ClusterIP cut: until the first TCP connection to the pod's Service (one pod behind it, its
  targetPort the sidecar's in-line proxy, lockstep-mcp) is refused by kube-proxy's rules, probed every 5 ms
  from the node's network namespace.
- rug pull -> status: until the MCPServerInterface's status counts the pod drifted (what `kubectl get mcpi`
  and `lockstep approve` read), seen by a watch.
- create -> Ready: a pod of the e2e weather server created until its Ready condition is seen, with the
  sidecar (opted-in namespace, interface approved) and without it (plain namespace, a TCP readiness
  probe every second: "the app answers").
- deletion: the DELETE call until the watch sees the pod gone, with and without the sidecar.
- memory: the kubelet's summary API (workingSetBytes, what the OOM killer and `kubectl top` use) of
  every sidecar container and of the operator.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NETNS = Path("/run/netns/realnode")
BENCH_NS, PLAIN_NS = "lockstep-bench", "lockstep-bench-plain"
GROUP, VERSION, PLURAL = "lockstep.dev", "v1alpha1", "mcpserverinterfaces"

#: Run in the node's network namespace: wait for the first accepted connection, print "up", then print
#: the time of the first refused (or timed out) one and exit.
CUT_PROBE = """
import socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
def accepted():
    try:
        socket.create_connection((host, port), timeout=0.2).close()
        return True
    except OSError:
        return False
deadline = time.time() + 60
while not accepted():
    if time.time() > deadline: print("never-up", flush=True); sys.exit(1)
    time.sleep(0.05)
print("up", flush=True)
while accepted():
    time.sleep(0.005)
print(time.time(), flush=True)
"""


def chart_image() -> str:
    """The image the chart installs: values.yaml's image.repository and Chart.yaml's appVersion."""
    import yaml

    chart = yaml.safe_load((REPO / "charts" / "lockstep" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "charts" / "lockstep" / "values.yaml").read_text())
    return f"{values['image']['repository']}:{chart['appVersion']}"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


class Bench:
    def __init__(self, image: str) -> None:
        import kubernetes

        kubernetes.config.load_kube_config()
        self.k8s = kubernetes
        self.core = kubernetes.client.CoreV1Api()
        self.custom = kubernetes.client.CustomObjectsApi()
        self.discovery = kubernetes.client.DiscoveryV1Api()
        self.image = image

    # ------------------------------------------------------------------ set-up

    def setup(self) -> None:
        for name, labels in ((BENCH_NS, {"lockstep.dev/inject": "enabled"}), (PLAIN_NS, {})):
            with contextlib.suppress(self.k8s.client.ApiException):
                self.core.create_namespace({"metadata": {"name": name, "labels": labels}})
        for namespace in (BENCH_NS, PLAIN_NS):
            self._configmap(namespace, "weather-example", REPO / "examples" / "weather_server.py")
            self._configmap(namespace, "weather-e2e", REPO / "tests" / "e2e" / "weather_mcp_server.py")
        for name, selector in (("rug", "rug"), ("start", "start")):
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MCPServerInterface", "metadata": {"name": name},
                    "spec": {"selector": {"matchLabels": {"bench": selector}}, "approval": "FirstSeen",
                             "endpoint": {"port": 8080, "path": "/mcp"},
                             "probe": {"interval": "60s", "timeout": "5s", "staleAfter": "180s"}}}
            with contextlib.suppress(self.k8s.client.ApiException):
                self.custom.create_namespaced_custom_object(GROUP, VERSION, BENCH_NS, PLURAL, body)

    def teardown(self) -> None:
        for namespace in (BENCH_NS, PLAIN_NS):
            with contextlib.suppress(self.k8s.client.ApiException):
                self.core.delete_namespace(namespace)

    def _configmap(self, namespace: str, name: str, source: Path) -> None:
        with contextlib.suppress(self.k8s.client.ApiException):
            self.core.create_namespaced_config_map(namespace, {"metadata": {"name": name},
                                                               "data": {"server.py": source.read_text()}})

    def pod(self, namespace: str, name: str, labels: dict[str, str], *, example: bool,
            readiness: bool = False) -> dict[str, Any]:
        # With the sidecar (enforcement Isolate) the server listens on 127.0.0.1 and agents reach it through the
        # sidecar's in-line proxy (lockstep-mcp); without it, on every address, with a TCP readiness probe.
        host = "0.0.0.0" if readiness else "127.0.0.1"
        command = (["python", "/app/server.py", "--host", host, "--port", "8080"] if example
                   else ["python", "/app/server.py"])
        container: dict[str, Any] = {
            "name": "mcp", "image": self.image, "imagePullPolicy": "IfNotPresent", "command": command,
            "env": [{"name": "HOST", "value": host}], "ports": [{"name": "mcp", "containerPort": 8080}],
            "volumeMounts": [{"name": "app", "mountPath": "/app"}]}
        if readiness:
            container["readinessProbe"] = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
        configmap = "weather-example" if example else "weather-e2e"
        return {"metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 30,
                         "volumes": [{"name": "app", "configMap": {"name": configmap}}]}}

    # ------------------------------------------------------------------ watches

    def wait_ready(self, namespace: str, name: str, timeout: float = 120) -> float:
        """Host time at which the watch sees the pod Ready."""
        watch = self.k8s.watch.Watch()
        for event in watch.stream(self.core.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}",
                                  timeout_seconds=int(timeout)):
            pod = event["object"]
            if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []):
                watch.stop()
                return time.time()
        raise TimeoutError(f"pod {namespace}/{name} not Ready within {timeout:.0f}s")

    def delete_and_wait(self, namespace: str, name: str, timeout: float = 120) -> float:
        """Seconds from the DELETE call until the watch sees the pod gone."""
        watch = self.k8s.watch.Watch()
        stream = watch.stream(self.core.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}",
                              timeout_seconds=int(timeout))
        started = time.time()
        self.core.delete_namespaced_pod(name, namespace)
        for event in stream:
            if event["type"] == "DELETED":
                watch.stop()
                return time.time() - started
        raise TimeoutError(f"pod {namespace}/{name} not gone within {timeout:.0f}s")

    def endpoint_not_ready(self, service: str, out: dict[str, float], armed: threading.Event) -> None:
        watch = self.k8s.watch.Watch()
        for event in watch.stream(self.discovery.list_namespaced_endpoint_slice, BENCH_NS,
                                  label_selector=f"kubernetes.io/service-name={service}", timeout_seconds=90):
            endpoints = event["object"].endpoints or []
            ready = any(e.conditions is not None and e.conditions.ready for e in endpoints)
            if armed.is_set() and not ready:
                out["endpointslice"] = time.time()
                watch.stop()
                return

    def status_drifted(self, out: dict[str, float], armed: threading.Event) -> None:
        """When the resource's status first counts a drifted pod (what `kubectl get mcpi` and `lockstep approve`
        read), after the pull."""
        watch = self.k8s.watch.Watch()
        for event in watch.stream(self.custom.list_namespaced_custom_object, GROUP, VERSION, BENCH_NS, PLURAL,
                                  field_selector="metadata.name=rug", timeout_seconds=90):
            pods = ((event["object"].get("status") or {}).get("pods") or {})
            if armed.is_set() and pods.get("drifted", 0) >= 1:
                out["status"] = time.time()
                watch.stop()
                return

    # ------------------------------------------------------------------ phases

    def rug_pull(self, trial: int) -> dict[str, float]:
        name = f"rug-{trial}"
        self.core.create_namespaced_service(BENCH_NS, {"metadata": {"name": name}, "spec": {
            "selector": {"trial": name}, "ports": [{"port": 8080, "targetPort": "lockstep-mcp"}]}})
        self.core.create_namespaced_pod(BENCH_NS, self.pod(BENCH_NS, name, {"bench": "rug", "trial": name},
                                                           example=True))
        self.wait_ready(BENCH_NS, name)
        cluster_ip = self.core.read_namespaced_service(name, BENCH_NS).spec.cluster_ip
        times: dict[str, float] = {}
        armed = threading.Event()
        watcher = threading.Thread(target=self.endpoint_not_ready, args=(name, times, armed), daemon=True)
        watcher.start()
        status_watcher = threading.Thread(target=self.status_drifted, args=(times, armed), daemon=True)
        status_watcher.start()
        cut = None
        if NETNS.exists() and shutil.which("nsenter"):
            cut = subprocess.Popen(["nsenter", f"--net={NETNS}", sys.executable, "-c", CUT_PROBE, cluster_ip, "8080"],
                                   stdout=subprocess.PIPE, text=True)
            assert cut.stdout is not None
            if cut.stdout.readline().strip() != "up":
                raise RuntimeError(f"the ClusterIP {cluster_ip} of {name} never accepted a connection")
        time.sleep(1.0)  # the watch has listed the slice
        armed.set()
        from kubernetes.stream import stream
        output = stream(self.core.connect_get_namespaced_pod_exec, name, BENCH_NS, container="mcp",
                        command=["python", "-c", "import os, signal, time; t = time.time(); "
                                 "os.kill(1, signal.SIGUSR1); print(t)"],
                        stderr=True, stdin=False, stdout=True, tty=False)
        pulled = float(str(output).strip().splitlines()[-1])
        watcher.join(timeout=60)
        status_watcher.join(timeout=60)
        result = {key: times[key] - pulled for key in ("endpointslice", "status") if key in times}
        if cut is not None:
            with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
                line, _ = cut.communicate(timeout=60)
                result["clusterip"] = float(line.strip().splitlines()[-1]) - pulled
            cut.kill()
        self.core.delete_namespaced_service(name, BENCH_NS)
        self.core.delete_namespaced_pod(name, BENCH_NS, grace_period_seconds=0)
        return result

    def start_and_delete(self, trial: int, with_sidecar: bool, example: bool) -> tuple[float, float]:
        namespace = BENCH_NS if with_sidecar else PLAIN_NS
        name = f"start-{trial}"
        body = self.pod(namespace, name, {"bench": "start"}, example=example, readiness=not with_sidecar)
        created = time.time()
        self.core.create_namespaced_pod(namespace, body)
        ready = self.wait_ready(namespace, name) - created
        time.sleep(2.0)  # the sidecar holds its session open, as it does in steady state
        return ready, self.delete_and_wait(namespace, name)

    def memory(self) -> dict[str, list[float]]:
        """workingSetBytes (MiB) of every lockstep-sidecar container and of the operator containers."""
        node = self.core.list_node().items[0].metadata.name
        summary = json.loads(self.core.connect_get_node_proxy_with_path(node, "stats/summary",
                                                                        _preload_content=False).data)
        found: dict[str, list[float]] = {"sidecar": [], "operator": []}
        for pod in summary.get("pods", []):
            for container in pod.get("containers", []):
                working_set = (container.get("memory") or {}).get("workingSetBytes")
                if working_set is None:
                    continue
                if container["name"] == "lockstep-sidecar":
                    found["sidecar"].append(working_set / 2**20)
                elif container["name"] == "operator" and pod["podRef"]["namespace"] == "lockstep-system":
                    found["operator"].append(working_set / 2**20)
        return found


def row(name: str, values: list[float], unit: str, goal: str) -> str:
    if not values:
        return f"| {name} | 0 | - | - | - | {goal} |"
    return (f"| {name} | {len(values)} | {statistics.median(values):.2f} {unit} | {percentile(values, 0.95):.2f} {unit}"
            f" | {max(values):.2f} {unit} | {goal} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--image", default=os.environ.get("LOCKSTEP_E2E_IMAGE", chart_image()))
    parser.add_argument("--keep", action="store_true", help="leave the bench namespaces behind")
    parser.add_argument("--start-server", choices=("e2e", "example"), default="example",
                        help="server of the start/delete pods: examples/weather_server.py announces listChanged, "
                             "so the sidecar holds a stream open (what held pod deletion); tests/e2e's does not")
    args = parser.parse_args(argv)
    if not os.environ.get("KUBECONFIG"):
        print("bench/realnode.py: set KUBECONFIG to a cluster with Lockstep installed (see the docstring)",
              file=sys.stderr)
        return 2
    bench = Bench(args.image)
    bench.setup()
    endpointslice, clusterip, status_lag, ready = [], [], [], {True: [], False: []}
    deletion: dict[bool, list[float]] = {True: [], False: []}
    memory: dict[str, list[float]] = {}
    try:
        for trial in range(args.trials):
            result = bench.rug_pull(trial)
            endpointslice += [result["endpointslice"]] if "endpointslice" in result else []
            clusterip += [result["clusterip"]] if "clusterip" in result else []
            status_lag += [result["status"]] if "status" in result else []
            print(f"rug pull {trial}: {result}", file=sys.stderr)
        for trial in range(args.trials):
            for with_sidecar in (True, False):
                up, down = bench.start_and_delete(trial, with_sidecar, args.start_server == "example")
                ready[with_sidecar].append(up)
                deletion[with_sidecar].append(down)
                print(f"pod {trial} sidecar={with_sidecar}: Ready {up:.2f}s, gone {down:.2f}s", file=sys.stderr)
        # memory with one verified, probed pod running
        steady = bench.pod(BENCH_NS, "steady", {"bench": "start"}, example=args.start_server == "example")
        bench.core.create_namespaced_pod(BENCH_NS, steady)
        bench.wait_ready(BENCH_NS, "steady")
        time.sleep(15)
        memory = bench.memory()
    finally:
        if not args.keep:
            bench.teardown()
    added = [a - b for a, b in zip(deletion[True], deletion[False], strict=True)]
    print(f"Lockstep on a real node, {args.trials} trials (host clock; p95 of {args.trials} is the 2nd-largest)\n")
    print("| figure | n | p50 | p95 | max | goal |\n| --- | --- | --- | --- | --- | --- |")
    print(row("rug pull -> EndpointSlice not ready", endpointslice, "s", "p95 < 1 s"))
    print(row("rug pull -> ClusterIP refuses", clusterip, "s", "p95 < 1 s"))
    print(row("rug pull -> the resource's status counts it drifted", status_lag, "s", "< 1 s"))
    print(row("create -> Ready, with the sidecar", ready[True], "s", ""))
    print(row("create -> Ready, without (TCP readiness probe, 1 s)", ready[False], "s", ""))
    print(row("delete -> gone, with the sidecar", deletion[True], "s", ""))
    print(row("delete -> gone, without", deletion[False], "s", ""))
    print(row("deletion: with minus without (same trial)", added, "s", "within 1 s"))
    print(row("sidecar memory (working set)", memory.get("sidecar", []), "MiB", "< 60 MB"))
    print(row("operator memory (working set)", memory.get("operator", []), "MiB", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
