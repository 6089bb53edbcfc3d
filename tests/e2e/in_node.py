"""Processes in the real node's network namespace (``nsenter --net``), where ClusterIPs and pod IPs exist:
agents and clients that reach a Service as a pod would, their JSON lines collected as they come."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

NETNS = os.environ.get("LOCKSTEP_E2E_NETNS", "/run/netns/realnode")


class InNode:
    """One process in the node's network namespace; every stdout line that is JSON is kept in ``entries``."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(["nsenter", f"--net={NETNS}", *command], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.entries: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._read, args=(self.process.stdout, True), daemon=True).start()
        threading.Thread(target=self._read, args=(self.process.stderr, False), daemon=True).start()

    def _read(self, stream: Any, out: bool) -> None:
        for text in stream:
            if not out:
                self.stderr.append(text)
                continue
            try:
                self.entries.append(json.loads(text))
            except ValueError:
                continue

    def lists(self) -> int:
        return sum(entry["kind"] == "list" for entry in self.entries)

    def stop(self) -> list[dict[str, Any]]:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=10)
        time.sleep(0.2)
        return self.entries or [{"t": time.time(), "kind": "error",
                                 "error": f"no output; stderr: {''.join(self.stderr)[-300:]}"}]


def reachable(ip: str, port: int) -> bool:
    """Whether a TCP connection to ``ip:port`` from the node's network namespace is accepted."""
    probe = f"import socket; socket.create_connection(({ip!r}, {port}), timeout=1).close()"
    return subprocess.run(["nsenter", f"--net={NETNS}", sys.executable, "-c", probe], capture_output=True,
                          timeout=10).returncode == 0
