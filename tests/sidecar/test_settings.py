"""The sidecar's settings from the LOCKSTEP_* environment the webhook injects."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from lockstep.sidecar.settings import SettingsError, SidecarSettings
from lockstep_testing.loopback import make_certificates

BASE = {"LOCKSTEP_OPERATOR_URL": "https://lockstep.lockstep-system.svc:8443/"}


def test_defaults_match_the_architecture_table() -> None:
    settings = SidecarSettings.from_env(BASE)
    assert settings.mcp_url == "http://127.0.0.1:8080/mcp"
    assert (settings.transport, settings.interval, settings.timeout, settings.port) == \
        ("streamable-http", 60.0, 10.0, 9090)
    assert settings.token_path == Path("/var/run/secrets/lockstep.dev/token")
    assert settings.report_url == "https://lockstep.lockstep-system.svc:8443/v1/reports"
    assert settings.headers_dir is None and settings.interface == ""


def test_endpoint_from_port_path_and_transport() -> None:
    settings = SidecarSettings.from_env({**BASE, "LOCKSTEP_MCP_PORT": "8000", "LOCKSTEP_MCP_PATH": "sse",
                                         "LOCKSTEP_MCP_TRANSPORT": "sse", "LOCKSTEP_PROBE_INTERVAL": "30"})
    assert (settings.mcp_url, settings.transport, settings.interval) == ("http://127.0.0.1:8000/sse", "sse", 30.0)


@pytest.mark.parametrize(("name", "value"), [
    ("LOCKSTEP_MCP_TRANSPORT", "websocket"),
    ("LOCKSTEP_PROBE_INTERVAL", "0"),
    ("LOCKSTEP_PROBE_TIMEOUT", "ten"),
    ("LOCKSTEP_OPERATOR_URL", ""),
])
def test_unusable_values_are_named(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        SidecarSettings.from_env({**BASE, name: value})


def test_headers_are_read_from_files_every_time(tmp_path: Path) -> None:
    (tmp_path / "Authorization").write_text("Bearer probe-1\n")
    (tmp_path / ".hidden").write_text("ignored")
    settings = SidecarSettings.from_env({**BASE, "LOCKSTEP_HEADERS_DIR": str(tmp_path)})
    assert settings.mcp_headers() == {"Authorization": "Bearer probe-1"}
    (tmp_path / "Authorization").write_text("Bearer probe-2")
    assert settings.mcp_headers() == {"Authorization": "Bearer probe-2"}


def test_operator_ca_as_pem_text_or_file(tmp_path: Path) -> None:
    pem = make_certificates(tmp_path).ca_pem
    (tmp_path / "ca.crt").write_text(pem)
    for value in (pem, str(tmp_path / "ca.crt")):
        context = SidecarSettings.from_env({**BASE, "LOCKSTEP_OPERATOR_CA": value}).ssl_context()
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert [cert["subject"] for cert in context.get_ca_certs()] == [((("commonName", "lockstep test CA"),),)]
