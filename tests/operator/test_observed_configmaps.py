"""Observed definitions too large for status live in ConfigMaps owned by the resource: written once,
pointed at by status, read (and digested again) by `lockstep diff` and `lockstep approve`, bounded in
size and count, and pruned when the revision is approved or no pod serves it."""

from __future__ import annotations

import json
import re
from typing import Any

import kmock as kmock_module
import pytest
from lockstep.operator.observed_maps import configmap_name, label_value
from lockstep_testing.approval_support import Cluster, write_kubeconfig
from lockstep_testing.kmock_support import (
    CRD_RESOURCE,
    MERGE_PATCH,
    NAMESPACE,
    POISON,
    Emulator,
    TlsFiles,
    TokenBook,
    create_objects,
    document_of,
    make_pod,
    make_resource,
    operator_config,
    resource_status,
    run_operator,
    sidecar_for,
    wait_verdict,
)
from lockstep_testing.mcp_servers import MutableServer, serve_mcp
from lockstep_testing.polling import eventually

from lockstep.core import Interface
from lockstep.core.revision import Revision

pytestmark = pytest.mark.kmock(cls=Emulator)

CONFIGMAPS = "/api/v1/namespaces/agents/configmaps"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def station_server() -> MutableServer:
    """300 tools with long descriptions: about 150 KB of definitions, over the 64 KiB kept in status."""
    tools = [{"name": f"station_{index:03d}",
              "description": f"Station {index}. " + "Reads the hourly records of the station and returns them. " * 6,
              "inputSchema": {"type": "object", "properties": {"day": {"type": "string", "format": "date"}}},
              "annotations": {"readOnlyHint": True}} for index in range(300)]
    return MutableServer(tools=tools, instructions="Weather station tools.")


def digest_of(server: MutableServer) -> str:
    return Revision.of(Interface.from_document(document_of(server))).aggregate


def configmap(emulator: Emulator, name: str) -> dict[str, Any] | None:
    try:
        found = emulator.objects["v1/configmaps", NAMESPACE, name]
    except KeyError:
        return None
    return None if found.deleted else json.loads(json.dumps(dict(found), default=dict))


def observed_entry(emulator: Emulator, digest: str) -> dict[str, Any] | None:
    return next((entry for entry in resource_status(emulator).get("observed") or [] if entry["digest"] == digest),
                None)


def configmap_writes(emulator: Emulator) -> list[Any]:
    return [request for request in emulator[kmock_module.resource("v1/configmaps")]
            if request.method in (kmock_module.method.POST, kmock_module.method.PATCH)]


async def drift_large(emulator: Emulator, tokens: TokenBook, running: Any, tls_files: TlsFiles,
                      server: MutableServer, url: str) -> str:
    """A verified pod whose large interface then drifts (one description poisoned); returns its digest."""
    await create_objects(emulator, make_resource([document_of(server)]), make_pod("p1"))
    sidecar = sidecar_for(running, tokens, tls_files, "p1")
    await sidecar.probe(url)
    await wait_verdict(emulator, "p1", ("True", "Verified"))
    server.update_tool("station_042", description=POISON)
    await sidecar.probe(url)
    await wait_verdict(emulator, "p1", ("False", "InterfaceChanged"))
    drifted = digest_of(server)
    await eventually(lambda: (observed_entry(emulator, drifted) or {}).get("definitionsRef"))
    return drifted


