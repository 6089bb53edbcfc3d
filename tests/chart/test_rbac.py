"""The chart's RBAC grants exactly the API calls the operator's code makes, plus what kopf itself needs."""

from __future__ import annotations

from typing import Any

import pytest
from lockstep_testing.api_calls import ApiCall, calls_in_source
from lockstep_testing.chart_render import NAMESPACE, NAMESPACED, REPO, Render, find, one

#: The operator's modules, and the names module whose constants (GROUP, PLURAL, ...) their paths use.
OPERATOR_SOURCES = [*sorted((REPO / "lockstep" / "operator").rglob("*.py")), REPO / "lockstep" / "core" / "names.py"]

#: What kopf 1.45 calls by itself (kopf/_core/reactor/observation.py and engines/peering.py).
KOPF_SCANNING = {ApiCall("apiextensions.k8s.io", "customresourcedefinitions", verb) for verb in ("list", "watch")}
KOPF_NAMESPACES = {ApiCall("", "namespaces", verb) for verb in ("list", "watch")}


def kopf_peering(plural: str) -> set[ApiCall]:
    """Nothing: kopf runs standalone (every replica watches); the replicas' entries in the peering object
    are Lockstep's own patches (lockstep.operator.replicas.membership), found by the scan."""
    return set()


def granted(rules: list[dict[str, Any]]) -> set[ApiCall]:
    return {ApiCall(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


@pytest.fixture(scope="module")
def code_calls() -> set[ApiCall]:
    return calls_in_source(OPERATOR_SOURCES)


def test_the_scan_finds_the_operators_calls(code_calls: set[ApiCall]) -> None:
    """A scan that finds nothing would make the exact-match tests below pass trivially."""
    assert {ApiCall("", "pods/status", "patch"), ApiCall("authentication.k8s.io", "tokenreviews", "create"),
            ApiCall("lockstep.dev", "mcpserverinterfaces", "watch")} <= code_calls


def test_cluster_wide_rbac_is_exactly_what_the_code_calls(render: Render, code_calls: set[ApiCall]) -> None:
    objects = render()
    expected = {c for c in code_calls if c.resource != "kopfpeerings"} | KOPF_SCANNING \
        | kopf_peering("clusterkopfpeerings")
    roles = find(objects, "ClusterRole")
    assert granted([rule for role in roles for rule in role["rules"]]) == expected
    bound = {b["roleRef"]["name"] for b in find(objects, "ClusterRoleBinding")}
    assert bound == {role["metadata"]["name"] for role in roles}
    assert not find(objects, "Role") and not find(objects, "RoleBinding")


def test_namespaced_rbac_binds_namespaced_rules_only_in_the_watched_namespaces(render: Render, code_calls: set[ApiCall]) -> None:
    objects = render(NAMESPACED)
    cluster_role = one(objects, "ClusterRole", "demo-lockstep-operator-cluster")
    namespaced_role = one(objects, "ClusterRole", "demo-lockstep-operator")
    peering_role = one(objects, "Role", "demo-lockstep-peering")
    expected = {c for c in code_calls if c.resource != "clusterkopfpeerings"} | KOPF_SCANNING | KOPF_NAMESPACES \
        | kopf_peering("kopfpeerings")
    assert granted(cluster_role["rules"]) | granted(namespaced_role["rules"]) | granted(peering_role["rules"]) \
        == expected
    # The peering object lives in the release's own namespace, never in a tenant's (issue 25): whoever can
    # patch it decides which replica owns what. Its Role names that one object.
    assert peering_role["metadata"]["namespace"] == NAMESPACE
    assert {ApiCall("kopf.dev", "kopfpeerings", "patch")} == granted(peering_role["rules"])
    assert [rule.get("resourceNames") for rule in peering_role["rules"]] == [["demo-lockstep"]]
    assert not any(rule["resources"] == ["kopfpeerings"] for rule in namespaced_role["rules"])
    bindings = find(objects, "RoleBinding")
    assert {(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in bindings} == {
        ("agents", "demo-lockstep-operator"), ("tools", "demo-lockstep-operator"),
        (NAMESPACE, "demo-lockstep-peering")}
    assert [b["roleRef"]["name"] for b in find(objects, "ClusterRoleBinding")] == ["demo-lockstep-operator-cluster"]
    assert {p["metadata"]["namespace"] for p in find(objects, "KopfPeering")} == {NAMESPACE}


def test_without_peering_no_peering_rights_or_objects(render: Render, code_calls: set[ApiCall]) -> None:
    objects = render({"operator": {"replicaCount": 1, "peering": {"enabled": False}}})
    rights = granted([rule for role in find(objects, "ClusterRole") for rule in role["rules"]])
    assert not {c for c in rights if c.group == "kopf.dev"}
    assert not find(objects, "ClusterKopfPeering")


def test_the_operator_never_reads_secrets(render: Render) -> None:
    rights = granted([rule for role in find(render(), "ClusterRole") for rule in role["rules"]])
    assert not {c for c in rights if c.resource == "secrets"}


def test_bindings_name_the_operators_service_account(render: Render) -> None:
    objects = render()
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account
    for binding in find(objects, "ClusterRoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
