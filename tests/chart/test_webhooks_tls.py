"""Admission webhook configurations and their TLS: the paths kopf serves, who gets injected (as the API
server would decide from the selectors), and certificates that chain, cover the Services and are never
committed."""

from __future__ import annotations

import base64
import datetime
import subprocess
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_private_key
from lockstep.operator import validation, webhooks
from lockstep_testing.chart_render import ALL_ON, CHART_DIR, NAMESPACE, NAMESPACED, REPO, Render, find, one

SERVICE_NAMES = ("demo-lockstep-webhook", "demo-lockstep-reports")


def expression_matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
    return {"In": lambda: labels.get(key) in values, "NotIn": lambda: labels.get(key) not in values,
            "Exists": lambda: key in labels, "DoesNotExist": lambda: key not in labels}[operator]()


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """The API server's label selector semantics: an absent or empty selector selects everything."""
    selector = selector or {}
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()) and all(
        expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def webhooks_called(configuration: dict[str, Any], namespace: str, namespace_labels: dict[str, str], pod_labels: dict[str, str]) -> list[str]:
    """Names of the webhooks the API server would call for a pod CREATE."""
    labels = {**namespace_labels, "kubernetes.io/metadata.name": namespace}
    return [hook["name"] for hook in configuration["webhooks"]
            if selector_matches(hook.get("namespaceSelector"), labels)
            and selector_matches(hook.get("objectSelector"), pod_labels)]


OPTED_IN = {"lockstep.dev/inject": "enabled"}
OPTED_OUT = {"lockstep.dev/inject": "disabled"}


@pytest.mark.parametrize("namespace, namespace_labels, pod_labels, injected", [
    ("agents", OPTED_IN, {"app": "weather"}, True),
    ("agents", OPTED_IN, OPTED_OUT, True),  # sent: the operator refuses it unless webhook.allowOptOut allows
    ("tools", {}, OPTED_IN, True),
    ("tools", {}, {"app": "x"}, False),
    ("tools", {}, OPTED_OUT, False),
    (NAMESPACE, OPTED_IN, OPTED_IN, False),
    ("kube-system", OPTED_IN, OPTED_IN, False),
], ids=["namespace-opt-in", "pod-opt-out", "pod-opt-in", "neither", "pod-disabled", "own-namespace",
        "kube-system"])
def test_exactly_one_webhook_injects_an_opted_in_pod(render: Render, namespace: str, namespace_labels: dict[str, str], pod_labels: dict[str, str], injected: bool) -> None:
    mutating = one(render(), "MutatingWebhookConfiguration")
    called = webhooks_called(mutating, namespace, namespace_labels, pod_labels)
    assert len(called) == (1 if injected else 0), called


def test_watch_namespaces_limit_the_webhooks(render: Render) -> None:
    objects = render(NAMESPACED)
    mutating = one(objects, "MutatingWebhookConfiguration")
    assert webhooks_called(mutating, "tools", OPTED_IN, {})
    assert not webhooks_called(mutating, "elsewhere", OPTED_IN, {})
    for validating in one(objects, "ValidatingWebhookConfiguration")["webhooks"]:
        opted = {"kubernetes.io/metadata.name": "agents", **OPTED_IN}
        assert selector_matches(validating["namespaceSelector"], opted) or \
            selector_matches(validating["namespaceSelector"], {"kubernetes.io/metadata.name": "agents"})
        assert not selector_matches(validating["namespaceSelector"], {"kubernetes.io/metadata.name": "other",
                                                                      **OPTED_IN})


def test_webhook_paths_are_the_ones_kopf_serves_for_the_operators_handlers(render: Render) -> None:
    objects = render()
    mutate_paths = {h["clientConfig"]["service"]["path"] for h in one(objects, "MutatingWebhookConfiguration")["webhooks"]}
    validate = one(objects, "ValidatingWebhookConfiguration")["webhooks"]
    assert mutate_paths == {f"/{webhooks.WEBHOOK_ID}"}  # kopf routes POST /{handler id}
    paths = [h["clientConfig"]["service"]["path"] for h in validate]
    assert paths == [f"/{webhooks.VALIDATE_ID}"] * 2 + [f"/{validation.WEBHOOK_ID}"]
    rules = validate[-1]["rules"][0]
    assert (rules["apiGroups"], rules["resources"]) == ([validation.GROUP], [validation.PLURAL])
    pod_rules = validate[0]["rules"][0]
    assert (pod_rules["operations"], pod_rules["resources"]) == (["UPDATE"], ["pods", "pods/ephemeralcontainers"])


def test_webhooks_fail_closed_without_side_effects_by_default(render: Render) -> None:
    objects = render()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in one(objects, kind)["webhooks"]:
            assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
            assert hook["admissionReviewVersions"] == ["v1"] and hook["timeoutSeconds"] == 10
            assert hook["clientConfig"]["service"] == {**hook["clientConfig"]["service"],
                                                       "name": "demo-lockstep-webhook", "namespace": NAMESPACE,
                                                       "port": 443}
    ignore = one(render({"webhook": {"failurePolicy": "Ignore", "timeoutSeconds": 5}}), "MutatingWebhookConfiguration")
    assert {(h["failurePolicy"], h["timeoutSeconds"]) for h in ignore["webhooks"]} == {("Ignore", 5)}


def _pem(secret: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def test_the_generated_certificate_chains_to_the_ca_and_covers_both_services(render: Render) -> None:
    objects = render()
    secret = one(objects, "Secret", "demo-lockstep-tls")
    ca = x509.load_pem_x509_certificate(_pem(secret, "ca.crt"))
    cert = x509.load_pem_x509_certificate(_pem(secret, "tls.crt"))
    cert.verify_directly_issued_by(ca)  # raises if the CA did not sign it
    names = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName))
    for service in SERVICE_NAMES:
        assert {service, f"{service}.{NAMESPACE}", f"{service}.{NAMESPACE}.svc"} <= names
    assert cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=3000)
    key = load_pem_private_key(_pem(secret, "tls.key"), password=None)
    public = Encoding.PEM, PublicFormat.SubjectPublicKeyInfo
    assert key.public_key().public_bytes(*public) == cert.public_key().public_bytes(*public)