async def test_large_drift_is_kept_in_a_configmap_reviewed_approved_and_pruned(kmock, tokens, operator, tls_files,
                                                                              tmp_path):
    server = station_server()
    async with serve_mcp(server) as url:
        drifted = await drift_large(kmock, tokens, operator, tls_files, server, url)
        name = f"weather-observed-{drifted[7:19]}"

        entry = observed_entry(kmock, drifted)
        assert entry is not None and "definitions" not in entry
        assert entry["definitionsRef"] == {"configMap": name, "key": "definitions.json"}
        stored = configmap(kmock, name)
        assert stored is not None
        assert stored["metadata"]["labels"] == {"lockstep.dev/interface": "weather",
                                                "lockstep.dev/observed-digest": drifted[7:19]}
        assert stored["metadata"]["ownerReferences"] == [
            {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface", "name": "weather",
             "uid": "uid-weather", "controller": True}]
        text = stored["data"]["definitions.json"]
        assert len(text) > 64 * 1024
        assert Revision.of(Interface.from_document(json.loads(text))).aggregate == drifted

        # The same interface again: nothing is written again.
        await sidecar_for(operator, tokens, tls_files, "p1").probe(url)
        assert len(configmap_writes(kmock)) == 1

    cluster = Cluster(kmock, write_kubeconfig(kmock, tmp_path))
    review = await cluster.lockstep("diff", "weather")
    assert review.exit_code == 1
    assert f"observed {drifted} (NOT APPROVED), 1 pod(s): p1" in review.stdout
    assert "~ tool/station_042 [high] description" in review.stdout and f"+{POISON}" in review.stdout
    assert "component-level" not in review.stdout

    approved = await cluster.lockstep("approve", "weather", "--apply")
    assert approved.exit_code == 0, approved.output
    spec = dict(kmock.objects[CRD_RESOURCE, NAMESPACE, "weather"])["spec"]
    assert [entry["digest"] for entry in spec["approved"]][-1] == drifted

    await wait_verdict(kmock, "p1", ("True", "Verified"))
    await eventually(lambda: configmap(kmock, name) is None)
    entry = observed_entry(kmock, drifted)
    assert entry is not None and entry["approved"] and "definitionsRef" not in entry
    assert all(request.headers["Content-Type"] == MERGE_PATCH for request in configmap_writes(kmock)
               if request.method == kmock_module.method.PATCH)


async def test_approve_refuses_a_tampered_configmap(kmock, tokens, operator, tls_files, tmp_path):
    server = station_server()
    approved_document = document_of(server)
    async with serve_mcp(server) as url:
        drifted = await drift_large(kmock, tokens, operator, tls_files, server, url)
    name = observed_entry(kmock, drifted)["definitionsRef"]["configMap"]
    # Someone swaps the poisoned definitions for the harmless approved ones, hoping to get the drift approved.
    async with kmock.patch(f"{CONFIGMAPS}/{name}", json={"data": {"definitions.json": json.dumps(approved_document)}},
                           headers={"Content-Type": MERGE_PATCH}) as answer:
        assert answer.status == 200
    before = dict(kmock.objects[CRD_RESOURCE, NAMESPACE, "weather"])["spec"]["approved"]

    cluster = Cluster(kmock, write_kubeconfig(kmock, tmp_path))
    refused = await cluster.lockstep("approve", "weather", "--apply")
    assert refused.exit_code != 0
    assert f"observed revision {drifted}: its definitions digest to" in refused.output
    assert dict(kmock.objects[CRD_RESOURCE, NAMESPACE, "weather"])["spec"]["approved"] == before

    review = await cluster.lockstep("diff", "weather")
    assert "do not match the digest" in review.stdout and POISON not in review.stdout


async def test_a_restart_keeps_the_maps_and_their_references_without_writing_them_again(kmock, tokens, tls_files):
    server = station_server()
    async with serve_mcp(server) as url:
        async with run_operator(kmock, operator_config(tls_files)) as running:
            drifted = await drift_large(kmock, tokens, running, tls_files, server, url)
        name = configmap_name("weather", drifted)
        await create_objects(kmock, make_pod("p2"), make_pod("p3"))
        async with run_operator(kmock, operator_config(tls_files)) as running:
            # Two more pods serve the drifted revision; each status write that shows them comes after the
            # previous write's pruning, so the map has survived every write before the last one.
            for pods in (["p1", "p2"], ["p1", "p2", "p3"]):
                await sidecar_for(running, tokens, tls_files, pods[-1]).probe(url)
                await eventually(lambda pods=pods: (observed_entry(kmock, drifted) or {}).get("pods") == pods)
                entry = observed_entry(kmock, drifted)
                assert entry["definitionsRef"] == {"configMap": name, "key": "definitions.json"}
                assert configmap(kmock, name) is not None
    assert len(configmap_writes(kmock)) == 1


