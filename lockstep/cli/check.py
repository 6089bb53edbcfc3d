"""``lockstep check``: is the cluster ready for Lockstep (``--pre``), is the installed release healthy (the
default), and are the guarded pods in order (``--pods``: each judged, and no Service around the in-line proxy)? In the manner of ``linkerd check`` and ``cmctl
check api``: stable check names, one line each with a hint where it fails, ``-o json``, and an exit code
(0: nothing failed, warnings allowed; 1: a check failed; 2: the cluster cannot be reached).

The checks read the cluster with the caller's credentials and change nothing: the webhook check is a
server-side dry run of a pod create.
"""

from __future__ import annotations

import datetime
import email.utils
import json
from collections.abc import Callable, Iterator
from typing import Any

import click

from lockstep.cli.check_results import CheckError, CheckResult, Context, Status
from lockstep.cli.kube_options import ClusterTarget
from lockstep.core.conditions import CONDITION_TYPE
from lockstep.core.names import INJECT_LABEL, TOKEN_AUDIENCE

__all__ = ["Check", "CheckResult", "check_command", "run_checks"]

DOCS = "https://github.com/lockstep-dev/lockstep/blob/main/docs"
#: The oldest Kubernetes with native sidecars and ValidatingAdmissionPolicy (v1).
MIN_KUBERNETES = (1, 30)
CRD_NAME = "mcpserverinterfaces.lockstep.dev"
#: The status fields the operator writes; a CRD without them would prune them silently.
CRD_STATUS_FIELDS = ("phase", "pods", "observed", "conditions", "proxy", "lastVerificationTime")
POLICIES = ("sidecar-token", "sidecar-exec", "report-stamp", "not-ready-services", "sidecar-markers")
CERT_WARN_DAYS = 30
CLOCK_SKEW_WARN = 30.0
REQUEST_TIMEOUT = 10


Check = Callable[[Context], Iterator[CheckResult]]


def _ok(name: str, message: str) -> CheckResult:
    return CheckResult(name, Status.OK, message)


def _fail(name: str, message: str, hint: str) -> CheckResult:
    return CheckResult(name, Status.FAIL, message, hint)


def _warn(name: str, message: str, hint: str) -> CheckResult:
    return CheckResult(name, Status.WARN, message, hint)


# --------------------------------------------------------------------------- before install (--pre)

def check_kubernetes_version(context: Context) -> Iterator[CheckResult]:
    version = context.kubernetes.client.VersionApi(context.api).get_code(_request_timeout=REQUEST_TIMEOUT)
    major, minor = int(version.major), int("".join(ch for ch in version.minor if ch.isdigit()) or 0)
    if (major, minor) < MIN_KUBERNETES:
        yield _fail("kubernetes-version", f"the API server is {version.git_version}; Lockstep needs 1.30 or later",
                    "native sidecars and ValidatingAdmissionPolicy v1 (docs/helm.md)")
    else:
        yield _ok("kubernetes-version", f"the API server is {version.git_version}")


def check_install_rights(context: Context) -> Iterator[CheckResult]:
    """The caller may create what the chart installs (a SelfSubjectAccessReview per kind)."""
    authorization = context.kubernetes.client.AuthorizationV1Api(context.api)
    needed = [("apiextensions.k8s.io", "customresourcedefinitions", ""),
              ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", ""),
              ("admissionregistration.k8s.io", "validatingadmissionpolicies", ""),
              ("rbac.authorization.k8s.io", "clusterroles", ""),
              ("apps", "deployments", context.namespace)]
    missing = []
    for group, resource, namespace in needed:
        review = authorization.create_self_subject_access_review({"spec": {"resourceAttributes": {
            "group": group, "resource": resource, "verb": "create", "namespace": namespace or None}}},
            _request_timeout=REQUEST_TIMEOUT)
        if not review.status.allowed:
            missing.append(f"{resource}.{group}" if group else resource)
    if missing:
        yield _fail("install-rights", f"you may not create {', '.join(missing)}",
                    "install as a cluster admin (helm install needs cluster-scoped objects)")
    else:
        yield _ok("install-rights", "you may create everything the chart installs")


# --------------------------------------------------------------------------- the installed release (default)

