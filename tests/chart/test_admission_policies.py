"""The chart's ValidatingAdmissionPolicies (issue 25): the names they guard are the code's, the operator's
identity follows the release and serviceAccount.name, each binding denies, and a shard's stamp binding
covers only its own pods. What they refuse on a real API server: tests/envtest/test_tenant.py."""

from __future__ import annotations

from typing import Any

from lockstep.core.names import REPORT_STAMP_ANNOTATION, SIDECAR_NAME, TOKEN_AUDIENCE
from lockstep_testing.chart_render import NAMESPACE, Render, find, one

POLICIES = ("sidecar-token", "sidecar-exec", "report-stamp", "not-ready-services", "sidecar-markers")


def _expressions(policy: dict[str, Any]) -> str:
    spec = policy["spec"]
    return " ".join([v["expression"] for v in spec["validations"]] + [v["expression"] for v in spec.get("variables", [])])


def test_every_policy_has_a_binding_that_denies(render: Render) -> None:
    objects = render()
    policies = find(objects, "ValidatingAdmissionPolicy")
    assert sorted(p["metadata"]["name"] for p in policies) == sorted(f"demo-lockstep-{name}" for name in POLICIES)
    for policy in policies:
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert all(v["reason"] == "Forbidden" and v["message"].startswith("Lockstep:")
                   for v in policy["spec"]["validations"])
        binding = one(objects, "ValidatingAdmissionPolicyBinding", policy["metadata"]["name"])
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        assert binding["spec"]["validationActions"] == ["Deny"]


def test_the_policies_guard_the_names_the_code_uses(render: Render) -> None:
    objects = render()
    token = one(objects, "ValidatingAdmissionPolicy", "demo-lockstep-sidecar-token")
    assert f"'{TOKEN_AUDIENCE}' in object.spec.audiences" in _expressions(token)
    assert "'system:nodes' in request.userInfo.groups" in _expressions(token)
    assert token["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["serviceaccounts/token"]
    exec_ = one(objects, "ValidatingAdmissionPolicy", "demo-lockstep-sidecar-exec")
    assert f"object.container != '{SIDECAR_NAME}'" in _expressions(exec_)
    assert exec_["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CONNECT"]
    stamp = one(objects, "ValidatingAdmissionPolicy", "demo-lockstep-report-stamp")
    assert f"'{REPORT_STAMP_ANNOTATION}'" in _expressions(stamp)
    # The operator writes the stamp through pods/status: every subresource of pods is matched.
    assert stamp["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["pods", "pods/*"]


def test_the_stamp_writer_is_the_releases_operator(render: Render) -> None:
    default = one(render(), "ValidatingAdmissionPolicy", "demo-lockstep-report-stamp")
    assert f"'system:serviceaccount:{NAMESPACE}:demo-lockstep-operator'" in _expressions(default)
    named = one(render({"serviceAccount": {"name": "judge"}}), "ValidatingAdmissionPolicy",
                "demo-lockstep-report-stamp")
    assert f"'system:serviceaccount:{NAMESPACE}:judge'" in _expressions(named)


def test_a_shard_guards_the_stamp_of_its_own_pods_only(render: Render) -> None:
    assert "matchResources" not in one(render(), "ValidatingAdmissionPolicyBinding",
                                       "demo-lockstep-report-stamp")["spec"]
    sharded = render({"shard": {"resourceSelector": {"matchLabels": {"lockstep.dev/shard": "a"}},
                                "podSelector": {"matchLabels": {"lockstep.dev/shard": "a"}}},
                      "operator": {"watchNamespaces": ["agents"]}})
    resources = one(sharded, "ValidatingAdmissionPolicyBinding", "demo-lockstep-report-stamp")["spec"]["matchResources"]
    assert resources["objectSelector"] == {"matchLabels": {"lockstep.dev/shard": "a"}}
    assert resources["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["agents"]}]


def test_not_ready_services_are_refused_in_opted_in_namespaces_only(render: Render) -> None:
    binding = one(render(), "ValidatingAdmissionPolicyBinding", "demo-lockstep-not-ready-services")
    expressions = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert {"key": "lockstep.dev/inject", "operator": "In", "values": ["enabled"]} in expressions
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NAMESPACE, "kube-system"]} \
        in expressions


def test_the_markers_of_an_injected_pod_are_refused_on_pods_lockstep_does_not_inject(render: Render) -> None:
    """Security review 2, S6-9: the gate, the sidecar's name and its token are the code's names, and scope follows
    webhook.injectLabel and the namespaces never injected."""
    from lockstep.operator.injection import READINESS_GATE, TOKEN_VOLUME

    markers = one(render({"webhook": {"injectLabel": {"key": "example.com/guard", "value": "on"},
                                      "excludeNamespaces": ["legacy"]}}),
                  "ValidatingAdmissionPolicy", "demo-lockstep-sidecar-markers")
    text = _expressions(markers)
    for name in (READINESS_GATE, SIDECAR_NAME, TOKEN_VOLUME, TOKEN_AUDIENCE):
        assert f"'{name}'" in text
    assert "object.metadata.labels['example.com/guard'] == 'on'" in text
    assert "object.metadata.labels['example.com/guard'] == 'disabled'" in text
    assert "namespaceObject.metadata.labels['example.com/guard'] == 'on'" in text
    assert '"legacy"' in text and '"kube-system"' in text
    assert markers["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
