"""A real Kubernetes control plane on loopback for tests, benches and the demo: etcd, kube-apiserver and
kube-controller-manager from ``KUBEBUILDER_ASSETS`` (the envtest layout: ``setup-envtest use 1.36 -p path``
gives the same folder), with a throwaway PKI made here. No kubelet, scheduler or runtime: see kubelet.py.

    with start_control_plane(tmp_path, assets_folder()) as plane:
        api = plane.api_client()                      # system:masters
        token = plane.request_token("agents", "default", audience="lockstep.dev", pod=("p", uid))

Flags and the facts behind them: ../shared/envtest/README.md. Part of the product (``lockstep demo --backend
real``) that the tests also use; it needs the ``demo`` extra (cryptography) and no test support.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["BINARIES", "SKIP_REASON", "ControlPlane", "ControlPlaneError", "assets_folder", "start_control_plane"]

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
SKIP_REASON = ("needs a real control plane: set KUBEBUILDER_ASSETS to a folder with etcd, kube-apiserver and "
               "kube-controller-manager (export KUBEBUILDER_ASSETS=\"$(../shared/envtest/install)\", or "
               "setup-envtest use 1.36 -p path)")
SERVICE_CIDR = "10.0.0.0/24"
READY_TIMEOUT = 60.0
#: Every controller but those that need a cloud, node IPAM, volumes or bootstrap tokens.
CONTROLLERS = ("*,-nodeipam,-nodelifecycle,-persistentvolume-binder,-attachdetach,-ttl,-bootstrapsigner,"
               "-tokencleaner,-cloud-node-lifecycle")


class ControlPlaneError(RuntimeError):
    """A control-plane process did not start or died; the message carries the tail of its log."""


def assets_folder() -> Path | None:
    """The folder named by KUBEBUILDER_ASSETS if it holds every binary, else None."""
    value = os.environ.get("KUBEBUILDER_ASSETS")
    if not value:
        return None
    folder = Path(value)
    return folder if all((folder / name).is_file() for name in BINARIES) else None


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- PKI


@dataclass(frozen=True)
class _Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, name: str) -> _Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (_builder(subject, subject, key.public_key())
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    def issue(self, common_name: str, *, organization: str | None = None,
              server: bool = False) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organization:
            attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (_builder(x509.Name(attributes), self.cert.subject, key.public_key())
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("10.0.0.1"))]), critical=False)
        return key, builder.sign(self.key, hashes.SHA256())


def _builder(subject: x509.Name, issuer: x509.Name, public_key: Any) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2)))


def _pem_key(key: Any) -> bytes:
    return bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class _Pki:
    ca_file: Path
    serving: tuple[Path, Path]
    admin: tuple[Path, Path]
    controller_manager: tuple[Path, Path]
    sa_private: Path
    sa_public: Path


def _write_pki(folder: Path) -> _Pki:
    folder.mkdir(parents=True, exist_ok=True)
    authority = _Authority.create("lockstep-envtest-ca")
    ca_file = folder / "ca.crt"
    ca_file.write_bytes(_pem_cert(authority.cert))

    def pair(stem: str, issued: tuple[Any, x509.Certificate]) -> tuple[Path, Path]:
        cert, key = folder / f"{stem}.crt", folder / f"{stem}.key"
        cert.write_bytes(_pem_cert(issued[1]))
        key.write_bytes(_pem_key(issued[0]))
        return cert, key

    # TokenRequest and TokenReview sign and verify service-account tokens with an RSA pair.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_private, sa_public = folder / "sa.key", folder / "sa.pub"
    sa_private.write_bytes(_pem_key(sa_key))
    sa_public.write_bytes(sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))
    return _Pki(
        ca_file=ca_file,
        serving=pair("apiserver", authority.issue("kube-apiserver", server=True)),
        # O=system:masters is the admin group the RBAC authorizer always allows.
        admin=pair("admin", authority.issue("lockstep-envtest-admin", organization="system:masters")),
        controller_manager=pair("controller-manager", authority.issue("system:kube-controller-manager")),
        sa_private=sa_private, sa_public=sa_public)


def _kubeconfig(path: Path, server: str, ca_file: Path, cert: Path, key: Path) -> Path:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "envtest",
        "clusters": [{"name": "envtest", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "envtest", "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "envtest",
                                                      "namespace": "default"}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


# ---------------------------------------------------------------- processes


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    argv: list[str] = field(default_factory=list)
    folder: Path | None = None
    #: Where it says it is healthy, and the TLS context to ask with (fault injection restarts it).
    health_url: str | None = None
    health_context: ssl.SSLContext | None = None

    def tail(self, lines: int = 25) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise ControlPlaneError(f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def _spawn(name: str, argv: list[str], folder: Path) -> _Process:
    log = folder / f"{name}.log"
    with log.open("ab") as out:
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    return _Process(name, popen, log, list(argv), folder)


def _wait_healthy(process: _Process, url: str, context: ssl.SSLContext | None, timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        process.check_alive()
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as error:
            last = str(error)
        time.sleep(0.2)
    raise ControlPlaneError(f"{process.name} not healthy at {url} after {timeout:.0f}s ({last}):\n{process.tail()}")


# ---------------------------------------------------------------- the control plane


@dataclass
class ControlPlane:
    server: str
    ca_file: Path
    kubeconfig: Path
    folder: Path
    admin_cert: Path
    admin_key: Path
    _processes: list[_Process] = field(default_factory=list, repr=False)

    def ssl_context(self) -> ssl.SSLContext:
        """Trusts the API server and presents the admin client certificate."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.admin_cert), str(self.admin_key))
        return context

    def api_client(self, token: str | None = None) -> Any:
        """A ``kubernetes`` client: system:masters, or the identity of a bearer ``token``."""
        import kubernetes

        configuration = kubernetes.client.Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = str(self.ca_file)
        if token is None:
            configuration.cert_file, configuration.key_file = str(self.admin_cert), str(self.admin_key)
        else:
            configuration.api_key = {"authorization": f"Bearer {token}"}
        return kubernetes.client.ApiClient(configuration)

    def kopf_connection(self, token: str | None = None) -> Any:
        import kopf

        if token is None:
            return kopf.ConnectionInfo(server=self.server, ca_path=str(self.ca_file),
                                       certificate_path=str(self.admin_cert), private_key_path=str(self.admin_key),
                                       default_namespace="default")
        return kopf.ConnectionInfo(server=self.server, ca_path=str(self.ca_file), scheme="Bearer", token=token,
                                   default_namespace="default")

    def request_token(self, namespace: str, service_account: str, *, audience: str | None = None,
                      pod: tuple[str, str] | None = None, seconds: int = 3600) -> str:
        """A token from the TokenRequest API, optionally bound to a pod (name, uid) as the kubelet asks
        for projected service-account tokens."""
        body: dict[str, Any] = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                "spec": {"expirationSeconds": seconds}}
        if audience:
            body["spec"]["audiences"] = [audience]
        if pod:
            body["spec"]["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod[0], "uid": pod[1]}
        answer = self.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token", body)
        return str(answer["status"]["token"])

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        """One admin request with the standard library (no client generation quirks)."""
        import json

        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method,
                                         headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, context=self.ssl_context(), timeout=30) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            raise ControlPlaneError(f"{method} {path}: HTTP {error.code}: {error.read()[:500]!r}") from None
        return json.loads(text) if text else None

    def check_alive(self) -> None:
        for process in self._processes:
            process.check_alive()

    # ------------------------------------------------------------ fault injection (tests/faults)
    def process(self, name: str) -> _Process:
        """The running process ``etcd``, ``kube-apiserver`` or ``kube-controller-manager``."""
        [found] = [process for process in self._processes if process.name == name]
        return found

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash or an OOM kill would; reaped at once."""
        process = self.process(name)
        if process.popen.poll() is None:
            process.popen.kill()
            process.popen.wait(10)

    def restart(self, name: str, *, wait: bool = True) -> None:
        """Start a killed process again with the same flags, ports and data (a restart by its supervisor);
        with ``wait``, until it says it is healthy."""
        process = self.process(name)
        if process.popen.poll() is None:
            raise ControlPlaneError(f"{name} is still running")
        assert process.folder is not None
        fresh = _spawn(name, process.argv, process.folder)
        fresh.health_url, fresh.health_context = process.health_url, process.health_context
        self._processes[self._processes.index(process)] = fresh
        if wait and fresh.health_url:
            _wait_healthy(fresh, fresh.health_url, fresh.health_context)

    def freeze(self, name: str) -> None:
        """SIGSTOP: the process holds its sockets and answers nothing (a hung process, a paused VM)."""
        os.kill(self.process(name).popen.pid, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        os.kill(self.process(name).popen.pid, signal.SIGCONT)

    def wait_healthy(self, name: str, timeout: float = READY_TIMEOUT) -> None:
        process = self.process(name)
        if process.health_url:
            _wait_healthy(process, process.health_url, process.health_context, timeout)

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()


@contextlib.contextmanager
def start_control_plane(folder: Path, assets: Path) -> Iterator[ControlPlane]:
    """Start etcd, kube-apiserver and kube-controller-manager; stop and reap them when the block exits."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = _write_pki(folder / "pki")
    plane: ControlPlane | None = None
    processes: list[_Process] = []
    try:
        etcd_url = _start_etcd(folder, assets, processes)
        api_port = free_port()
        server = f"https://127.0.0.1:{api_port}"
        processes.append(_spawn("kube-apiserver", _apiserver_argv(assets, pki, etcd_url, api_port, folder), folder))
        context = ssl.create_default_context(cafile=str(pki.ca_file))
        context.load_cert_chain(str(pki.admin[0]), str(pki.admin[1]))
        processes[-1].health_url, processes[-1].health_context = f"{server}/readyz", context
        _wait_healthy(processes[-1], f"{server}/readyz", context)
        kubeconfig = _kubeconfig(folder / "admin.kubeconfig", server, pki.ca_file, *pki.admin)
        cm_kubeconfig = _kubeconfig(folder / "controller-manager.kubeconfig", server, pki.ca_file,
                                    *pki.controller_manager)
        cm_port = free_port()
        processes.append(_spawn("kube-controller-manager", [
            str(assets / "kube-controller-manager"), f"--kubeconfig={cm_kubeconfig}",
            f"--authentication-kubeconfig={cm_kubeconfig}", f"--authorization-kubeconfig={cm_kubeconfig}",
            f"--service-account-private-key-file={pki.sa_private}", f"--root-ca-file={pki.ca_file}",
            # Without per-controller credentials the namespace controller lacks rights.
            "--use-service-account-credentials=true", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={cm_port}", f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--controllers={CONTROLLERS}",
        ], folder))
        plane = ControlPlane(server, pki.ca_file, kubeconfig, folder, pki.admin[0], pki.admin[1], processes)
        _wait_default_service_account(plane)
        yield plane
    finally:
        for process in reversed(processes):
            process.stop()