def check_crd(context: Context) -> Iterator[CheckResult]:
    extensions = context.kubernetes.client.ApiextensionsV1Api(context.api)
    try:
        crd = extensions.read_custom_resource_definition(CRD_NAME, _request_timeout=REQUEST_TIMEOUT)
    except context.kubernetes.client.ApiException as error:
        if error.status == 404:
            yield _fail("crd", f"{CRD_NAME} is not installed", "helm install lockstep charts/lockstep (docs/helm.md)")
            return
        raise
    established = any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])
    version = next((v for v in crd.spec.versions if v.name == "v1alpha1"), None)
    if not established or version is None:
        yield _fail("crd", f"{CRD_NAME} is not established with v1alpha1", "kubectl describe crd " + CRD_NAME)
        return
    status_schema = (((version.schema.open_apiv3_schema.properties or {}).get("status")))
    fields = set((status_schema.properties or {}) if status_schema is not None else {})
    missing = [field for field in CRD_STATUS_FIELDS if field not in fields]
    if missing:
        yield _fail("crd", f"the installed CRD lacks status fields {', '.join(missing)}: the API server prunes "
                           "what the operator writes there", "upgrade the CRD (docs/helm.md, CRDs)")
    else:
        yield _ok("crd", f"{CRD_NAME} established, v1alpha1 with every status field the operator writes")


def check_operator(context: Context) -> Iterator[CheckResult]:
    apps = context.kubernetes.client.AppsV1Api(context.api)
    deployments = apps.list_namespaced_deployment(context.namespace, label_selector=context.instance_selector(),
                                                  _request_timeout=REQUEST_TIMEOUT).items
    if not deployments:
        yield _fail("operator", f"no Lockstep operator of release {context.release} in {context.namespace}",
                    "helm install lockstep charts/lockstep -n lockstep-system --create-namespace")
        return
    for deployment in deployments:
        wanted, ready = deployment.spec.replicas or 0, deployment.status.ready_replicas or 0
        name = deployment.metadata.name
        if ready < wanted:
            yield _fail("operator", f"{name}: {ready} of {wanted} replicas ready",
                        f"kubectl -n {context.namespace} describe deploy {name}")
        else:
            yield _ok("operator", f"{name}: {ready} of {wanted} replicas ready")
        if wanted > 1:
            yield from _membership(context, ready)


def _membership(context: Context, ready: int) -> Iterator[CheckResult]:
    from lockstep.operator.replicas.membership import live_members

    objects = context.kubernetes.client.CustomObjectsApi(context.api)
    peerings = objects.list_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings",
                                                  label_selector=context.instance_selector(),
                                                  _request_timeout=REQUEST_TIMEOUT).get("items") or []
    if not peerings:
        peerings = objects.list_namespaced_custom_object("kopf.dev", "v1", context.namespace, "kopfpeerings",
                                                         _request_timeout=REQUEST_TIMEOUT).get("items") or []
    members = [len(live_members(peering.get("status") or {})) for peering in peerings]
    if not members or max(members) < ready:
        yield _fail("replicas", f"{max(members, default=0)} replicas in the peering object, {ready} ready",
                    "a replica that cannot renew its entry owns nothing: look at its log (peering)")
    else:
        yield _ok("replicas", f"{max(members)} live replicas share the resources")


def check_webhooks(context: Context) -> Iterator[CheckResult]:
    admission = context.kubernetes.client.AdmissionregistrationV1Api(context.api)
    selector = context.instance_selector()
    mutating = admission.list_mutating_webhook_configuration(label_selector=selector,
                                                             _request_timeout=REQUEST_TIMEOUT).items
    validating = admission.list_validating_webhook_configuration(label_selector=selector,
                                                                 _request_timeout=REQUEST_TIMEOUT).items
    if not mutating or not validating:
        yield _fail("webhooks", "the mutating or the validating webhook configuration is missing",
                    "helm upgrade --install the release")
        return
    empty = [w.name for config in [*mutating, *validating] for w in config.webhooks or []
             if not (w.client_config.ca_bundle or "")]
    if empty:
        yield _fail("webhooks", f"no caBundle in {', '.join(empty)}", "the TLS Secret or cert-manager's CA injector")
        return
    yield from _dry_run_injection(context)


