"""The Argo CD health check (examples/gitops/argocd/health.lua), run by a real Lua 5.1 runtime (Argo CD's
gopher-lua speaks 5.1) on MCPServerInterface status built by the operator's own status code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lupa.lua51
import pytest
import yaml
from lockstep.operator.cache import PodRecord
from lockstep.operator.judge import Policy, judge_stale
from lockstep.operator.state import PodTrack, ResourceMemory
from lockstep.operator.status import build_status
from lockstep_testing.approval_support import interface_manifest, read_weather, weather, with_status

ARGOCD = Path(__file__).resolve().parents[2] / "examples" / "gitops" / "argocd"
HEALTH_LUA = (ARGOCD / "health.lua").read_text()


def lua_value(runtime: Any, value: Any) -> Any:
    """JSON to Lua the way Argo CD hands objects to health scripts: objects and arrays become tables."""
    if isinstance(value, dict):
        return runtime.table_from({key: lua_value(runtime, item) for key, item in value.items()})
    if isinstance(value, list):
        return runtime.table_from([lua_value(runtime, item) for item in value])
    return value


def health(resource: dict[str, Any]) -> dict[str, str]:
    runtime = lupa.lua51.LuaRuntime()
    runtime.globals().obj = lua_value(runtime, json.loads(json.dumps(resource)))
    result = runtime.execute(HEALTH_LUA)
    return {key: result[key] for key in ("status", "message")}


@pytest.fixture
async def clean():
    return await read_weather()


async def test_verified_is_healthy(clean):
    resource = with_status(interface_manifest(clean), {"weather-0": clean, "weather-1": clean})
    assert resource["status"]["phase"] == "Verified"
    assert health(resource) == {"status": "Healthy", "message": "2/2 pods serve an approved interface"}


async def test_drifted_is_degraded_and_says_how_to_review(clean):
    pulled = await read_weather(weather.rug_pull)
    resource = with_status(interface_manifest(clean), {"weather-0": clean, "weather-1": pulled})
    assert resource["status"]["phase"] == "Drifted"
    assert health(resource) == {
        "status": "Degraded",
        "message": "Interface drift: 1 unapproved revision(s) observed, 1/2 pods verified; "
                   "review with `lockstep diff weather -n agents`"}


async def test_pending_is_progressing(clean):
    resource = with_status(interface_manifest(clean), {})
    assert resource["status"]["phase"] == "Pending"
    assert health(resource)["status"] == "Progressing"


async def test_degraded_names_the_pod_states(clean):
    manifest = with_status(interface_manifest(clean), {})
    policy = Policy.from_resource(manifest)
    pod = PodRecord("agents", "weather-0", "uid-0", {"app": "weather-mcp"}, {}, [])
    track = PodTrack("uid-0", verdict=judge_stale(policy, 400.0))
    manifest["status"] = build_status(policy, [(pod, track)], ResourceMemory(), {}, definitions_limit=65536)
    assert manifest["status"]["phase"] == "Degraded"
    assert health(manifest) == {"status": "Degraded", "message": "0/1 pods verified (1 stale)"}


async def test_an_invalid_spec_is_degraded_with_the_reason(clean):
    manifest = interface_manifest(clean)
    manifest["spec"]["approved"][0]["formula"] = "lockstep/v9"
    resource = with_status(manifest, {})
    result = health(resource)
    assert result["status"] == "Degraded" and result["message"].startswith("Invalid spec: spec.approved[0]")


async def test_an_unobserved_generation_is_progressing(clean):
    resource = with_status(interface_manifest(clean), {"weather-0": clean})
    resource["metadata"]["generation"] = resource["status"]["observedGeneration"] + 1
    assert health(resource) == {"status": "Progressing",
                                "message": "Waiting for the Lockstep operator to observe generation 3"}
    del resource["status"]
    assert health(resource)["status"] == "Progressing"


def test_the_argocd_cm_example_carries_the_same_script():
    config = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert config["data"]["resource.customizations.health.lockstep.dev_MCPServerInterface"] == HEALTH_LUA
