"""`helm install / upgrade / rollback / uninstall` where the helm binary is not installed: a thin command line
over Helm's own Go actions (helm-python-sdk binds Helm v4's ``pkg/action``), so what runs is Helm itself:
release history in Secrets (``sh.helm.release.v1.<release>.v<revision>``), the chart's ``crds/`` created on
install and skipped on upgrade, the three-way merge, the ownership check of existing objects, hooks, and
``helm.sh/resource-policy: keep``.

    python tests/e2e/helm.py install lockstep charts/lockstep -n lockstep-system --create-namespace \
        --set image.pullPolicy=Never --wait --timeout 5m
    python tests/e2e/helm.py upgrade lockstep charts/lockstep -n lockstep-system --wait
    python tests/e2e/helm.py rollback lockstep 1 -n lockstep-system --wait
    python tests/e2e/helm.py history lockstep -n lockstep-system
    python tests/e2e/helm.py uninstall lockstep -n lockstep-system --wait

The cluster is the one ``KUBECONFIG`` names (Helm's own resolution). Where the helm binary exists, use
it: the tests do not care which ran.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helm_python import Config, HelmError, parse_set_string

DEFAULT_CHART = Path(__file__).resolve().parents[2] / "charts" / "lockstep"
#: helm's --wait: Helm 4 waits with its kstatus watcher.
WAIT_STRATEGY = "watcher"


def values_from_sets(expressions: list[str]) -> dict[str, Any]:
    """Several ``--set`` flags as Helm merges them: later ones win, key by key."""
    values: dict[str, Any] = {}
    for expression in expressions:
        _merge(values, parse_set_string(expression))
    return values


def _merge(into: dict[str, Any], values: dict[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def duration(text: str) -> int:
    """A Go duration as helm's --timeout takes it (300s, 5m, 1m30s), or plain seconds; whole seconds."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", text)
    if parts and any(parts.groups()):
        hours, minutes, seconds = (float(group or 0) for group in parts.groups())
        return int(hours * 3600 + minutes * 60 + seconds)
    return int(float(text))


def install(config: Config, args: argparse.Namespace) -> None:
    release = config.install(args.chart, args.release, values_from_sets(args.set), namespace=args.namespace,
                             create_namespace=args.create_namespace, wait=_wait(args), timeout=args.timeout)
    _print_release(release)


def upgrade(config: Config, args: argparse.Namespace) -> None:
    release = config.upgrade(args.chart, args.release, values_from_sets(args.set), namespace=args.namespace,
                             reuse_values=args.reuse_values, wait=_wait(args), timeout=args.timeout)
    _print_release(release)


def rollback(config: Config, args: argparse.Namespace) -> None:
    config.rollback(args.release, version=args.revision, wait=_wait(args), timeout=args.timeout)
    print("Rollback was a success! Happy Helming!")


def uninstall(config: Config, args: argparse.Namespace) -> None:
    answer = config.uninstall(args.release, wait=_wait(args), timeout=args.timeout)
    if answer.get("info"):
        print(answer["info"].rstrip())
    print(f'release "{args.release}" uninstalled')


def history(config: Config, args: argparse.Namespace) -> None:
    print("REVISION\tSTATUS\tCHART\tAPP VERSION\tDESCRIPTION")
    for entry in config.history(args.release):
        print(f"{entry['revision']}\t{entry['status']}\t{entry['chart_name']}-{entry['chart_version']}\t"
              f"{entry['app_version']}\t{entry.get('description', '')}")


def _wait(args: argparse.Namespace) -> str | None:
    return WAIT_STRATEGY if args.wait else None


def _print_release(release: dict[str, Any]) -> None:
    print(f"NAME: {release['name']}\nNAMESPACE: {release['namespace']}\nSTATUS: {release['status']}\n"
          f"REVISION: {release['revision']}\nCHART: {release['chart_name']}-{release['chart_version']}")


COMMANDS: dict[str, Callable[[Config, argparse.Namespace], None]] = {
    "install": install, "upgrade": upgrade, "rollback": rollback, "uninstall": uninstall, "history": history}


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="helm.py", description=__doc__.split("\n\n")[0])
    commands = root.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        command = commands.add_parser(name)
        command.add_argument("release")
        if name in ("install", "upgrade"):
            command.add_argument("chart", nargs="?", default=str(DEFAULT_CHART))
            command.add_argument("--set", action="append", default=[])
        if name == "install":
            command.add_argument("--create-namespace", action="store_true")
        if name == "upgrade":
            command.add_argument("--reuse-values", action="store_true")
        if name == "rollback":
            command.add_argument("revision", nargs="?", type=int, help="default: the previous revision")
        command.add_argument("-n", "--namespace", default="default")
        command.add_argument("--wait", action="store_true")
        command.add_argument("--timeout", type=duration, default=300, help="e.g. 300s or 5m (as helm)")
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with Config(namespace=args.namespace) as config:
        try:
            COMMANDS[args.command](config, args)
        except HelmError as error:
            print(f"Error: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