def _dry_run_injection(context: Context) -> Iterator[CheckResult]:
    """A server-side dry run of a pod create in a namespace the webhook covers: the answer must carry the
    sidecar and the readiness gate (cmctl check api's way: the request goes through the webhook)."""
    core = context.core()
    namespaces = core.list_namespace(label_selector=f"{INJECT_LABEL}=enabled", _request_timeout=REQUEST_TIMEOUT).items
    if not namespaces:
        yield _warn("webhooks", "no namespace is opted in (lockstep.dev/inject=enabled): injection not tried",
                    "kubectl label namespace NAME lockstep.dev/inject=enabled")
        return
    namespace = namespaces[0].metadata.name
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "lockstep-check-"},
           "spec": {"containers": [{"name": "app", "image": "lockstep-check:dry-run"}]}}
    try:
        created = core.create_namespaced_pod(namespace, pod, dry_run="All", _request_timeout=REQUEST_TIMEOUT)
    except context.kubernetes.client.ApiException as error:
        reason = _api_message(error)
        yield _fail("webhooks", f"a dry-run pod in {namespace} was refused: {reason}",
                    "kubectl -n lockstep-system logs deploy/lockstep-operator (is the webhook reachable?)")
        return
    gates = [gate.condition_type for gate in created.spec.readiness_gates or []]
    sidecars = [c.name for c in created.spec.init_containers or [] if c.name == "lockstep-sidecar"]
    if CONDITION_TYPE in gates and sidecars:
        yield _ok("webhooks", f"a dry-run pod in {namespace} gets the sidecar and the readiness gate")
    else:
        yield _fail("webhooks", f"a dry-run pod in {namespace} was admitted without the sidecar",
                    "the mutating webhook does not run: failurePolicy Ignore and an unreachable operator?")


def check_admission_policies(context: Context) -> Iterator[CheckResult]:
    admission = context.kubernetes.client.AdmissionregistrationV1Api(context.api)
    selector = context.instance_selector()
    policies = {item.metadata.name for item in admission.list_validating_admission_policy(
        label_selector=selector, _request_timeout=REQUEST_TIMEOUT).items}
    bindings = {item.metadata.name for item in admission.list_validating_admission_policy_binding(
        label_selector=selector, _request_timeout=REQUEST_TIMEOUT).items}
    missing = [name for name in POLICIES
               if not any(p.endswith(f"-{name}") for p in policies) or not any(b.endswith(f"-{name}") for b in bindings)]
    if missing:
        yield _fail("admission-policies", f"missing: {', '.join(missing)}: a namespace editor could mint or read "
                                          f"the sidecar's {TOKEN_AUDIENCE} token or forge the replay stamp",
                    "helm upgrade the release (docs/threat-model.md, Trust boundary)")
    else:
        yield _ok("admission-policies", "the trust-boundary policies and their bindings are in place")


def check_certificates(context: Context) -> Iterator[CheckResult]:
    from cryptography import x509

    secrets = context.core().list_namespaced_secret(context.namespace, label_selector=context.instance_selector(),
                                                    _request_timeout=REQUEST_TIMEOUT).items
    serving = [s for s in secrets if (s.type == "kubernetes.io/tls") and (s.data or {}).get("tls.crt")]
    if not serving:
        yield _warn("certificates", "no serving certificate Secret of the release found",
                    "with cert-manager, check the Certificate: kubectl -n lockstep-system get certificate")
        return
    import base64

    now = datetime.datetime.now(datetime.UTC)
    for secret in serving:
        for key in ("tls.crt", "ca.crt"):
            if not (secret.data or {}).get(key):
                continue
            certificate = x509.load_pem_x509_certificate(base64.b64decode(secret.data[key]))
            days = (certificate.not_valid_after_utc - now).days
            label = f"{secret.metadata.name} {key}"
            if days < 0:
                yield _fail("certificates", f"{label} expired {-days} days ago",
                            "renew it: helm upgrade regenerates the chart's own, cert-manager renews its own")
            elif days < CERT_WARN_DAYS:
                yield _warn("certificates", f"{label} expires in {days} days", "renew it before it expires")
            else:
                yield _ok("certificates", f"{label} valid for {days} more days")


def check_clock_skew(context: Context) -> Iterator[CheckResult]:
    """The API server's clock against this machine's (reports carry a sentAt the operator bounds)."""
    version_api = context.kubernetes.client.VersionApi(context.api)
    _, _, headers = version_api.get_code_with_http_info(_request_timeout=REQUEST_TIMEOUT)
    date = (headers or {}).get("Date") or (headers or {}).get("date")
    if not date:
        yield _warn("clock-skew", "the API server sent no Date header", "")
        return
    skew = abs((datetime.datetime.now(datetime.UTC) - email.utils.parsedate_to_datetime(date)).total_seconds())
    if skew > CLOCK_SKEW_WARN:
        yield _warn("clock-skew", f"this machine's clock is {skew:.0f}s from the API server's",
                    "nodes need synchronised clocks: reports more than 120 s off are refused (ClockSkew)")
    else:
        yield _ok("clock-skew", f"within {max(skew, 1.0):.0f}s of the API server's clock")


