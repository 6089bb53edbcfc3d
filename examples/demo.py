"""The main job on an embedded default: start the example MCP server, pin it,
verify it, rug-pull it, and watch verification catch the drift.

    make demo          # or: python examples/demo.py
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCKSTEP = [sys.executable, "-m", "lockstep.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(title: str, *args: str, expect: int) -> str:
    print(f"\n$ lockstep {' '.join(args)}    # {title}", flush=True)
    result = subprocess.run([*LOCKSTEP, *args], capture_output=True, text=True, cwd=tempfile.gettempdir(),
                            check=False)
    print(result.stdout + result.stderr, end="", flush=True)
    print(f"(exit {result.returncode})", flush=True)
    if result.returncode != expect:
        raise SystemExit(f"demo failed: expected exit {expect}, got {result.returncode}")
    return result.stdout


def wait_for(port: int, deadline: float = 20.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"the example server did not start on port {port}")


def main() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = subprocess.Popen([sys.executable, str(HERE / "weather_server.py"), "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(port)
        with tempfile.TemporaryDirectory() as folder:
            manifest = Path(folder) / "weather.yaml"
            manifest.write_text(run("pin the reviewed server", "snapshot", url, "--name", "weather",
                                    "-n", "agents", expect=0))
            print(f"(wrote {manifest}: an MCPServerInterface to kubectl apply or commit)")
            run("digests per component", "hash", url, expect=0)
            run("the live server matches the pin", "verify", url, "--against", str(manifest), expect=0)
            server.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            print("\n*** rug pull: the server rewrote get_forecast ***")
            run("the drift is caught and explained", "verify", url, "--against", str(manifest), expect=1)
            print("\nDemo complete: Lockstep pinned the server and caught the rug pull.")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
