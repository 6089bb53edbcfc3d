"""`helm install` / `helm uninstall` of a local chart where the helm binary is not installed.

    python tests/e2e/helm.py install lockstep charts/lockstep -n lockstep-system --create-namespace \
        --set operator.image.pullPolicy=Never --wait
    python tests/e2e/helm.py uninstall lockstep -n lockstep-system --wait

It mirrors what Helm 3 does for these two commands, with the real Helm engine (helm-python-sdk) to
render:

* the chart's ``crds/`` first (kopf's peering CRDs): each created when it does not exist and skipped
  when it does, never updated (Helm's rule for crds/), then waited for until Established;
* the templates, the MCPServerInterface CRD among them, in Helm's install order (InstallOrder in helm's
  pkg/release/util/kind_sorter.go), test hooks (``helm.sh/hook: test``) left out as `helm install` does,
  each stamped with Helm's ownership metadata (label ``app.kubernetes.io/managed-by: Helm``,
  annotations ``meta.helm.sh/release-name`` and ``meta.helm.sh/release-namespace``). Like Helm, an
  object that exists without that metadata, or with another release's, is not taken over: the install
  fails with Helm's message, unless ``--take-ownership`` (Helm 3.17) is given. Objects that an earlier
  run of this stand-in applied before it stamped the metadata (field manager ``helm``) count as the
  release's own, except CRDs: those came from the crds/ pass, which real Helm never owns either
  (docs/helm.md, "Upgrading from a release with CRDs in crds/");
* objects are applied with kubectl's server-side apply under the field manager ``helm``, so rerunning
  upgrades, CRDs included;
* uninstall deletes in the reverse order, except objects annotated ``helm.sh/resource-policy: keep``
  (the CRD, with ``crds.keep``), which it lists as Helm does; the crds/ CRDs are never deleted.

There is no release history: an upgrade does not delete what the previous release had and the new one
has not. Where the helm binary exists, use it: tests/e2e does not care which installed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

#: helm pkg/release/util/kind_sorter.go InstallOrder (the kinds this chart can render, in that order).
INSTALL_ORDER = ["PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
                 "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
                 "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole",
                 "ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding",
                 "RoleBindingList", "Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet",
                 "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
                 "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]


class HelmError(RuntimeError):
    """A step of the install or uninstall failed; the message says which."""


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise HelmError(f"kubectl {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result


def parse_set(pairs: list[str]) -> dict[str, Any]:
    """``--set a.b=c`` as Helm reads it (scalars only: true/false/null/integers are typed)."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, _, raw = pair.partition("=")
        value: Any = yaml.safe_load(raw) if raw else ""
        node = values
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return values


