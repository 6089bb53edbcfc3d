"""The pod/resource indexes answer selection questions as a label scan would."""

from __future__ import annotations

from typing import Any

from lockstep.operator.cache import ClusterCache, PodRecord, ResourceRecord
from lockstep.operator.judge import Policy


def _pod(name: str, labels: dict[str, str], **annotations: str) -> PodRecord:
    return PodRecord.from_body({"metadata": {"namespace": "ns", "name": name, "uid": name, "labels": labels,
                                             "annotations": annotations}})


def _resource(name: str, selector: dict[str, Any], namespace: str = "ns") -> ResourceRecord:
    return ResourceRecord(Policy.from_resource({"metadata": {"namespace": namespace, "name": name},
                                                "spec": {"selector": selector}}))


def _names(records: list[Any]) -> list[str]:
    return [record.policy.name if isinstance(record, ResourceRecord) else record.name for record in records]


def test_selection_by_labels_expressions_and_binding() -> None:
    cache = ClusterCache()
    cache.put_resource(_resource("web", {"matchLabels": {"app": "web", "tier": "mcp"}}))
    cache.put_resource(_resource("any-mcp", {"matchExpressions": [{"key": "tier", "operator": "In",
                                                                    "values": ["mcp"]}]}))
    cache.put_resource(_resource("elsewhere", {"matchLabels": {"app": "web"}}, namespace="other"))
    web = _pod("web-1", {"app": "web", "tier": "mcp"})
    half = _pod("web-2", {"app": "web"})
    bound = _pod("bound", {"app": "web", "tier": "mcp"}, **{"lockstep.dev/interface": "web"})
    for pod in (web, half, bound):
        cache.put_pod(pod)
    assert _names(cache.selecting(web)) == ["any-mcp", "web"]  # a conflict
    assert _names(cache.selecting(half)) == []
    assert _names(cache.selecting(bound)) == ["web"]
    assert _names(cache.selected_pods("ns", "web")) == ["bound", "web-1"]
    assert _names(cache.selected_pods("ns", "any-mcp")) == ["web-1"]


def test_indexes_follow_changes_and_deletions() -> None:
    cache = ClusterCache()
    cache.put_resource(_resource("web", {"matchLabels": {"app": "web"}}))
    cache.put_pod(_pod("p", {"app": "web"}))
    assert _names(cache.selected_pods("ns", "web")) == ["p"]
    cache.put_pod(_pod("p", {"app": "db"}))
    assert _names(cache.selected_pods("ns", "web")) == []
    assert _names(cache.selected_pods("ns", "web", {"matchLabels": {"app": "db"}})) == ["p"]
    cache.put_resource(_resource("web", {"matchLabels": {"app": "db"}}))
    assert _names(cache.selecting(cache.pod("ns", "p"))) == ["web"]  # type: ignore[arg-type]
    cache.drop_resource("ns", "web")
    assert cache.selecting(cache.pod("ns", "p")) == []  # type: ignore[arg-type]
    cache.drop_pod("ns", "p")
    assert cache.pod("ns", "p") is None and list(cache.pods()) == []


def _strict(name: str, selector: dict[str, Any], **spec: Any) -> ResourceRecord:
    return ResourceRecord(Policy.from_resource({"metadata": {"namespace": "ns", "name": name},
                                                "spec": {"selector": selector, **spec}}))


def test_an_annotation_naming_a_weaker_interface_is_a_conflict() -> None:
    """A pod author who annotates a pod (even after admission: annotations are mutable) with a laxer
    interface than its labels select gets a conflict, never the laxer verdict."""
    cache = ClusterCache()
    cache.put_resource(_strict("strict", {"matchLabels": {"app": "web"}}))
    cache.put_resource(_strict("audit", {"matchLabels": {"app": "other"}}, enforcement="Audit"))
    cache.put_resource(_strict("tofu", {"matchLabels": {"app": "other"}}, approval="FirstSeen"))
    cache.put_resource(_strict("twin", {"matchLabels": {"app": "other"}}))
    for lax in ("audit", "tofu"):
        pod = _pod(f"to-{lax}", {"app": "web"}, **{"lockstep.dev/interface": lax})
        cache.put_pod(pod)
        assert _names(cache.selecting(pod)) == [lax, "strict"]
        assert f"to-{lax}" in _names(cache.selected_pods("ns", "strict"))  # re-judged when strict changes
    equal = _pod("to-twin", {"app": "web"}, **{"lockstep.dev/interface": "twin"})
    cache.put_pod(equal)
    assert _names(cache.selecting(equal)) == ["twin"]
    assert "to-twin" not in _names(cache.selected_pods("ns", "strict"))
