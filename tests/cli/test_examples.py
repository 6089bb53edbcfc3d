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
