"""ServerExposed from the pod's own socket tables (security review 2, S6-4 and S6-10): every socket of the network
namespace that a peer off the pod can reach and that is not the sidecar's is reported, at once and for good.

The netns tests run the real check in a new network namespace (``unshare -n``, root) standing in for the pod: the
"application" is another process holding the sockets, the "sidecar" is the checking process with its own proxy
and health listeners on the wildcard addresses (which must not count)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from lockstep.sidecar.exposure import Exposure, ExposureWatch
from lockstep.sidecar.prober import Prober

from lockstep.core import Interface
from lockstep.core.report import Observation
from lockstep.core.socket_tables import exposed_sockets

REPO = Path(__file__).resolve().parents[2]
POD4, POD6, PEER4 = "10.88.1.7", "fd00:88::7", "10.88.1.9"
HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def _hex4(address: str) -> str:
    return int.from_bytes(socket.inet_aton(address), sys.byteorder).to_bytes(4, "big").hex().upper()


def _line(local: str, port: int, state: str, inode: int, remote: str = "0.0.0.0", remote_port: int = 0) -> str:
    return (f"   0: {_hex4(local)}:{port:04X} {_hex4(remote)}:{remote_port:04X} {state} 00000000:00000000 00:00000000 "
            f"00000000     0        0 {inode} 1 0000000000000000 100 0 0 10 0\n")


def test_the_parser_flags_listeners_and_unconnected_udp_off_loopback_and_every_raw_and_packet_socket() -> None:
    tables = {
        "tcp": HEADER + _line("127.0.0.1", 8080, "0A", 11) + _line("0.0.0.0", 9000, "0A", 12)
        + _line(POD4, 8080, "0A", 13) + _line(POD4, 41000, "01", 14, "10.0.0.1", 443) + _line("0.0.0.0", 8090, "0A", 15),
        "udp": HEADER + _line("0.0.0.0", 5353, "07", 21) + _line(POD4, 40000, "01", 22, "10.96.0.10", 53),
        "raw": HEADER + _line("127.0.0.1", 255, "07", 31),
        "packet": "sk       RefCnt Type Proto  Iface R Rmem   User   Inode\nffff 3 3 0003 0 1 0 0 41\n",
        "sctp/eps": " ENDPT     SOCK   STY SST HBKT LPORT   UID INODE LADDRS\n"
                    "ffff8880 ffff8881 2   10  31   7777      0 51 10.88.1.7 127.0.0.1\n",
    }
    found = [socket.describe() for socket in exposed_sockets(tables, own={15})]
    assert found == ["tcp 0.0.0.0:9000", f"tcp {POD4}:8080", "udp 0.0.0.0:5353", "raw 127.0.0.1:255", "packet",
                     "sctp"]


def _fake_proc(tmp_path: Path, tcp_lines: str, own: tuple[int, ...]) -> Path:
    (tmp_path / "net").mkdir(exist_ok=True)
    (tmp_path / "net" / "tcp").write_text(HEADER + tcp_lines)
    fds = tmp_path / "self" / "fd"
    fds.mkdir(parents=True, exist_ok=True)
    for index, inode in enumerate(own):
        link = fds / str(index)
        if not link.is_symlink():
            link.symlink_to(f"socket:[{inode}]")
    return tmp_path


def test_a_new_socket_is_reported_at_once_with_the_last_observation_and_stays_reported(tmp_path: Path) -> None:
    submitted: list[Observation] = []
    settings = SimpleNamespace(pod_ip=POD4, mcp_url="http://127.0.0.1:8080/mcp")
    proc = _fake_proc(tmp_path, _line("0.0.0.0", 8090, "0A", 5), own=(5,))
    prober = Prober(settings, submitted.append, None, proc=proc)  # type: ignore[arg-type]
    assert prober.exposure is not None
    prober.exposure.check()
    observed = Observation.of_interface(Interface.from_document({"tools": []}), "2026-11-29T08:00:00Z")
    prober._report(observed)
    assert submitted[-1].server_exposed is False

    _fake_proc(tmp_path, _line("0.0.0.0", 8090, "0A", 5) + _line("0.0.0.0", 8081, "0A", 6), own=(5,))
    prober.exposure.check()  # one tick of the watch: no probe needed
    assert len(submitted) == 2
    assert (submitted[-1].server_exposed, submitted[-1].exposed_at) == (True, "0.0.0.0:8081")
    assert submitted[-1].digest == observed.digest

    _fake_proc(tmp_path, _line("0.0.0.0", 8090, "0A", 5), own=(5,))  # the listener blinks off
    assert prober.exposure.check() == Exposure(True, ("tcp 0.0.0.0:8081",))
    prober._report(observed)  # the next probe carries it too
    assert submitted[-1].exposed_sockets == ("tcp 0.0.0.0:8081",)
    assert Observation.from_dict(submitted[-1].to_dict()).exposed_sockets == ("tcp 0.0.0.0:8081",)


def test_no_readable_table_is_not_checked_rather_than_clean(tmp_path: Path) -> None:
    changes: list[Exposure] = []
    assert ExposureWatch(changes.append, proc=tmp_path).check().exposed is None
    assert changes == []


# ------------------------------------------------------------------ in a network namespace

APP = r"""
import socket, sys, json
held = []
for kind, *args in json.loads(sys.argv[1]):
    if kind == "tcp":
        host, port, v6only = args
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        if ":" in host:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if v6only else 0)
        s.bind((host, port)); s.listen(8)
    elif kind == "udp":
        host, port, peer = args
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((host, port))
        if peer:
            s.connect((peer, 53))
    elif kind == "raw":
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    elif kind == "packet":
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    held.append(s)
print("ready", flush=True)
sys.stdin.read()
"""

CASES: dict[str, list[list[Any]]] = {
    "server on loopback only": [["tcp", "127.0.0.1", 8080, False]],
    "second listener on 0.0.0.0:9000": [["tcp", "127.0.0.1", 8080, False], ["tcp", "0.0.0.0", 9000, False]],
    "endpoint port on IPv6 only": [["tcp", "127.0.0.1", 8080, False], ["tcp", "::", 8080, True]],
    "server on the pod IP": [["tcp", POD4, 8080, False]],
    "proxy port squatted on IPv6": [["tcp", "127.0.0.1", 8080, False], ["tcp", "::", 8090, True]],
    "unconnected UDP": [["udp", "0.0.0.0", 5353, None]],
    "connected UDP (a resolver)": [["udp", "0.0.0.0", 0, PEER4]],
    "raw socket": [["raw"]],
    "packet socket": [["packet"]],
}
EXPECTED = {
    "server on loopback only": [],
    "second listener on 0.0.0.0:9000": ["tcp 0.0.0.0:9000"],
    "endpoint port on IPv6 only": ["tcp6 [::]:8080"],
    "server on the pod IP": [f"tcp {POD4}:8080"],
    "proxy port squatted on IPv6": ["tcp6 [::]:8090"],
    "unconnected UDP": ["udp 0.0.0.0:5353"],
    "connected UDP (a resolver)": [],
    "raw socket": ["raw 0.0.0.0:6"],
    "packet socket": ["packet"],
}


def _in_netns() -> dict[str, Any]:
    """Inside the namespace: the sidecar's own listeners, then each case's application process; per case the
    finding, and whether it stays after the application closed its sockets."""
    sidecar = [socket.create_server(("0.0.0.0", 8090)), socket.create_server(("0.0.0.0", 8190))]
    v6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    v6.bind(("::", 8091))
    v6.listen(4)
    sidecar.append(v6)
    results: dict[str, Any] = {}
    for name, sockets in CASES.items():
        app = subprocess.Popen([sys.executable, "-c", APP, json.dumps(sockets)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
        assert app.stdout is not None and app.stdin is not None
        assert app.stdout.readline().strip() == "ready"
        watch = ExposureWatch(lambda exposure: None)
        during = watch.check()
        app.stdin.close()
        app.wait(10)
        after = watch.check()
        results[name] = {"during": list(during.sockets), "exposed": during.exposed, "after": list(after.sockets)}
    return results


def _netns_available() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("ip") is not None


@pytest.fixture(scope="module")
def netns_results() -> dict[str, Any]:
    if not _netns_available():
        pytest.skip("needs root, unshare and ip (a network namespace stands in for the pod)")
    setup = (f"ip link set lo up && ip addr add {POD4}/32 dev lo && ip addr add {PEER4}/32 dev lo && "
             f"ip -6 addr add {POD6}/128 dev lo nodad && "
             f"exec {sys.executable} {__file__}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    done = subprocess.run(["unshare", "-n", "sh", "-c", setup], capture_output=True, text=True, timeout=120,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", list(CASES))
def test_in_a_network_namespace_every_foreign_reachable_socket_is_found_and_the_sidecars_are_not(
        netns_results: dict[str, Any], case: str) -> None:
    result = netns_results[case]
    assert result["during"] == EXPECTED[case]
    assert result["exposed"] is bool(EXPECTED[case])
    assert result["after"] == EXPECTED[case]  # closed since: still reported (it may hold a connection open)


if __name__ == "__main__":
    print(json.dumps(_in_netns()))
