"""Lockstep's operator as a real process (``lockstep operator``), for fault injection: a process can be
frozen (SIGSTOP), continued, and killed (SIGKILL) the way a node, a GC pause or the OOM killer does it,
which an operator on a thread of the test cannot be. Installed as the chart installs it (lockstep_install.py:
the CRDs, the chart's ServiceAccount and RBAC, its webhooks pointed at loopback), running with a
kubeconfig that holds that ServiceAccount's token.

Sidecars reach it through :class:`ReportRelay`, the stand-in for the operator's Service: a TCP relay that
spreads connections over the running replicas, and that can drop every packet (a network partition between sidecars and operator). No pytest import.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lockstep.demo.control_plane import ControlPlane, ControlPlaneError, free_port
from lockstep_testing.lockstep_install import (
    RBAC_KINDS,
    RELEASE,
    SIDECAR_IMAGE,
    SYSTEM_NAMESPACE,
    api_path,
    apply,
    install_crds,
    loopback_webhooks,
    render_chart,
)
from lockstep_testing.loopback import Certificates, host_address, make_certificates
from lockstep_testing.timings import fast_timing_flags

__all__ = ["FIGURES", "OperatorProcess", "ProcessInstallation", "ReportRelay", "install_lockstep_processes"]

#: Figures of the fault tier (tests/faults), one row per fault, printed at the end of the run.
FIGURES: list[dict[str, object]] = []


@dataclass
class OperatorProcess:
    popen: subprocess.Popen[bytes]
    report_port: int
    metrics_port: int
    health_port: int
    log: Path
    ca_file: Path

    def freeze(self) -> None:
        os.kill(self.popen.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.popen.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGCONT)
            self.popen.kill()
            self.popen.wait(10)

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGCONT)
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def ready(self, timeout: float = 1.0) -> bool:
        """Its report endpoint's /readyz: synced (every replica serves, lockstep.operator.replicas.membership)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.report_port}/readyz", timeout=timeout,
                                        context=context) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def healthz(self, timeout: float = 2.0) -> int | None:
        """kopf's liveness endpoint, as the kubelet's liveness probe asks it (None: no answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=timeout) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except OSError:
            return None


@dataclass
class ProcessInstallation:
    plane: ControlPlane
    folder: Path
    certificates: Certificates
    kubeconfig: Path
    webhook_port: int
    relay_port: int
    peering: bool
    processes: list[OperatorProcess] = field(default_factory=list)

    @property
    def ca_file(self) -> Path:
        return self.folder / "ca.crt"

    def start_replica(self, *, webhooks: bool = False) -> OperatorProcess:
        """One more ``lockstep operator`` process (its own ports; the webhooks on the first only)."""
        report, metrics, health = free_port(), free_port(), free_port()
        log = self.folder / f"operator-{len(list(self.folder.glob('operator-*.log')))}.log"  # one per process
        argv = [sys.executable, "-m", "lockstep.cli", "operator",
                "--report-port", str(report), "--metrics-port", str(metrics), "--health-port", str(health),
                "--webhook-port", str(self.webhook_port if webhooks else 0),
                "--tls-cert", str(self.certificates.cert_file), "--tls-key", str(self.certificates.key_file),
                "--rate-per-pod", "50", "--rate-burst", "50", "--sidecar-image", SIDECAR_IMAGE,
                "--report-url", f"https://127.0.0.1:{self.relay_port}", "--operator-ca", str(self.ca_file),
                "--token-expiration", "900", "--own-namespace", SYSTEM_NAMESPACE, *fast_timing_flags()]
        if self.peering:  # and the address a standby relays reports to (the chart passes the pod IP)
            argv += ["--peering", RELEASE, "--advertise-address", host_address()]
        env = {key: value for key, value in os.environ.items() if not key.startswith("LOCKSTEP_")}
        env.update(KUBECONFIG=str(self.kubeconfig), PYTHONUNBUFFERED="1")
        with log.open("ab") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        process = OperatorProcess(popen, report, metrics, health, log, self.ca_file)
        self.processes.append(process)
        return process

    def wait_serving(self, process: OperatorProcess, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise ControlPlaneError(f"the operator exited with {process.popen.returncode}:\n{process.text()[-3000:]}")
            if process.ready():
                return
            time.sleep(0.2)
        raise ControlPlaneError(f"the operator did not serve in {timeout:.0f}s:\n{process.text()[-3000:]}")


@contextlib.asynccontextmanager
async def install_lockstep_processes(plane: ControlPlane, folder: Path, relay_port: int, *,
                                     peering: bool = False) -> AsyncIterator[ProcessInstallation]:
    """The chart's objects on ``plane`` and one operator process serving the webhooks; more replicas with
    :meth:`ProcessInstallation.start_replica`. Every process is stopped when the block exits."""
    folder.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(install_crds, plane)
    rendered = render_chart()
    apply(plane, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
    for body in rendered:
        if body["kind"] in RBAC_KINDS:
            apply(plane, body)
    [account] = [body["metadata"]["name"] for body in rendered if body["kind"] == "ServiceAccount"]
    certificates = make_certificates(folder)
    (folder / "ca.crt").write_text(certificates.ca_pem)
    token = plane.request_token(SYSTEM_NAMESPACE, account, seconds=3 * 3600)
    kubeconfig = folder / "operator.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "operator",
        "clusters": [{"name": "envtest", "cluster": {"server": plane.server, "certificate-authority": str(plane.ca_file)}}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "envtest", "user": "operator",
                                                       "namespace": SYSTEM_NAMESPACE}}]}))
    installation = ProcessInstallation(plane, folder, certificates, kubeconfig, free_port(), relay_port, peering)
    webhooks = [loopback_webhooks(body, installation.webhook_port, certificates.ca_pem) for body in rendered
                if body["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")]
    first = installation.start_replica(webhooks=True)
    try:
        await asyncio.to_thread(installation.wait_serving, first)
        for body in webhooks:
            apply(plane, body)
        yield installation
    finally:
        for body in webhooks:
            with contextlib.suppress(ControlPlaneError, OSError):
                await asyncio.to_thread(plane.call, "DELETE", api_path(body["kind"], name=body["metadata"]["name"]))
        for process in installation.processes:
            await asyncio.to_thread(process.stop)


class ReportRelay:
    """The operator's Service, on loopback: each new connection goes to the next running replica.
    ``partition()`` drops
    every byte both ways, on open connections and new ones, until ``heal()``: nothing is refused or
    reset, the sidecar's requests simply time out (a network partition, not a crash)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.backends: list[OperatorProcess] = []
        self.partitioned = False
        self._turn = 0
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> ReportRelay:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *_: object) -> None:
        for task in self._tasks:
            task.cancel()
        if self._server is not None:
            self._server.close()

    def partition(self) -> None:
        self.partitioned = True

    def heal(self) -> None:
        self.partitioned = False

    def reset(self) -> None:
        """Close every open connection (as a Service's endpoints changing would): the sidecars open new
        ones, which the round robin spreads over the replicas again."""
        for writer in list(self._open):
            writer.close()

    def _pick(self) -> OperatorProcess | None:
        """Round robin over the replicas that run, as the chart's Service does (it keeps every replica
        Ready on kopf's /healthz, and every replica serves: a report for a resource another replica owns
        is relayed to it). A killed
        replica leaves the endpoints at once (its container is gone)."""
        alive = [backend for backend in self.backends if backend.popen.poll() is None]
        if not alive:
            return None
        self._turn += 1
        return alive[self._turn % len(alive)]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = self._pick()
        if backend is None:
            writer.close()  # no ready endpoint: the Service refuses
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", backend.report_port)
        except OSError:
            writer.close()
            return
        dropped = self.partitioned  # a connection opened during a partition never gets through
        self._open.add(writer)
        try:
            await asyncio.gather(self._pipe(reader, upstream_writer, lambda: dropped or self.partitioned),
                                 self._pipe(upstream_reader, writer, lambda: dropped or self.partitioned),
                                 return_exceptions=True)
        finally:
            self._open.discard(writer)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, drop: Any) -> None:
        try:
            while data := await reader.read(65536):
                if drop():
                    continue  # lost on the wire
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()
