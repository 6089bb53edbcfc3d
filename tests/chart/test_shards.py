"""Shards (docs/scale.md#sharding): two releases with disjoint shard selectors render distinct names and
webhooks that never both admit one pod or one resource, and each operator is given its shard."""

from __future__ import annotations

from typing import Any

import click
import pytest
from helm_python.chart import Chart, lint
from lockstep_testing.chart_render import CHART_DIR, CRD_FILES, Manifest, documents, find, one
from lockstep_testing.k8s_schemas import KUBERNETES_VERSIONS, crd_schemas, validate_object

from lockstep.cli import cli
from lockstep.operator.shard import LabelSelector

SHARD = "lockstep.dev/shard"
CLUSTER_SCOPED = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ClusterRole",
                  "ClusterRoleBinding", "ClusterKopfPeering")


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """The API server's label selector semantics: an absent or empty selector selects everything."""
    selector = selector or {}
    tests = {"In": lambda k, v: labels.get(k) in v, "NotIn": lambda k, v: labels.get(k) not in v,
             "Exists": lambda k, v: k in labels, "DoesNotExist": lambda k, v: k not in labels}
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()) and all(
        tests[e["operator"]](e["key"], e.get("values") or []) for e in selector.get("matchExpressions") or [])


def operator_container(objects: list[Manifest]) -> dict[str, Any]:
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "operator")


def parse_operator_args(args: list[str]) -> dict[str, Any]:
    """The container's arguments parsed by the operator's own click command."""
    command = cli.get_command(click.Context(cli), "operator")
    assert command is not None
    with command.make_context("operator", list(args[1:])) as context:
        return dict(context.params)


def shard_values(name: str) -> dict[str, Any]:
    return {"shard": {"resourceSelector": {"matchLabels": {SHARD: name}},
                      "podSelector": {"matchLabels": {SHARD: name}}},
            "metrics": {"podMonitor": {"enabled": True}}}


#: The release that keeps every resource no shard claims (and the pods without a shard label).
REST: dict[str, Any] = {"shard": {
    "resourceSelector": {"matchExpressions": [{"key": SHARD, "operator": "DoesNotExist"}]},
    "podSelector": {"matchExpressions": [{"key": SHARD, "operator": "DoesNotExist"}]}}}


def release(chart: Chart, name: str, values: dict[str, Any]) -> list[Manifest]:
    return documents(chart.render(values=values, name=name, namespace=f"lockstep-{name}", is_install=True))


#: Every release but one leaves the CRD out: a CRD belongs to the one release that installed it (Helm
#: refuses to take over an object whose meta.helm.sh/release-name names another release).
NO_CRDS: dict[str, Any] = {"crds": {"install": False}}


@pytest.fixture(scope="module")
def releases(chart: Chart) -> dict[str, list[Manifest]]:
    return {"a": release(chart, "a", shard_values("a")), "b": release(chart, "b", {**shard_values("b"), **NO_CRDS}),
            "rest": release(chart, "rest", {**REST, **NO_CRDS})}


def names(objects: list[Manifest]) -> set[tuple[str, str | None, str]]:
    return {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects}


def admitted_by(objects: list[Manifest], kind: str, namespace_labels: dict[str, str], labels: dict[str, str],
                rule: str) -> list[str]:
    """The webhooks of one release the API server calls for an object of ``rule`` ("pods" or
    "mcpserverinterfaces") in namespace "agents" with ``labels``."""
    namespace = {**namespace_labels, "kubernetes.io/metadata.name": "agents"}
    return [hook["name"] for configuration in find(objects, kind) for hook in configuration["webhooks"]
            if rule in hook["rules"][0]["resources"]
            and selector_matches(hook.get("namespaceSelector"), namespace)
            and selector_matches(hook.get("objectSelector"), labels)]


def test_two_releases_share_no_name(releases: dict[str, list[Manifest]]) -> None:
    a, b = names(releases["a"]), names(releases["b"])
    assert not a & b
    cluster_a = {name for kind, _, name in a if kind in CLUSTER_SCOPED}
    cluster_b = {name for kind, _, name in b if kind in CLUSTER_SCOPED}
    assert cluster_a and not cluster_a & cluster_b
    assert [name for name, objects in releases.items() if find(objects, "CustomResourceDefinition")] == ["a"]