def _start_etcd(folder: Path, assets: Path, processes: list[_Process]) -> str:
    client, peer = free_port(), free_port()
    client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    processes.append(_spawn("etcd", [
        str(assets / "etcd"), f"--data-dir={folder / 'etcd'}", "--name=envtest",
        f"--listen-client-urls={client_url}", f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=envtest={peer_url}", "--initial-cluster-state=new", "--log-level=warn",
    ], folder))
    processes[-1].health_url = f"{client_url}/health"
    _wait_healthy(processes[-1], f"{client_url}/health", None)
    return client_url


def _apiserver_argv(assets: Path, pki: _Pki, etcd_url: str, port: int, folder: Path) -> list[str]:
    return [
        str(assets / "kube-apiserver"), f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
        # The default lease reconciler refuses a loopback advertise address.
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={pki.serving[0]}", f"--tls-private-key-file={pki.serving[1]}",
        f"--client-ca-file={pki.ca_file}",
        f"--service-account-issuer=https://127.0.0.1:{port}", f"--service-account-key-file={pki.sa_public}",
        f"--service-account-signing-key-file={pki.sa_private}", f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC", "--allow-privileged=true",
        f"--cert-dir={folder / 'apiserver-certs'}",
    ]


def _wait_default_service_account(plane: ControlPlane, timeout: float = READY_TIMEOUT) -> None:
    """The controller-manager is ready for tests once it has made the ``default`` ServiceAccount."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        plane.check_alive()
        with contextlib.suppress(ControlPlaneError):
            plane.call("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            return
        time.sleep(0.3)
    raise ControlPlaneError(f"kube-controller-manager made no default ServiceAccount in {timeout:.0f}s")
