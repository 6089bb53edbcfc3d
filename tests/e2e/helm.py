"""`helm install` / `helm uninstall` of a local chart where the helm binary is not installed.

    python tests/e2e/helm.py install lockstep charts/lockstep -n lockstep-system --create-namespace \
        --set operator.image.pullPolicy=Never --wait
    python tests/e2e/helm.py uninstall lockstep -n lockstep-system --wait

It mirrors what Helm 3 does for these two commands, with the real Helm engine (helm-python-sdk) to
render: the chart's ``crds/`` first, applied and waited for until Established (and, like Helm, never
deleted on uninstall); then the templates in Helm's install order (InstallOrder in helm's
pkg/release/util/kind_sorter.go), test hooks (``helm.sh/hook: test``) left out as `helm install` does;
uninstall deletes in the reverse order. Objects are applied with kubectl's server-side apply under the
field manager ``helm``. Where the helm binary exists, use it: tests/e2e does not care which installed.
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


def install_crds(chart_dir: Path, timeout: float) -> None:
    crds = sorted((chart_dir / "crds").glob("*.yaml"))
    if not crds:
        return
    kubectl("apply", "--server-side", "--field-manager=helm", *(arg for crd in crds for arg in ("-f", str(crd))))
    names = [doc["metadata"]["name"] for crd in crds for doc in yaml.safe_load_all(crd.read_text()) if doc]
    kubectl("wait", "--for=condition=Established", f"--timeout={int(timeout)}s",
            *(f"customresourcedefinition/{name}" for name in names))


def install(args: argparse.Namespace) -> None:
    chart_dir = Path(args.chart)
    if args.create_namespace and kubectl("get", "namespace", args.namespace, check=False).returncode != 0:
        kubectl("create", "namespace", args.namespace)
    install_crds(chart_dir, args.timeout)
    objects = render(chart_dir, args.release, args.namespace, parse_set(args.set))
    for obj in objects:
        obj["metadata"].setdefault("namespace", args.namespace) if _namespaced(obj) else None
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
    for obj in reversed(objects):
        scope = ["-n", obj["metadata"].get("namespace") or args.namespace] if _namespaced(obj) else []
        kubectl("delete", "--ignore-not-found", "--wait=false", *scope, obj["kind"], obj["metadata"]["name"])
    if args.wait:
        deadline = time.monotonic() + args.timeout
        selector = f"app.kubernetes.io/instance={args.release}"
        while kubectl("get", "pods", "-n", args.namespace, "-l", selector, "-o", "name").stdout.strip():
            if time.monotonic() > deadline:
                raise HelmError(f"pods of release {args.release} still there after {args.timeout:.0f}s")
            time.sleep(1)
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
    args = parser.parse_args(argv)
    try:
        install(args) if args.command == "install" else uninstall(args)
    except HelmError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
