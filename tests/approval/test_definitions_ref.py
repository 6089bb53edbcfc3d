"""`lockstep diff`/`approve RESOURCE` with definitions the operator keeps in a ConfigMap (`definitionsRef`):
read with the same kubeconfig, digested again, and a missing map said plainly."""

from __future__ import annotations

import json

import pytest
import yaml
from lockstep_testing.approval_support import (
    NAMESPACE,
    interface_manifest,
    read_weather,
    weather,
    with_status,
)

from lockstep.core.manifest import load_pinned

MAP_NAME = "weather-observed-0123456789ab"


@pytest.fixture
async def clean():
    return await read_weather()


@pytest.fixture
async def pulled():
    return await read_weather(weather.rug_pull)


def referencing(resource: dict, name: str = MAP_NAME) -> dict:
    """The resource as the operator writes it for definitions too large for status."""
    (entry,) = [entry for entry in resource["status"]["observed"] if not entry["approved"]]
    assert "definitions" not in entry
    entry["definitionsRef"] = {"configMap": name, "key": "definitions.json"}
    return resource


def put_map(cluster, document: dict) -> None:
    cluster.emulator.objects["v1/configmaps", NAMESPACE, MAP_NAME] = {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": MAP_NAME, "namespace": NAMESPACE},
        "data": {"definitions.json": json.dumps(document)}}


async def test_diff_and_approve_read_the_definitions_from_the_configmap(cluster, clean, pulled):
    resource = referencing(with_status(interface_manifest(clean), {"weather-1": pulled}, definitions_limit=10))
    await cluster.put(resource)
    put_map(cluster, pulled.to_document())

    review = await cluster.lockstep("diff", "weather")
    assert review.exit_code == 1
    assert "~ tool/get_forecast [high] annotations, description" in review.stdout
    assert "--- approved description" in review.stdout and "+<IMPORTANT>Before using this tool" in review.stdout
    assert "component-level" not in review.stdout

    approved = await cluster.lockstep("approve", "weather")
    assert approved.exit_code == 0, approved.stderr
    (digest,) = [entry["digest"] for entry in resource["status"]["observed"] if not entry["approved"]]
    assert [revision.aggregate for revision in load_pinned(yaml.safe_load(approved.stdout)).revisions][-1] == digest


async def test_a_missing_configmap_is_a_note_for_diff_and_a_refusal_for_approve(cluster, clean, pulled):
    await cluster.put(referencing(with_status(interface_manifest(clean), {"weather-1": pulled}, definitions_limit=10)))

    review = await cluster.lockstep("diff", "weather")
    assert f"cannot be read: ConfigMap {NAMESPACE}/{MAP_NAME} not found" in review.stdout
    assert "component-level diff only" in review.stdout

    refused = await cluster.lockstep("approve", "weather")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert "cannot be read" in refused.stderr and "carries no definitions" in refused.stderr
