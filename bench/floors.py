"""The floors under Lockstep's per-report costs on this machine, measured without Lockstep.

1. API server: the kube-apiserver + etcd CPU of one pods/status merge patch of the readiness-gate
   condition, the one write a verdict change needs, sent at 200/s with no operator running (the real
   control plane of KUBEBUILDER_ASSETS, kube-controller-manager included, as in bench/operator.py).
2. Report endpoint: the CPU of an aiohttp HTTPS server that reads a digest-only report's body, parses
   its JSON and answers a 202 JSON (nothing else), at 200 requests/s from another process.

bench/operator.py's "API CPU per verdict change" and "operator CPU per steady report" compare with
these: what Lockstep adds is the difference. Usage::

    KUBEBUILDER_ASSETS="$(../shared/envtest/install)" python bench/floors.py

``--api-variants`` measures instead, on one control plane, forms of the same verdict write (merge patch
with the full conditions list + the replay stamp + the resourceVersion guard, as Lockstep writes it
today; the same asking for a smaller answer; strategic merge; JSON patch with a ``test`` op; server-side
apply; ...) on pods shaped like Lockstep's (the webhook's sidecar, token volume and readiness gate, a
kubelet's status): each repetition writes every pod once per variant, in a rotated order, and checks
that every pod carries what was written. Printed per repetition and at the end: API CPU per write,
gross and net of the idle rate measured at the start of the repetition, and the ratio to variant a
of the same repetition (``--repetitions N``, ``--count PODS``, ``--only a,b``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from lockstep.demo.control_plane import assets_folder, start_control_plane
from lockstep_testing.kmock_support import make_tls_files

RATE = 200.0
COUNT = 1000
CONDITION = "lockstep.dev/interface-verified"
REPORT = json.dumps({
    "observedAt": "2026-11-25T10:00:00Z", "bootId": "c" * 32, "bootTime": "2026-11-25T09:00:00+00:00",
    "sequence": 5, "sentAt": "2026-11-25T10:00:00Z",
    "digest": {"digest": "sha256:" + "a" * 64, "formula": "lockstep-jcs-sha256-v1",
               "components": [{"kind": "tool", "name": f"tool-{i}", "digest": "sha256:" + "b" * 64}
                              for i in range(2)]}}).encode()


def process_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def open_loop(count: int, send: Any) -> float:
    """Send ``count`` requests at RATE/s; the seconds it took (with the last answers)."""
    began, tasks = time.perf_counter(), []
    for index in range(count):
        delay = began + index / RATE - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(index)))
    await asyncio.gather(*tasks)
    return time.perf_counter() - began


async def idle_rate(pids: list[int], seconds: float = 5.0) -> float:
    before, began = process_cpu(pids), time.perf_counter()
    await asyncio.sleep(seconds)
    return (process_cpu(pids) - before) / (time.perf_counter() - began)


async def api_floor() -> list[list[str]]:
    assets = assets_folder()
    if assets is None:
        raise SystemExit("needs KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager)")
    rows = []
    with tempfile.TemporaryDirectory() as folder, start_control_plane(Path(folder), assets) as plane:
        context = plane.ssl_context()
        context.load_cert_chain(str(plane.admin_cert), str(plane.admin_key))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=32)) as session:
            async def call(method: str, path: str, body: Any, content_type: str = "application/json") -> None:
                async with session.request(method, f"{plane.server}{path}", data=json.dumps(body),
                                           headers={"Content-Type": content_type}) as answer:
                    assert answer.status < 300, await answer.text()

            await call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": "floor"}})
            gate = asyncio.Semaphore(32)

            async def create(index: int) -> None:
                async with gate:
                    await call("POST", "/api/v1/namespaces/floor/pods", {
                        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{index}"},
                        "spec": {"containers": [{"name": "server", "image": "example.com/mcp:1"}],
                                 "readinessGates": [{"conditionType": CONDITION}]}})

            await asyncio.gather(*(create(index) for index in range(COUNT)))
            pids = [process.popen.pid for process in plane._processes[:2]]  # etcd, kube-apiserver
            await asyncio.sleep(3)
            idle = await idle_rate(pids)
            for status, reason in (("True", "Verified"), ("False", "InterfaceChanged")):
                async def patch(index: int, status: str = status, reason: str = reason) -> None:
                    await call("PATCH", f"/api/v1/namespaces/floor/pods/pod-{index}/status",
                               {"status": {"conditions": [{"type": CONDITION, "status": status, "reason": reason,
                                                           "message": "bench"}]}},
                               "application/merge-patch+json")

                before = process_cpu(pids)
                elapsed = await open_loop(COUNT, patch)
                await asyncio.sleep(1.5)
                used, window = process_cpu(pids) - before, elapsed + 1.5
                rows.append([f"pods/status PATCH to {status} (one verdict change's write)", f"{COUNT}",
                             f"{used / COUNT * 1000:.2f}", f"{(used - idle * window) / COUNT * 1000:.2f}"])
    return rows


# ---------------------------------------------------------------- --api-variants: forms of the same write

STAMP_ANNOTATION = "lockstep.dev/last-report"
BINDING = "lockstep.dev/interface"
JSON = "application/json"
PARTIAL = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
PROTOBUF = "application/vnd.kubernetes.protobuf"
SMP = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"
MESSAGE = ("the MCP server's interface matches approved revision sha256:" + "d" * 16
           + " (3 tools, 1 prompt, 0 resources)")


def lockstep_pod(index: int) -> dict[str, Any]:
    """A pod as Lockstep's webhook leaves it: an MCP server container, the injected sidecar (native
    sidecar, 14 env vars, the operator's CA), the projected token volume, labels, the readiness gate."""
    from lockstep.core.spec import Binding
    from lockstep.operator.injection import InjectionSettings, plan_injection

    ca = "-----BEGIN CERTIFICATE-----\n" + "\n".join(["M" * 64] * 17) + "\n-----END CERTIFICATE-----\n"
    settings = InjectionSettings(image="ghcr.io/lockstep/lockstep:0.9.0", operator_ca=ca,
                                 report_url="https://lockstep-operator.lockstep-system.svc:8443/v1/reports",
                                 resources={"requests": {"cpu": "10m", "memory": "32Mi"},
                                            "limits": {"memory": "64Mi"}})
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"pod-{index}", "labels": {"app": "weather-mcp", "pod-template-hash": "7c9d8f6b5d",
                                                        "app.kubernetes.io/part-of": "tools"},
                     "annotations": {BINDING: "weather"}},
        "spec": {"containers": [{
            "name": "server", "image": "example.com/weather-mcp:1.4.2",
            "ports": [{"name": "mcp", "containerPort": 8080, "protocol": "TCP"}],
            "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "MCP_BIND", "value": "127.0.0.1:8080"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}}]}}
    for op in plan_injection(pod, settings, Binding(interface="weather", port="mcp")):
        assert op["op"] == "add" and op["path"].count("/") == 2, op  # /spec/<list>: a fresh spec
        pod["spec"][op["path"].rsplit("/", 1)[1]] = op["value"]
    return pod


def kubelet_status(pod: dict[str, Any], now: str) -> dict[str, Any]:
    """The status a kubelet writes for a running pod whose readiness gate is not yet True."""
    def condition(kind: str, status: str = "True", reason: str | None = None) -> dict[str, Any]:
        return {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": now,
                **({"reason": reason} if reason else {})}

    def running(container: dict[str, Any], ready: bool) -> dict[str, Any]:
        return {"name": container["name"], "image": container["image"], "imageID": container["image"] + "@sha256:"
                + "e" * 64, "containerID": "containerd://" + "f" * 64, "ready": ready, "restartCount": 0,
                "started": True, "state": {"running": {"startedAt": now}}}

    return {"phase": "Running", "podIP": "10.244.1.17", "podIPs": [{"ip": "10.244.1.17"}],
            "hostIP": "172.18.0.3", "hostIPs": [{"ip": "172.18.0.3"}], "startTime": now,
            "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"),
                           condition("Ready", "False", "ReadinessGatesNotReady"), condition("ContainersReady"),
                           condition("PodScheduled"),
                           {"type": CONDITION, "status": "False", "reason": "Pending", "message": "no report yet",
                            "lastProbeTime": None, "lastTransitionTime": now}],
            "initContainerStatuses": [running(pod["spec"]["initContainers"][0], True)],
            "containerStatuses": [running(pod["spec"]["containers"][0], True)]}


class Variant:
    """One form of the verdict write: its patch type, Accept header, query and body."""

    def __init__(self, key: str, label: str, content_type: str, *, accept: str = JSON,
                 query: str = "", annotation: bool = True, guard: bool = True, full_list: bool = True) -> None:
        self.key, self.label, self.content_type, self.accept, self.query = key, label, content_type, accept, query
        self.annotation, self.guard, self.full_list = annotation, guard, full_list

    def body(self, pod: dict[str, Any], condition: dict[str, Any], stamp: str) -> Any:
        conditions = pod["conditions"]
        ours = next(i for i, c in enumerate(conditions) if c["type"] == CONDITION)
        if self.content_type == JSON_PATCH:
            ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion", "value": pod["rv"]}]
            ops.append({"op": "replace", "path": f"/status/conditions/{ours}", "value": condition})
            if self.annotation:
                ops.append({"op": "add", "path": "/metadata/annotations/" + STAMP_ANNOTATION.replace("/", "~1"),
                            "value": stamp})
            return ops
        listed = [*conditions[:ours], condition, *conditions[ours + 1:]] if self.full_list else [condition]
        patch: dict[str, Any] = {"status": {"conditions": listed}}
        if self.content_type == APPLY:  # server-side apply: a whole (partial) object, its identity included
            patch = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{pod['index']}",
                                                                     "namespace": "floor"}, **patch}
        metadata: dict[str, Any] = {}
        if self.annotation:
            metadata["annotations"] = {STAMP_ANNOTATION: stamp}
        if self.guard:
            metadata["resourceVersion"] = pod["rv"]
        if metadata:
            patch["metadata"] = {**patch.get("metadata", {}), **metadata}
        return patch