def test_the_chain_check_refuses_a_certificate_from_another_ca(render: Render) -> None:
    first, second = one(render(), "Secret", "demo-lockstep-tls"), one(render(), "Secret", "demo-lockstep-tls")
    cert = x509.load_pem_x509_certificate(_pem(first, "tls.crt"))
    with pytest.raises((InvalidSignature, ValueError)):
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(_pem(second, "ca.crt")))


def test_webhooks_trust_the_same_ca_the_secret_holds(render: Render) -> None:
    objects = render()
    ca = one(objects, "Secret", "demo-lockstep-tls")["data"]["ca.crt"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert {h["clientConfig"]["caBundle"] for h in one(objects, kind)["webhooks"]} == {ca}
    checksum = one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/tls"]
    assert len(checksum) == 64


def test_every_install_render_generates_a_fresh_ca(render: Render) -> None:
    first = one(render(), "Secret", "demo-lockstep-tls")["data"]["ca.crt"]
    second = one(render(), "Secret", "demo-lockstep-tls")["data"]["ca.crt"]
    assert first != second


def test_no_certificate_or_key_is_committed() -> None:
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", str(CHART_DIR.relative_to(REPO))],
                             capture_output=True, text=True, check=True).stdout.split()
    for path in tracked:
        text = (REPO / path).read_text(errors="replace")
        assert "BEGIN CERTIFICATE" not in text and "PRIVATE KEY-----" not in text, path


def test_cert_manager_issues_the_certificate_and_injects_the_ca(render: Render) -> None:
    objects = render(ALL_ON)
    assert not find(objects, "Secret")
    certificate = one(objects, "Certificate", "demo-lockstep-tls")
    assert certificate["spec"]["secretName"] == "demo-lockstep-tls"
    for service in SERVICE_NAMES:
        assert f"{service}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    issuer = certificate["spec"]["issuerRef"]
    ca_issuer = one(objects, "Issuer", issuer["name"])
    ca_certificate = one(objects, "Certificate", ca_issuer["spec"]["ca"]["secretName"])
    assert ca_certificate["spec"]["isCA"] is True
    assert one(objects, "Issuer", ca_certificate["spec"]["issuerRef"]["name"])["spec"] == {"selfSigned": {}}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        configuration = one(objects, kind)
        assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            f"{NAMESPACE}/demo-lockstep-tls"
        assert all("caBundle" not in h["clientConfig"] for h in configuration["webhooks"])


def test_cert_manager_with_an_existing_issuer_creates_no_issuer(render: Render) -> None:
    objects = render(NAMESPACED)
    assert not find(objects, "Issuer")
    issuer = one(objects, "Certificate")["spec"]["issuerRef"]
    assert issuer == {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
