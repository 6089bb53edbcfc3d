"""The shipped examples stay true: the example server serves exactly the interface that
examples/weather-interface.yaml approves, and its rug pull is caught."""

import importlib.util
import json
from pathlib import Path

from lockstep_testing.mcp_servers import serve_mcp_in_thread

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example_server():
    spec = importlib.util.spec_from_file_location("weather_server", EXAMPLES / "weather_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_manifest_pins_the_example_server_and_catches_its_rug_pull(invoke):
    weather = load_example_server()
    server = weather.build_server()
    with serve_mcp_in_thread(server) as handle:
        for pin in ("weather-interface.yaml", "weather-interface.json"):
            result = invoke("verify", handle.url, "--against", str(EXAMPLES / pin))
            assert result.exit_code == 0, result.output
        weather.rug_pull(server)
        drift = invoke("verify", handle.url, "--against", str(EXAMPLES / "weather-interface.yaml"), "--json")
    assert drift.exit_code == 1
    (finding,) = json.loads(drift.stdout)["findings"]
    assert (finding["kind"], finding["name"], finding["severity"]) == ("tool", "get_forecast", "high")


async def test_the_example_servers_rug_pull_sends_list_changed_to_a_connected_client(tmp_path):
    """SIGUSR1 to the example server, run as a process: a connected client hears list_changed at once
    (before, the drift was found by the sidecar's timer only)."""
    import asyncio
    import signal
    import socket
    import subprocess
    import sys

    from lockstep.reader import connect

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, str(EXAMPLES / "weather_server.py"), "--port", str(port)],  # noqa: ASYNC220 - started once, before the test
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        heard = asyncio.Event()
        for _ in range(200):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            await asyncio.sleep(0.05)
        async with connect(f"http://127.0.0.1:{port}/mcp", on_list_changed=lambda kind: heard.set()) as live:
            before = await live.read()
            server.send_signal(signal.SIGUSR1)
            await asyncio.wait_for(heard.wait(), 20)
            after = await live.read()
        assert before.interface != after.interface
        assert "list_changed sent to 1 session" in log.read_text()
    finally:
        server.terminate()
        server.wait(10)