VARIANTS = [
    Variant("a", "merge, conditions+stamp+RV, JSON answer (today)", MERGE),
    Variant("b", "a, answer as PartialObjectMetadata (JSON)", MERGE, accept=PARTIAL),
    Variant("c", "a, answer in protobuf", MERGE, accept=PROTOBUF),
    Variant("b+c", "a, answer as PartialObjectMetadata (protobuf)", MERGE,
            accept=PROTOBUF + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"),
    Variant("d1", "strategic merge, our condition+stamp+RV", SMP, full_list=False),
    Variant("d2", "strategic merge, our condition only", SMP, full_list=False, annotation=False, guard=False),
    Variant("e", "JSON patch: test RV, replace our condition, add stamp", JSON_PATCH),
    Variant("f1", "a without the stamp annotation", MERGE, annotation=False),
    Variant("f2", "a with fieldManager=lockstep-operator", MERGE, query="?fieldManager=lockstep-operator"),
    Variant("g", "server-side apply: our condition+stamp+RV, force", APPLY, full_list=False,
            query="?fieldManager=lockstep-operator&force=true"),
]


async def api_variants(count: int, repetitions: int, only: list[str] | None) -> None:
    assets = assets_folder()
    if assets is None:
        raise SystemExit("needs KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager)")
    variants = [variant for variant in VARIANTS if only is None or variant.key in only]
    measured: dict[str, list[tuple[float, float]]] = {variant.key: [] for variant in variants}
    with tempfile.TemporaryDirectory() as folder, start_control_plane(Path(folder), assets) as plane:
        context = plane.ssl_context()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=32)) as session:
            async def call(method: str, path: str, body: Any = None, content_type: str = JSON,
                           accept: str = JSON) -> bytes:
                data = json.dumps(body, separators=(",", ":")) if body is not None else None
                async with session.request(method, f"{plane.server}{path}", data=data,
                                           headers={"Content-Type": content_type, "Accept": accept}) as answer:
                    text = await answer.read()
                    assert answer.status < 300, (answer.status, text[:400])
                    return text

            await call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": "floor"}})
            for _ in range(100):  # the service-account admission plugin needs the namespace's "default"
                try:
                    await call("GET", "/api/v1/namespaces/floor/serviceaccounts/default")
                    break
                except AssertionError:
                    await asyncio.sleep(0.2)
            gate = asyncio.Semaphore(16)
            pods: list[dict[str, Any]] = []

            async def create(index: int) -> None:
                async with gate:
                    created = json.loads(await call("POST", "/api/v1/namespaces/floor/pods", lockstep_pod(index)))
                    status = kubelet_status(created, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                    written = json.loads(await call("PATCH", f"/api/v1/namespaces/floor/pods/pod-{index}/status",
                                                    {"status": status}, MERGE))
                    pods.append({"index": index, "rv": written["metadata"]["resourceVersion"],
                                 "conditions": written["status"]["conditions"]})

            await asyncio.gather(*(create(index) for index in range(count)))
            pods.sort(key=lambda pod: pod["index"])
            sample = json.loads(await call("GET", "/api/v1/namespaces/floor/pods/pod-0"))
            print(f"{count} pods of {len(json.dumps(sample, separators=(',', ':')))} bytes (JSON) each; "
                  f"{len(sample['spec']['initContainers'][0]['env'])} sidecar env vars, "
                  f"{len(sample['status']['conditions'])} conditions", flush=True)
            await probe_answers(call, pods[0])
            pids = [process.popen.pid for process in plane._processes[:2]]  # etcd, kube-apiserver
            await asyncio.sleep(3)
            sequence, flip = 0, False
            for repetition in range(repetitions):
                idle = await idle_rate(pids, 4.0)
                order = variants[repetition % len(variants):] + variants[:repetition % len(variants)]
                for variant in order:
                    sequence, flip = sequence + 1, not flip
                    status, reason = ("True", "Verified") if flip else ("False", "InterfaceChanged")
                    moment = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    stamp = json.dumps({"bootId": "c" * 32, "bootTime": "2026-11-25T09:00:00+00:00",
                                        "sequence": sequence}, separators=(",", ":"))
                    condition = {"type": CONDITION, "status": status, "reason": reason, "message": MESSAGE,
                                 "lastProbeTime": None, "lastTransitionTime": moment}
                    bodies = [json.dumps(variant.body(pod, condition, stamp), separators=(",", ":"))
                              for pod in pods]

                    async def write(index: int, variant: Variant = variant, bodies: list[str] = bodies) -> None:
                        async with session.patch(f"{plane.server}/api/v1/namespaces/floor/pods/pod-{index}/status"
                                                 f"{variant.query}", data=bodies[index],
                                                 headers={"Content-Type": variant.content_type,
                                                          "Accept": variant.accept}) as answer:
                            text = await answer.read()
                            assert answer.status < 300, (variant.key, answer.status, text[:400])

                    before = process_cpu(pids)
                    elapsed = await open_loop(count, write)
                    await asyncio.sleep(1.5)
                    used, window = process_cpu(pids) - before, elapsed + 1.5
                    measured[variant.key].append((used / count * 1000, (used - idle * window) / count * 1000))
                    await check_pass(call, pods, variant, status, stamp)
                    await asyncio.sleep(0.5)
                print(f"repetition {repetition + 1}: idle {idle * 1000:.0f} ms CPU/s", flush=True)
                print_variants(variants, measured, count, only_last=True)
    print(f"\nall repetitions ({count} writes each, at {RATE:.0f}/s; API CPU = kube-apiserver + etcd)")
    print_variants(variants, measured, count, only_last=False)


async def probe_answers(call: Any, pod: dict[str, Any]) -> None:
    """What each Accept header gets back from a PATCH of pods/status (a no-op patch: nothing written)."""
    for variant in VARIANTS:
        if variant.key not in ("a", "b", "c", "b+c"):
            continue
        text = await call("PATCH", "/api/v1/namespaces/floor/pods/pod-0/status", {"metadata": {}}, MERGE,
                          variant.accept)
        if text[:4] == b"k8s\x00":
            described = "protobuf envelope"
        else:
            body = json.loads(text)
            described = f"kind {body.get('kind')}, keys {sorted(body)}"
        print(f"  PATCH answer for Accept {variant.accept}: {len(text)} bytes, {described}")
    stale = {**pod, "rv": "1"}  # another party wrote the pod since: the guard must refuse the write
    condition = {"type": CONDITION, "status": "True", "reason": "Verified", "message": MESSAGE,
                 "lastProbeTime": None, "lastTransitionTime": "2026-11-25T10:00:00Z"}
    for variant in VARIANTS:
        if not variant.guard:
            continue
        try:
            await call("PATCH", f"/api/v1/namespaces/floor/pods/pod-0/status{variant.query}",
                       variant.body(stale, condition, "{}"), variant.content_type, variant.accept)
            answered = "written (no guard!)"
        except AssertionError as refused:
            status, text = refused.args[0]
            answered = f"HTTP {status} {json.loads(text).get('reason') if text[:1] == b'{' else ''}"
        print(f"  variant {variant.key} with a stale resourceVersion: {answered}")


async def check_pass(call: Any, pods: list[dict[str, Any]], variant: Variant, status: str, stamp: str) -> None:
    """Every pod carries the written condition, the stamp (if the variant writes it) and all of the
    kubelet's conditions; remember each pod's resourceVersion and conditions for the next write."""
    listing = json.loads(await call("GET", "/api/v1/namespaces/floor/pods?labelSelector=app%3Dweather-mcp"))
    by_name = {item["metadata"]["name"]: item for item in listing["items"]}
    wrong = 0
    for pod in pods:
        item = by_name[f"pod-{pod['index']}"]
        conditions = item["status"]["conditions"]
        ours = [c for c in conditions if c["type"] == CONDITION]
        stamped = item["metadata"].get("annotations", {}).get(STAMP_ANNOTATION)
        if (len(conditions) != 6 or len(ours) != 1 or ours[0]["status"] != status
                or (variant.annotation and stamped != stamp)):
            wrong += 1
        pod["rv"], pod["conditions"] = item["metadata"]["resourceVersion"], conditions
    if wrong:
        raise SystemExit(f"variant {variant.key}: {wrong} pods do not carry what was written")


def print_variants(variants: list[Variant], measured: dict[str, list[tuple[float, float]]], count: int, *,
                   only_last: bool) -> None:
    header = ["variant", "", "writes", "gross ms", "net ms", "net / a"]
    rows = []
    runs = len(measured[variants[0].key])
    base = measured.get("a")
    for variant in variants:
        picks = range(runs - 1, runs) if only_last else range(runs)
        for run in picks:
            if run >= len(measured[variant.key]):
                continue
            gross, net = measured[variant.key][run]
            ratio = f"{net / base[run][1]:.2f}" if base and run < len(base) and base[run][1] > 0 else "-"
            rows.append([variant.key if only_last or run == 0 else "", variant.label if only_last or run == 0
                         else f"  (repetition {run + 1})", str(count), f"{gross:.2f}", f"{net:.2f}",
                         ratio])
        if not only_last and runs > 1:
            nets = sorted(net for _, net in measured[variant.key])
            ratios = sorted(net / base[run][1] for run, (_, net) in enumerate(measured[variant.key])) if base else []
            rows.append(["", "  median", "", f"{sorted(g for g, _ in measured[variant.key])[runs // 2]:.2f}",
                         f"{nets[runs // 2]:.2f}", f"{ratios[runs // 2]:.2f}" if ratios else "-"])
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) if column < 2 else cell.rjust(width)
                        for column, (cell, width) in enumerate(zip(row, widths))), flush=True)