def check_pod_security(context: Context) -> Iterator[CheckResult]:
    """Opted-in namespaces: Lockstep enforces baseline on the pods it guards itself; a namespace that
    does not enforce Pod Security at all is worth knowing about (its other pods are not guarded)."""
    namespaces = context.core().list_namespace(label_selector=f"{INJECT_LABEL}=enabled",
                                               _request_timeout=REQUEST_TIMEOUT).items
    unenforced = [n.metadata.name for n in namespaces
                  if (n.metadata.labels or {}).get("pod-security.kubernetes.io/enforce") not in ("baseline", "restricted")]
    if unenforced:
        yield _warn("pod-security", f"opted-in namespaces without Pod Security enforce=baseline: "
                                    f"{', '.join(sorted(unenforced)[:10])}",
                    "Lockstep enforces baseline on the pods it guards; label the namespaces "
                    "pod-security.kubernetes.io/enforce=baseline for the rest")
    else:
        yield _ok("pod-security", f"{len(namespaces)} opted-in namespaces enforce Pod Security baseline or stricter")


# --------------------------------------------------------------------------- the guarded pods (--pods)

def check_pods(context: Context) -> Iterator[CheckResult]:
    """Pods with Lockstep's readiness gate: one whose condition is still missing after its probe's
    staleAfter (default 180 s) has never been judged (its sidecar cannot report)."""
    pods = context.core().list_pod_for_all_namespaces(_request_timeout=REQUEST_TIMEOUT).items
    now = datetime.datetime.now(datetime.UTC)
    gated = [p for p in pods if any(g.condition_type == CONDITION_TYPE for g in p.spec.readiness_gates or [])]
    unjudged = [f"{p.metadata.namespace}/{p.metadata.name}" for p in gated
                if p.status.phase == "Running" and not any(c.type == CONDITION_TYPE for c in p.status.conditions or [])
                and p.status.start_time and (now - p.status.start_time).total_seconds() > 180]
    held = [f"{p.metadata.namespace}/{p.metadata.name} ({c.reason})" for p in gated
            for c in p.status.conditions or [] if c.type == CONDITION_TYPE and c.status != "True"]
    if unjudged:
        yield _fail("pods", f"{len(unjudged)} gated pods never judged: {', '.join(unjudged[:10])}",
                    "their sidecar cannot report: kubectl logs POD -c lockstep-sidecar")
    else:
        yield _ok("pods", f"{len(gated)} gated pods, each judged")
    if held:
        yield _warn("pods-held", f"{len(held)} pods held out: {', '.join(held[:10])}",
                    "lockstep diff RESOURCE -n NAMESPACE shows why")


def check_services(context: Context) -> Iterator[CheckResult]:
    """Services that select the pods of an Isolate or Quarantine interface on another port than the in-line
    proxy's (``lockstep-mcp``) or the sidecar's own: computed here from the Services, pods and interfaces, not
    read from the operator's status (which may be behind, or the operator down)."""
    bypassing = [f"{namespace}/{entry}" for namespace, entry in _bypassing_services(context)]
    if bypassing:
        yield _fail("services", f"{len(bypassing)} Service ports bypass the in-line proxy: {', '.join(bypassing[:10])}",
                    "point them at targetPort lockstep-mcp: nothing else in a guarded pod may answer agents "
                    f"({DOCS}/operator.md#services)")
    else:
        yield _ok("services", "every Service that selects guarded pods targets the in-line proxy")


def _bypassing_services(context: Context) -> list[tuple[str, str]]:
    from lockstep.core.names import GROUP, PLURAL, VERSION
    from lockstep.operator.cache import PodRecord
    from lockstep.operator.judge import Policy
    from lockstep.operator.quarantine import bypassing_ports, service_entry

    from lockstep.core.selection import selector_matches

    plain = context.api.sanitize_for_serialization
    interfaces = context.kubernetes.client.CustomObjectsApi(context.api).list_cluster_custom_object(
        GROUP, VERSION, PLURAL, _request_timeout=REQUEST_TIMEOUT).get("items") or []
    core = context.core()
    pods = [PodRecord.from_body(plain(pod)) for pod in core.list_pod_for_all_namespaces(
        _request_timeout=REQUEST_TIMEOUT).items]
    services = {(item["metadata"]["namespace"], item["metadata"]["name"]): service_entry(item)
                for item in (plain(service) for service in core.list_service_for_all_namespaces(
                    _request_timeout=REQUEST_TIMEOUT).items)}
    found = []
    for body in interfaces:
        policy = Policy.from_resource(body)
        selected = [pod for pod in pods
                    if pod.namespace == policy.namespace and selector_matches(policy.selector, pod.labels)]
        found += [(policy.namespace, f"{entry} ({policy.name})") for entry in bypassing_ports(policy, selected, services)]
    return found