@pytest.mark.parametrize("opted_in", ["namespace", "pod"])
@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_a_pod_is_admitted_by_the_webhooks_of_its_shard_only(releases: dict[str, list[Manifest]], kind: str,
                                                              opted_in: str) -> None:
    namespace_labels = {"lockstep.dev/inject": "enabled"} if opted_in == "namespace" else {}
    inject = {"lockstep.dev/inject": "enabled"} if opted_in == "pod" else {}
    for shard, labels in (("a", {SHARD: "a"}), ("b", {SHARD: "b"}), ("rest", {})):
        called = {name: admitted_by(objects, kind, namespace_labels, {**labels, **inject, "app": "x"}, "pods")
                  for name, objects in releases.items()}
        assert [name for name, hooks in called.items() if hooks] == [shard], called
        assert len(called[shard]) == 1


def test_a_resource_is_validated_by_its_shard_only(releases: dict[str, list[Manifest]]) -> None:
    for shard, labels in (("a", {SHARD: "a"}), ("b", {SHARD: "b"}), ("rest", {"team": "x"})):
        called = {name: admitted_by(objects, "ValidatingWebhookConfiguration", {}, labels, "mcpserverinterfaces")
                  for name, objects in releases.items()}
        assert [name for name, hooks in called.items() if hooks] == [shard], called


def test_each_operator_watches_its_shard_and_its_sidecars_report_to_its_service(
        releases: dict[str, list[Manifest]]) -> None:
    selectors, pod_selectors = {}, {}
    for name, objects in releases.items():
        params = parse_operator_args(operator_container(objects)["args"])
        selectors[name] = LabelSelector.parse(params["watch_label_selector"])
        pod_selectors[name] = LabelSelector.parse(params["watch_pod_selector"])
        assert params["report_url"] == f"https://{name}-lockstep-reports.lockstep-{name}.svc:8443"
        one(objects, "Service", f"{name}-lockstep-reports")
        assert params["peering_name"] == f"{name}-lockstep"
    for labels, shard in (({SHARD: "a"}, "a"), ({SHARD: "b"}, "b"), ({}, "rest"), ({SHARD: "c"}, None)):
        for chosen in (selectors, pod_selectors):
            assert [name for name, selector in chosen.items() if selector.matches(labels)] == \
                ([shard] if shard else [])


def test_each_pod_monitor_scrapes_its_shards_pods(releases: dict[str, list[Manifest]]) -> None:
    for name in ("a", "b"):
        assert one(releases[name], "PodMonitor")["spec"]["selector"] == {"matchLabels": {SHARD: name}}


def test_without_shards_nothing_changes(chart: Chart) -> None:
    objects = release(chart, "plain", {})
    assert "--watch" not in str(operator_container(objects)["args"])
    params = parse_operator_args(operator_container(objects)["args"])
    assert params["watch_label_selector"] == params["watch_pod_selector"] == ""
    mutating = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert "objectSelector" not in mutating[0]
    assert mutating[1]["objectSelector"] == {"matchLabels": {"lockstep.dev/inject": "enabled"}}
    assert "objectSelector" not in one(objects, "ValidatingWebhookConfiguration")["webhooks"][-1]


def test_a_resource_shard_without_a_pod_shard_fails_to_render(chart: Chart) -> None:
    with pytest.raises(Exception, match="shard.resourceSelector needs shard.podSelector"):
        release(chart, "a", {"shard": {"resourceSelector": {"matchLabels": {SHARD: "a"}}}})


def test_an_unknown_operator_fails_to_render(chart: Chart) -> None:
    values = {"shard": {"resourceSelector": {"matchExpressions": [{"key": SHARD, "operator": "Near"}]},
                        "podSelector": {"matchLabels": {SHARD: "a"}}}}
    with pytest.raises(Exception, match="not In, NotIn, Exists or DoesNotExist"):
        release(chart, "a", values)


def test_shard_values_lint_and_validate(releases: dict[str, list[Manifest]]) -> None:
    report = lint(CHART_DIR, shard_values("a"), strict=True, namespace="lockstep-a", kube_version="v1.30.0")
    assert not [m for m in report["messages"] if m["severity"] >= 2] and not report["errors"]
    crds = crd_schemas(CRD_FILES)
    for objects in releases.values():
        for obj in objects:
            for version in KUBERNETES_VERSIONS:
                validate_object(obj, crds, version)