def render(chart_dir: Path, release: str, namespace: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    from helm_python.chart import Chart

    with Chart.load(chart_dir) as chart:
        rendered = chart.render(values=values, name=release, namespace=namespace, is_install=True)
    # Helm's render is {template path: text}; NOTES.txt is printed, not applied.
    objects = [o for path, text in sorted(rendered.items()) if not path.endswith(".txt")
               for o in yaml.safe_load_all(text) if o]
    objects = [o for o in objects if "test" not in (o["metadata"].get("annotations") or {}).get("helm.sh/hook", "")]
    return sorted(objects, key=lambda o: INSTALL_ORDER.index(o["kind"]) if o["kind"] in INSTALL_ORDER
                  else len(INSTALL_ORDER))


MANAGED_BY = "app.kubernetes.io/managed-by"
RELEASE_NAME, RELEASE_NAMESPACE = "meta.helm.sh/release-name", "meta.helm.sh/release-namespace"
RESOURCE_POLICY = "helm.sh/resource-policy"


def install_crds(chart_dir: Path, timeout: float) -> None:
    """Helm's crds/ pass: create what is missing, skip what exists (never an update), wait until served."""
    crds = [doc for path in sorted((chart_dir / "crds").glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
            if doc]
    if not crds:
        return
    names = [crd["metadata"]["name"] for crd in crds]
    existing = set(kubectl("get", "customresourcedefinitions", "-o", "name").stdout.split())
    for crd in crds:
        if f"customresourcedefinition.apiextensions.k8s.io/{crd['metadata']['name']}" in existing:
            print(f"crds/: {crd['metadata']['name']} exists, skipped (Helm never upgrades crds/)", file=sys.stderr)
            continue
        kubectl("create", "-f", "-", stdin=json.dumps(crd))
    kubectl("wait", "--for=condition=Established", f"--timeout={int(timeout)}s",
            *(f"customresourcedefinition/{name}" for name in names))


def stamp(obj: dict[str, Any], release: str, namespace: str) -> dict[str, Any]:
    """Helm's ownership metadata, which Helm writes on every object of a release."""
    metadata = obj["metadata"]
    metadata["labels"] = {**(metadata.get("labels") or {}), MANAGED_BY: "Helm"}
    metadata["annotations"] = {**(metadata.get("annotations") or {}), RELEASE_NAME: release,
                               RELEASE_NAMESPACE: namespace}
    return obj


def ownership_problems(existing: dict[str, Any], release: str, namespace: str) -> list[str]:
    """What Helm's checkOwnership (pkg/action/validate.go) finds wrong with an object it did not create."""
    metadata = existing.get("metadata") or {}
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    problems = []
    for where, values, key, wanted in (("label", labels, MANAGED_BY, "Helm"),
                                       ("annotation", annotations, RELEASE_NAME, release),
                                       ("annotation", annotations, RELEASE_NAMESPACE, namespace)):
        if key not in values:
            problems.append(f'{where} validation error: missing key "{key}": must be set to "{wanted}"')
        elif values[key] != wanted:
            problems.append(f'{where} validation error: key "{key}" must equal "{wanted}": '
                            f'current value is "{values[key]}"')
    return problems


def check_ownership(objects: list[dict[str, Any]], release: str, namespace: str, take_ownership: bool) -> None:
    for obj in objects:
        scope = ["-n", obj["metadata"]["namespace"]] if _namespaced(obj) else []
        found = kubectl("get", "--ignore-not-found", "--show-managed-fields", "-o", "json", *scope, obj["kind"],
                        obj["metadata"]["name"], check=False)
        if found.returncode != 0 or not found.stdout.strip():
            continue  # not there (or a kind the server does not serve yet): created by the apply
        existing = json.loads(found.stdout)
        problems = ownership_problems(existing, release, namespace)
        metadata = existing.get("metadata") or {}
        unstamped = not {RELEASE_NAME, RELEASE_NAMESPACE} & set(metadata.get("annotations") or {})
        applied_here = any(entry.get("manager") == "helm" for entry in metadata.get("managedFields") or [])
        if not problems or take_ownership or (unstamped and applied_here and obj["kind"] != "CustomResourceDefinition"):
            continue
        where = obj["metadata"].get("namespace", "") if scope else ""
        raise HelmError(f'Unable to continue with install: {obj["kind"]} "{obj["metadata"]["name"]}" in namespace '
                        f'"{where}" exists and cannot be imported into the current release: invalid ownership '
                        f'metadata; {"; ".join(problems)}')


def install(args: argparse.Namespace) -> None:
    chart_dir = Path(args.chart)
    if args.create_namespace and kubectl("get", "namespace", args.namespace, check=False).returncode != 0:
        kubectl("create", "namespace", args.namespace)
    install_crds(chart_dir, args.timeout)
    objects = render(chart_dir, args.release, args.namespace, parse_set(args.set))
    for obj in objects:
        obj["metadata"].setdefault("namespace", args.namespace) if _namespaced(obj) else None
        stamp(obj, args.release, args.namespace)
    check_ownership(objects, args.release, args.namespace, args.take_ownership)
    for obj in objects:
        kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=helm", "-f", "-",
                stdin=json.dumps(obj))
    print(f"NAME: {args.release}\nNAMESPACE: {args.namespace}\nSTATUS: deployed ({len(objects)} objects)")
    if args.wait:
        for obj in objects:
            if obj["kind"] == "Deployment":
                kubectl("rollout", "status", "-n", args.namespace, f"deployment/{obj['metadata']['name']}",
                        f"--timeout={int(args.timeout)}s")


def uninstall(args: argparse.Namespace) -> None:
    objects = render(Path(args.chart), args.release, args.namespace, parse_set(args.set))
    kept = [obj for obj in objects if (obj["metadata"].get("annotations") or {}).get(RESOURCE_POLICY) == "keep"]
    for obj in reversed(objects):
        if obj in kept:
            continue
        scope = ["-n", obj["metadata"].get("namespace") or args.namespace] if _namespaced(obj) else []
        kubectl("delete", "--ignore-not-found", "--wait=false", *scope, obj["kind"], obj["metadata"]["name"])
    if args.wait:
        deadline = time.monotonic() + args.timeout
        selector = f"app.kubernetes.io/instance={args.release}"
        while kubectl("get", "pods", "-n", args.namespace, "-l", selector, "-o", "name").stdout.strip():
            if time.monotonic() > deadline:
                raise HelmError(f"pods of release {args.release} still there after {args.timeout:.0f}s")
            time.sleep(1)
    if kept:
        print("These resources were kept due to the resource policy:")
        for obj in kept:
            print(f"[{obj['kind']}] {obj['metadata']['name']}")
    print(f'release "{args.release}" uninstalled')


def duration(text: str) -> float:
    """A Go duration as helm's --timeout takes it (300s, 5m, 1m30s), or plain seconds."""
    import re
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", text)
    if parts and any(parts.groups()):
        hours, minutes, seconds = (float(group or 0) for group in parts.groups())
        return hours * 3600 + minutes * 60 + seconds
    return float(text)


def _namespaced(obj: dict[str, Any]) -> bool:
    return obj["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                               "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
                               "PriorityClass", "StorageClass", "PersistentVolume", "IngressClass", "APIService",
                               "ClusterKopfPeering", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="helm.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("install", "uninstall"):
        command = commands.add_parser(name)
        command.add_argument("release")
        command.add_argument("chart", nargs="?" if name == "uninstall" else None,
                             default=str(Path(__file__).resolve().parents[2] / "charts" / "lockstep"))
        command.add_argument("-n", "--namespace", default="default")
        command.add_argument("--set", action="append", default=[])
        command.add_argument("--wait", action="store_true")
        command.add_argument("--timeout", type=duration, default=300.0, help="e.g. 300s or 5m (as helm)")
        if name == "install":
            command.add_argument("--create-namespace", action="store_true")
            command.add_argument("--take-ownership", action="store_true",
                                 help="take over existing objects that lack this release's ownership metadata")
    args = parser.parse_args(argv)
    try:
        install(args) if args.command == "install" else uninstall(args)
    except HelmError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
