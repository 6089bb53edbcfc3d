"""Whose is a pod (lockstep.operator.replicas.ownership): the one answer the reconciler and the report
endpoint both use."""

from __future__ import annotations

from lockstep.operator.cache import ClusterCache, PodRecord, ResourceRecord
from lockstep.operator.judge import Policy
from lockstep.operator.replicas.membership import Member, Membership
from lockstep.operator.replicas.ownership import LOCAL, UNKNOWN, Ownership, Remote, owner_key

from lockstep.core.wire import ReplicaAddress

HERE, THERE = ReplicaAddress("10.0.0.1", 8443), ReplicaAddress("10.0.0.2", 8443)


def _cache() -> ClusterCache:
    cache = ClusterCache()
    for name in ("weather", "search"):
        cache.put_resource(ResourceRecord(Policy.from_resource(
            {"metadata": {"namespace": "agents", "name": name},
             "spec": {"selector": {"matchLabels": {"app": name}}}})))
    for name in ("weather", "search", "stray"):
        cache.put_pod(PodRecord.from_body({"metadata": {"namespace": "agents", "name": f"{name}-0", "uid": name,
                                                        "labels": {"app": name}}}))
    return cache


def _two_replicas(there_publishes: bool = True) -> Membership:
    membership = Membership(None, "lockstep", 10, None, HERE)
    membership.members = [Member(10, HERE), Member(20, THERE if there_publishes else None)]
    return membership


def test_alone_a_replica_owns_everything_and_names_no_address() -> None:
    cache = _cache()
    for ownership in (Ownership(cache), Ownership(cache, Membership(None, None, 10, None, HERE))):
        assert ownership.alone() and ownership.owned_resources() == {("agents", "weather"), ("agents", "search")}
        assert all(ownership.route(pod) is LOCAL for pod in cache.pods())
        assert ownership.own_address() is None  # no other replica to skip


def test_a_pod_goes_with_the_resource_that_selects_it() -> None:
    cache = _cache()
    membership = _two_replicas()
    ownership = Ownership(cache, membership)
    weather = cache.pod("agents", "weather-0")
    assert weather is not None and ownership.pod_owner_key(weather) == owner_key("agents", "weather")
    assert ownership.owns_pod(weather) == ownership.owns_resource(("agents", "weather"))
    stray = cache.pod("agents", "stray-0")
    assert stray is not None and ownership.pod_owner_key(stray) == "agents/pods/stray-0"
    assert ownership.own_address() == HERE


def test_route_is_local_remote_at_the_owners_address_or_unknown() -> None:
    cache = _cache()
    routes = {pod.name: Ownership(cache, _two_replicas()).route(pod) for pod in cache.pods()}
    assert set(routes.values()) == {LOCAL, Remote(THERE)}, routes  # the keys spread over both replicas
    silent = {pod.name: Ownership(cache, _two_replicas(there_publishes=False)).route(pod) for pod in cache.pods()}
    assert {name for name, route in silent.items() if route is UNKNOWN} == \
        {name for name, route in routes.items() if route != LOCAL}