def check_approvals(context: Context) -> Iterator[CheckResult]:
    """The signed-approval policies and what they would refuse (lockstep.cli.check_approvals)."""
    from lockstep.cli.check_approvals import check_approvals as approvals

    yield from approvals(context)


PRE_CHECKS: tuple[Check, ...] = (check_kubernetes_version, check_install_rights, check_clock_skew)
INSTALLED_CHECKS: tuple[Check, ...] = (check_kubernetes_version, check_crd, check_operator, check_webhooks,
                                       check_admission_policies, check_certificates, check_clock_skew,
                                       check_pod_security, check_approvals)
POD_CHECKS: tuple[Check, ...] = (check_pods, check_services)


def run_checks(context: Context, checks: tuple[Check, ...]) -> list[CheckResult]:
    results: list[CheckResult] = []
    for check in checks:
        name = check.__name__.removeprefix("check_").replace("_", "-")
        try:
            results.extend(check(context))
        except context.kubernetes.client.ApiException as error:
            results.append(_fail(name, f"the API server refused: {_api_message(error)}",
                                 "your credentials may lack read access (kubectl auth can-i --list)"))
        except Exception as error:  # noqa: BLE001  # a connection error of urllib3 has no common base to name
            raise CheckError(f"cannot reach the cluster: {str(error).splitlines()[0][:200]}") from None
    return results


def _api_message(error: Any) -> str:
    try:
        return str(json.loads(error.body).get("message") or error.reason)[:300]
    except (TypeError, ValueError, AttributeError):
        return str(error.reason or error.status)


def _render(results: list[CheckResult]) -> str:
    marks = {Status.OK: "√", Status.WARN: "‼", Status.FAIL: "×"}
    lines = []
    for result in results:
        lines.append(f"{marks[result.status]} {result.name}: {result.message}")
        if result.hint and result.status is not Status.OK:
            lines.append(f"    hint: {result.hint}")
    failed = sum(result.status is Status.FAIL for result in results)
    warned = sum(result.status is Status.WARN for result in results)
    lines.append(f"Status check results: {len(results) - failed - warned} ok, {warned} warnings, {failed} failed")
    return "\n".join(lines)


@click.command("check")
@click.option("--pre", "mode", flag_value="pre", help="Before installing: can Lockstep run on this cluster?")
@click.option("--installed", "mode", flag_value="installed", default=True,
              help="The installed release: CRD, operator, webhooks, policies, certificates (the default).")
@click.option("--pods", is_flag=True, help="Also the guarded pods: each judged, which are held out.")
@click.option("--release", default="lockstep", show_default=True, help="The Helm release name.")
@click.option("-n", "--namespace", default="lockstep-system", show_default=True, help="The release's namespace.")
@click.option("--kubeconfig", default=None, metavar="FILE", help="Path of the kubeconfig (default: $KUBECONFIG).")
@click.option("--context", "kube_context", default=None, help="kubeconfig context to use.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def check_command(mode: str, pods: bool, release: str, namespace: str, kubeconfig: str | None,
                  kube_context: str | None, output: str) -> None:
    """Check the cluster before and after installing Lockstep.

    --pre before installing, the installed release by default, --pods for the guarded pods. Exit 0: nothing
    failed (warnings allowed); 1: a check failed; 2: unreachable."""
    import kubernetes

    from lockstep.cli.cluster import _load_configuration

    configuration, _ = _load_configuration(ClusterTarget(kubeconfig, kube_context, namespace))
    with kubernetes.client.ApiClient(configuration) as api:
        context = Context(api, release, namespace)
        checks = PRE_CHECKS if mode == "pre" else INSTALLED_CHECKS
        try:
            results = run_checks(context, checks + (POD_CHECKS if pods else ()))
        except CheckError as error:
            click.echo(f"error: {error}", err=True)
            raise SystemExit(2) from None
    if output == "json":
        click.echo(json.dumps({"checks": [result.to_dict() for result in results]}, indent=2))
    else:
        click.echo(_render(results))
    raise SystemExit(1 if any(result.status is Status.FAIL for result in results) else 0)

