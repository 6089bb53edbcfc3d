"""A label-selector shard (--watch-label-selector, docs/scale.md#sharding): the operator handles the
resources its selector matches and the pods they select, and leaves every other resource and pod alone
(no status, no condition written, a report from such a pod refused), whether the resource was there at
start (the list at resync) or came later (the watch); a resource relabelled into the shard is handled, one
relabelled out of it is, for this operator, deleted."""

from __future__ import annotations

from typing import Any

import pytest
from lockstep_testing.kmock_support import (
    KUBELET_CONDITIONS,
    NAMESPACE,
    TOOLS,
    Emulator,
    TlsFiles,
    TokenBook,
    create_objects,
    make_pod,
    make_resource,
    operator_config,
    operator_rounds,
    pod_of,
    resource_status,
    run_operator,
    sidecar_for,
    verdict_of,
    wait_verdict,
)
from lockstep_testing.polling import eventually

from lockstep.core import Interface
from lockstep.core.report import Observation

pytestmark = pytest.mark.kmock(cls=Emulator)

SHARD = "lockstep.dev/shard"
RESOURCES = f"/apis/lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/mcpserverinterfaces"
#: The condition another release wrote on a pod of its shard.
OTHERS = {"type": "lockstep.dev/interface-verified", "status": "True", "reason": "Verified",
          "message": "written by the release of shard b", "lastTransitionTime": "2026-11-22T01:00:00Z"}


def sharded_resource(name: str, shard: str) -> dict[str, Any]:
    manifest = make_resource([{"tools": TOOLS}], name=name)
    manifest["metadata"]["labels"] = {SHARD: shard}
    manifest["spec"]["selector"] = {"matchLabels": {"app": name}}
    return manifest


def report() -> dict[str, Any]:
    return Observation.of_interface(Interface.from_document({"tools": TOOLS}), "2026-11-22T02:00:00Z").to_dict()


def pod_with_others_verdict(name: str) -> dict[str, Any]:
    pod = make_pod(name, labels={"app": name.rsplit("-", 1)[0]})
    pod["status"]["conditions"] = [*KUBELET_CONDITIONS, dict(OTHERS)]
    return pod


def pod_status_writes(kmock: Emulator, pod: str) -> int:
    return sum(1 for request in kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")]
               if request.url.path.endswith(f"/pods/{pod}/status"))


def status_writes(kmock: Emulator, resource: str) -> int:
    return sum(1 for request in kmock["patch", kmock.resource("lockstep.dev/v1alpha1/mcpserverinterfaces")]
               if request.url.path.endswith(f"/{resource}/status"))


async def test_the_operator_handles_its_shard_and_leaves_the_others(kmock: Emulator, tokens: TokenBook,
                                                                    tls_files: TlsFiles) -> None:
    # At start: one resource of each shard, and a pod of shard b verified by the release of shard b.
    await create_objects(kmock, sharded_resource("mine", "a"), sharded_resource("theirs", "b"),
                         make_pod("mine-0", labels={"app": "mine"}), pod_with_others_verdict("theirs-0"))
    config = operator_config(tls_files, watch_label_selector=f"{SHARD}=a")
    async with run_operator(kmock, config) as operator:
        reconciler = operator.operator.reconciler
        assert reconciler is not None
        await eventually(lambda: reconciler.synced.is_set())
        assert reconciler.cache.resource(NAMESPACE, "theirs") is None  # the list at start asked for shard a

        # A pod of the shard is judged, its resource's status written.
        status, answer = await sidecar_for(operator, tokens, tls_files, "mine-0").post(report())
        assert (status, answer["verdict"]["reason"]) == (202, "Verified")
        await wait_verdict(kmock, "mine-0", ("True", "Verified"))
        await eventually(lambda: resource_status(kmock, "mine").get("pods", {}).get("verified") == 1)

        # A resource of shard b created later (the watch), and a pod of it: never judged here.
        await create_objects(kmock, sharded_resource("later", "b"), pod_with_others_verdict("later-0"))
        status, answer = await sidecar_for(operator, tokens, tls_files, "theirs-0").post(report())
        assert (status, answer["reason"]) == (403, "NotSelected")
        status, answer = await sidecar_for(operator, tokens, tls_files, "later-0").post(report())
        assert (status, answer["reason"]) == (403, "NotSelected")
        # Any pod event of theirs (the other release writes its condition again) changes nothing here.
        async with kmock.patch(f"/api/v1/namespaces/{NAMESPACE}/pods/theirs-0",
                               json={"metadata": {"annotations": {"touched": "1"}}}) as response:
            assert response.status == 200

        # A resource of shard b relabelled into shard a is handled from then on.
        async with kmock.patch(f"{RESOURCES}/later", json={"metadata": {"labels": {SHARD: "a"}}}) as response:
            assert response.status == 200
        await eventually(lambda: reconciler.cache.resource(NAMESPACE, "later") is not None)
        status, answer = await sidecar_for(operator, tokens, tls_files, "later-0").post(report())
        assert (status, answer["verdict"]["reason"]) == (202, "Verified")

        # One relabelled out of the shard is deleted as far as this operator knows: its pod, which reports
        # here, fails closed (written once), and its reports are refused.
        async with kmock.patch(f"{RESOURCES}/mine", json={"metadata": {"labels": {SHARD: "b"}}}) as response:
            assert response.status == 200
        await wait_verdict(kmock, "mine-0", ("False", "NotApproved"))
        assert reconciler.cache.resource(NAMESPACE, "mine") is None
        status, answer = await sidecar_for(operator, tokens, tls_files, "mine-0").post(report())
        assert (status, answer["reason"]) == (403, "NotSelected")
        writes = pod_status_writes(kmock, "mine-0")
        await operator_rounds(operator)  # the stale timer and the status flush ran, and wrote nothing
        assert pod_status_writes(kmock, "mine-0") == writes

    # Nothing of shard b was written: no status, no condition, the other release's condition kept.
    assert status_writes(kmock, "theirs") == 0
    assert pod_status_writes(kmock, "theirs-0") == 0
    assert [c for c in pod_of(kmock, "theirs-0")["status"]["conditions"] if c["type"] == OTHERS["type"]] == [OTHERS]
    assert not resource_status(kmock, "theirs")


