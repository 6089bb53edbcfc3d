"""The webhook (``resolve_binding``, on the listed objects) and the operator (``ClusterCache.selecting``, on
its records) pick the same interfaces for a pod: both ask lockstep.core.selection."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from lockstep.operator.cache import ClusterCache, PodRecord, ResourceRecord
from lockstep.operator.judge import Policy
from lockstep.operator.webhooks import resolve_binding

ENFORCEMENTS = ("Audit", "Quarantine", "Isolate")
SELECTS = (True, False)
ANNOTATIONS = (None, "a", "missing")


def interface(name: str, enforcement: str, selects: bool) -> dict[str, Any]:
    selector = {"matchLabels": {"app": "weather"}} if selects else {"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["other"]}]}
    return {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface",
            "metadata": {"name": name, "namespace": "agents", "uid": name, "generation": 1},
            "spec": {"selector": selector, "enforcement": enforcement, "approval": "Manual",
                     "endpoint": {"port": 8080}}}


@pytest.mark.parametrize(("a", "b", "annotation"), list(itertools.product(
    itertools.product(ENFORCEMENTS, SELECTS), itertools.product(ENFORCEMENTS, SELECTS), ANNOTATIONS)),
    ids=str)
def test_the_webhook_and_the_cache_select_alike(a: tuple[str, bool], b: tuple[str, bool],
                                                annotation: str | None) -> None:
    interfaces = [interface("a", *a), interface("b", *b)]
    annotations = {"lockstep.dev/interface": annotation} if annotation else {}
    pod = {"metadata": {"name": "weather-0", "namespace": "agents", "uid": "u", "labels": {"app": "weather"},
                        "annotations": annotations}}
    cache = ClusterCache()
    for item in interfaces:
        cache.put_resource(ResourceRecord(Policy.from_resource(item)))
    record = PodRecord.from_body(pod)
    cache.put_pod(record)
    selecting = [selected.policy.name for selected in cache.selecting(record)]
    resolution = resolve_binding(pod, interfaces)

    if not selecting:
        assert resolution.reason == "InterfaceNotFound"
        assert resolution.binding.interface == ""
        return
    assert resolution.binding.interface == selecting[0]
    if annotation:
        assert resolution.reason == ("InterfaceWeaker" if len(selecting) > 1 else "")
        assert all(name in resolution.problem for name in selecting[1:])
    else:
        assert resolution.reason == ("InterfaceAmbiguous" if len(selecting) > 1 else "")
    # Every pod the cache says a resource selects is one it selects the pod for, and the reverse.
    for item in interfaces:
        name = item["metadata"]["name"]
        assert (record in cache.selected_pods("agents", name)) == (name in selecting)