async def test_the_count_bound_drops_the_oldest_and_pruning_follows_the_pods(kmock, tokens, tls_files):
    server = station_server()
    revisions = []
    async with run_operator(kmock, operator_config(tls_files, observed_configmap_limit=2)) as running, \
            serve_mcp(server) as url:
        await create_objects(kmock, make_resource([document_of(server)]), *(make_pod(f"p{n}") for n in (1, 2, 3)))
        for n in (1, 2, 3):  # each pod serves its own release of the interface, one after the other
            server.update_tool("station_042", description=f"Release {n}: reads the records.")
            revisions.append(digest_of(server))
            await sidecar_for(running, tokens, tls_files, f"p{n}").probe(url)
            await eventually(lambda: (observed_entry(kmock, revisions[-1]) or {}).get("definitionsRef"))
        first, second, third = (configmap_name("weather", digest) for digest in revisions)

        await eventually(lambda: configmap(kmock, first) is None)
        oldest = observed_entry(kmock, revisions[0])
        assert "definitionsRef" not in oldest and "definitions" not in oldest
        assert "more than 2 unapproved revisions" in oldest["definitionsOmitted"]
        assert configmap(kmock, second) is not None and configmap(kmock, third) is not None

        # p3 goes away: nobody serves the third release, so its map goes, and the oldest gets one again.
        async with kmock.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/p3") as answer:
            assert answer.status == 200
        await eventually(lambda: configmap(kmock, third) is None and configmap(kmock, first) is not None)
        assert (observed_entry(kmock, revisions[0]) or {}).get("definitionsRef") == \
            {"configMap": first, "key": "definitions.json"}


async def test_definitions_over_the_size_limit_are_not_stored_and_status_says_so(kmock, tokens, tls_files,
                                                                                  tmp_path):
    server = station_server()
    async with run_operator(kmock, operator_config(tls_files, observed_configmap_size_limit=100 * 1024)) as running, \
            serve_mcp(server) as url:
        await create_objects(kmock, make_resource([]), make_pod("p1"))
        await sidecar_for(running, tokens, tls_files, "p1").probe(url)
        digest = digest_of(server)
        entry = await eventually(lambda: observed_entry(kmock, digest))
        await eventually(lambda: (observed_entry(kmock, digest) or {}).get("definitionsOmitted"))
        entry = observed_entry(kmock, digest)
        assert "more than the ConfigMap limit of 102400" in entry["definitionsOmitted"]
        assert "definitionsRef" not in entry and not configmap_writes(kmock)
    review = await Cluster(kmock, write_kubeconfig(kmock, tmp_path)).lockstep("diff", "weather")
    assert f"note: the operator keeps no definitions of {digest}: definitions are" in review.stdout
    assert "component-level diff only" in review.stdout


def test_names_stay_valid_and_distinct_for_the_longest_resource_names():
    digest = "sha256:" + "ab" * 32
    assert configmap_name("weather", digest) == "weather-observed-abababababab"
    long_one, long_two = "a" * 240 + ".b" * 6, "a" * 240 + ".c" * 6
    names = {configmap_name(resource, digest) for resource in (long_one, long_two)}
    assert len(names) == 2
    assert all(len(name) <= 253 and DNS_SUBDOMAIN.match(name) for name in names)
    labels = {label_value(resource) for resource in (long_one, long_two)}
    assert len(labels) == 2 and all(len(value) <= 63 and LABEL_VALUE.match(value) for value in labels)


def test_the_bounds_are_operator_options_and_environment_variables(monkeypatch):
    from click.testing import CliRunner
    from lockstep.operator.app import LockstepOperator

    from lockstep.cli import cli

    configs = []

    async def run(self, **_):
        configs.append(self.config)

    monkeypatch.setattr(LockstepOperator, "run", run)
    monkeypatch.setattr("lockstep.operator.cli._require_credentials", lambda: None)  # as if in a cluster
    env = {"LOCKSTEP_OBSERVED_CONFIGMAP_LIMIT": "3"}
    result = CliRunner().invoke(cli, ["operator", "--observed-configmap-size-limit", "512000"], env=env)
    assert result.exit_code == 0, result.output
    assert (configs[0].observed_configmap_limit, configs[0].observed_configmap_size_limit) == (3, 512000)
    too_large = CliRunner().invoke(cli, ["operator", "--observed-configmap-size-limit", str(2 * 1024 * 1024)])
    assert too_large.exit_code == 2 and configs[1:] == []