def serve_reports(folder: str, port: int) -> None:
    async def handle(request: web.Request) -> web.Response:
        json.loads(await request.read())
        return web.json_response({"verdict": {"status": "True", "reason": "Verified", "message": ""},
                                  "digests": True}, status=202)

    app = web.Application()
    app.router.add_post("/v1/reports", handle)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(f"{folder}/tls.crt", f"{folder}/tls.key")
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=context, print=None, access_log=None)


async def http_floor(folder: str, port: int, pid: int) -> list[list[str]]:
    context = ssl.create_default_context(cafile=f"{folder}/tls.crt")
    idle = await idle_rate([pid], 3.0)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=128)) as session:
        async def post(index: int) -> None:
            async with session.post(f"https://127.0.0.1:{port}/v1/reports", data=REPORT,
                                    headers={"Authorization": "Bearer " + "x" * 900,
                                             "Content-Type": "application/json"}) as answer:
                await answer.read()

        before = process_cpu([pid])
        elapsed = await open_loop(2 * COUNT, post)
        used = process_cpu([pid]) - before
    return [["HTTPS POST of a digest-only report, JSON parsed, 202 JSON answered", f"{2 * COUNT}",
             f"{used / (2 * COUNT) * 1000:.3f}", f"{(used - idle * elapsed) / (2 * COUNT) * 1000:.3f}"]]


