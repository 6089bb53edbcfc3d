"""examples/gitops: kustomize renders it, its pieces fit together, and its pinned interface is the example
server's real one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from lockstep.operator.injection import selector_matches
from lockstep.operator.validation import check_interface
from lockstep_testing.approval_support import read_weather

from lockstep.core.manifest import load_pinned
from lockstep.core.revision import Revision

GITOPS = Path(__file__).resolve().parents[2] / "examples" / "gitops"


def by_kind(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {document["kind"]: document for document in documents}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl (for `kubectl kustomize`) is not installed")
    output = subprocess.run(["kubectl", "kustomize", str(GITOPS)], check=True, capture_output=True, text=True,
                            timeout=60).stdout
    return by_kind([document for document in yaml.safe_load_all(output) if document])


def test_kustomize_renders_the_namespace_server_and_interface(rendered):
    assert set(rendered) == {"Namespace", "Deployment", "Service", "MCPServerInterface"}
    assert rendered["Namespace"]["metadata"]["labels"]["lockstep.dev/inject"] == "enabled"
    for kind in ("Deployment", "Service", "MCPServerInterface"):
        assert rendered[kind]["metadata"]["namespace"] == rendered["Namespace"]["metadata"]["name"]


def test_the_interface_selects_the_server_pods_on_their_port(rendered):
    template = rendered["Deployment"]["spec"]["template"]
    labels = template["metadata"]["labels"]
    interface = rendered["MCPServerInterface"]
    assert selector_matches(interface["spec"]["selector"], labels)
    assert rendered["Service"]["spec"]["selector"].items() <= labels.items()
    # Enforcement Isolate (issue 28): the server listens on 127.0.0.1 at the endpoint's port (a server on the
    # pod's IP is judged ServerExposed), and agents reach it through the sidecar's in-line proxy only.
    assert interface["spec"].get("enforcement", "Isolate") in ("Isolate", "Quarantine")
    [server] = template["spec"]["containers"]
    args = server["args"]
    assert args[args.index("--host") + 1] == "127.0.0.1"
    assert int(args[args.index("--port") + 1]) == interface["spec"]["endpoint"]["port"]
    assert [port["targetPort"] for port in rendered["Service"]["spec"]["ports"]] == ["lockstep-mcp"]
    assert check_interface(interface).problems == []


async def test_the_pinned_interface_is_the_example_servers_real_one():
    manifest = yaml.safe_load((GITOPS / "weather" / "interface.yaml").read_text())
    (approved,) = load_pinned(manifest).revisions
    live = await read_weather()
    assert approved.interface is not None  # its definitions digest to the digest (load_pinned checks)
    assert approved.aggregate == Revision.of(live).aggregate


def test_flux_and_ci_examples_are_valid_yaml():
    flux = list(yaml.safe_load_all((GITOPS / "flux" / "weather.yaml").read_text()))
    (kustomization,) = [document for document in flux if document["kind"] == "Kustomization"]
    assert kustomization["spec"]["healthChecks"][0]["kind"] == "MCPServerInterface"
    workflow = yaml.safe_load((GITOPS / "ci" / "verify-interface.yaml").read_text())
    (step,) = [step for step in workflow["jobs"]["verify"]["steps"] if "lockstep verify" in step.get("run", "")]
    assert "--against examples/gitops/weather/interface.yaml" in step["run"]