async def test_without_a_selector_a_foreign_true_is_still_failed_closed(kmock: Emulator, tokens: TokenBook,
                                                                        tls_files: TlsFiles) -> None:
    """The shard guard does not weaken the unsharded operator: a True that no resource explains is set False."""
    await create_objects(kmock, sharded_resource("mine", "a"), make_pod("mine-0", labels={"app": "mine"}),
                         pod_with_others_verdict("stray-0"))
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        assert operator.operator.reconciler is not None
        async with kmock.patch(f"/api/v1/namespaces/{NAMESPACE}/pods/stray-0",
                               json={"metadata": {"annotations": {"touched": "1"}}}) as response:
            assert response.status == 200
        await eventually(lambda: (verdict_of(kmock, "stray-0") or ("",))[0] == "False")


async def test_a_pod_selector_keeps_the_other_shards_pods_out_of_memory(kmock: Emulator, tokens: TokenBook,
                                                                         tls_files: TlsFiles) -> None:
    """--watch-pod-selector (the chart's shard.podSelector): the pods of other shards are never cached; a
    pod of the shard relabelled out of it stays known until it is deleted (its sidecar reports here)."""
    await create_objects(kmock, sharded_resource("mine", "a"), sharded_resource("theirs", "b"),
                         make_pod("mine-0", labels={"app": "mine", SHARD: "a"}),
                         make_pod("theirs-0", labels={"app": "theirs", SHARD: "b"}))
    config = operator_config(tls_files, watch_label_selector=f"{SHARD}=a", watch_pod_selector=f"{SHARD}=a")
    async with run_operator(kmock, config) as operator:
        reconciler = operator.operator.reconciler
        assert reconciler is not None
        await eventually(lambda: reconciler.synced.is_set())
        assert reconciler.cache.pod(NAMESPACE, "mine-0") is not None
        assert reconciler.cache.pod(NAMESPACE, "theirs-0") is None  # the list at start asked for shard a

        await create_objects(kmock, make_pod("mine-1", labels={"app": "mine", SHARD: "a"}),
                             make_pod("theirs-1", labels={"app": "theirs", SHARD: "b"}))
        await eventually(lambda: reconciler.cache.pod(NAMESPACE, "mine-1") is not None)
        status, answer = await sidecar_for(operator, tokens, tls_files, "theirs-1").post(report())
        assert (status, answer["reason"]) == (404, "UnknownPod")
        assert reconciler.cache.pod(NAMESPACE, "theirs-1") is None

        status, answer = await sidecar_for(operator, tokens, tls_files, "mine-0").post(report())
        assert (status, answer["verdict"]["reason"]) == (202, "Verified")
        # Relabelled out of the pod shard: still known, its reports still judged here.
        async with kmock.patch(f"/api/v1/namespaces/{NAMESPACE}/pods/mine-0",
                               json={"metadata": {"labels": {SHARD: "elsewhere"}}}) as response:
            assert response.status == 200
        await eventually(lambda: (reconciler.cache.pod(NAMESPACE, "mine-0") or None) is not None
                       and reconciler.cache.pod(NAMESPACE, "mine-0").labels.get(SHARD) == "elsewhere")
        status, answer = await sidecar_for(operator, tokens, tls_files, "mine-0").post(report())
        assert status == 202, answer
        async with kmock.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/mine-0") as response:
            assert response.status == 200
        await eventually(lambda: reconciler.cache.pod(NAMESPACE, "mine-0") is None)
    assert verdict_of(kmock, "theirs-0") is None and verdict_of(kmock, "theirs-1") is None