def _wait_listening(port: int, server: Any, timeout: float = 120.0) -> None:
    """Until the spawned HTTPS server takes connections (on a loaded machine importing aiohttp alone can
    take longer than a fixed wait), then a second more for it to settle before its idle rate is measured."""
    import socket

    deadline = time.monotonic() + timeout
    while True:
        if not server.is_alive():
            raise RuntimeError("the HTTPS floor's server exited")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--api-variants", action="store_true",
                        help="only compare forms of the verdict write (API CPU per write, interleaved)")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--count", type=int, default=COUNT, help="pods, and writes per variant and repetition")
    parser.add_argument("--only", help="comma-separated variant keys (a is the ratios' base)")
    arguments = parser.parse_args()
    if arguments.api_variants:
        asyncio.run(api_variants(arguments.count, arguments.repetitions,
                                 arguments.only.split(",") if arguments.only else None))
        return
    rows = asyncio.run(api_floor())
    folder = tempfile.mkdtemp()
    make_tls_files(Path(folder))
    port = 18999
    server = multiprocessing.get_context("spawn").Process(target=serve_reports, args=(folder, port))
    server.start()
    try:
        _wait_listening(port, server)
        assert server.pid is not None
        rows += asyncio.run(http_floor(folder, port, server.pid))
    finally:
        server.terminate()
    header = ["floor", "requests", "CPU ms each", "net of idle"]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    print(f"at {RATE:.0f} requests/s; CPU of kube-apiserver + etcd (first rows) or of the HTTPS server (last row)")
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) if not column else cell.rjust(width)
                        for column, (cell, width) in enumerate(zip(row, widths))))


if __name__ == "__main__":
    main()
