"""The offline and live-server commands: hash, snapshot, verify, diff."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from lockstep.cli.kube_options import ClusterTarget, cluster_options
from lockstep.cli.output import dump_json, dump_yaml
from lockstep.cli.targets import (
    LoadedTarget,
    UsageError,
    is_url,
    load_document,
    load_target,
    parse_headers,
    pinned_from,
    snapshot_from,
)
from lockstep.core import InterfaceDigest, LockstepError
from lockstep.core.manifest import build_manifest, is_manifest
from lockstep.core.revision import Revision

EXIT_SAME = 0
EXIT_DRIFT = 1
EXIT_ERROR = 2

SEVERITIES = ("low", "medium", "high")


def target_options(function: Any) -> Any:
    """Options shared by every command that reads a live server."""
    function = click.option(
        "-H", "--header", "headers", multiple=True, metavar="'NAME: VALUE'",
        help="HTTP header for the MCP server (repeatable); 'NAME: @FILE' reads the value from FILE.",
    )(function)
    function = click.option(
        "--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True, envvar="LOCKSTEP_TIMEOUT",
        help="Seconds allowed for reading the whole interface.",
    )(function)
    function = click.option(
        "--transport", type=click.Choice(["streamable-http", "sse"]), default=None,
        help="MCP transport (default: sse when the URL path ends in /sse, else streamable-http).",
    )(function)
    function = click.option(
        "--client-capabilities", "client_capabilities", default=None, metavar="LIST",
        help="Client capabilities the probe announces, comma-separated: sampling, elicitation, roots, or "
             "'none' (default: all three, as agents announce them; verify and --add-to: the manifest's "
             "spec.probe.clientCapabilities). A server may show more tools to a client that announces them.",
    )(function)
    function = click.option(
        "--ignore", "ignore", multiple=True, metavar="POINTER",
        help="JSON pointer of a volatile field to leave out of the digest, e.g. '/tools/*/_meta/ts' (repeatable).",
    )(function)
    return function


def _load(target: str, headers: Sequence[str], timeout: float, transport: str | None,
          capabilities: tuple[str, ...] | None = None) -> LoadedTarget:
    return load_target(target, headers=parse_headers(headers), timeout=timeout, transport=transport,
                       client_capabilities=capabilities)


def _capabilities(value: str | None, manifest: Any = None) -> tuple[str, ...] | None:
    """What the probe announces: ``--client-capabilities``, else the manifest's
    ``spec.probe.clientCapabilities`` (what the sidecar announces for it), else None (the reader's default)."""
    from lockstep.core.capabilities import parse_client_capabilities

    if value is None and isinstance(manifest, dict) and is_manifest(manifest):
        probe = (manifest.get("spec") or {}).get("probe") or {}
        if isinstance(probe, dict) and isinstance(probe.get("clientCapabilities"), list):
            value = ",".join(map(str, probe["clientCapabilities"])) or "none"
    if value is None:
        return None
    try:
        return parse_client_capabilities(value)
    except ValueError as error:
        raise UsageError(f"--client-capabilities: {error}") from None


def _revision(loaded: LoadedTarget, ignore: Sequence[str]) -> Revision:
    try:
        return Revision.of(loaded.interface, ignore)
    except LockstepError as error:
        raise UsageError(str(error)) from None


def _digest_table(digest: InterfaceDigest) -> str:
    rows = [("KIND", "NAME", "DIGEST")] + [
        (entry.kind.value, entry.name, entry.digest) for entry in digest.components
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(2)]
    lines = [f"{digest.digest}  {digest.formula}", ""]
    lines += [f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}" for row in rows]
    return "\n".join(lines) + "\n"


@click.command("hash")
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--save", type=click.Path(dir_okay=False, writable=True), help="Also write the interface document to FILE.")
@target_options
def hash_command(target: str, as_json: bool, save: str | None, headers: Sequence[str], timeout: float,
                 transport: str | None, client_capabilities: str | None, ignore: Sequence[str]) -> None:
    """Print the digests of an interface (a live server or a file).

    \b
    Examples:
      # digest a live server and keep its interface for offline pinning
      lockstep hash http://127.0.0.1:8000/mcp --save weather.json
      # digest a saved interface
      lockstep hash weather.json --json
    """
    loaded = _load(target, headers, timeout, transport, _capabilities(client_capabilities))
    revision = _revision(loaded, ignore)
    if save:
        try:
            Path(save).write_text(dump_json(loaded.interface.to_document()), encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot write {save}: {error.strerror or error}") from None
        click.echo(f"saved the interface of {target} to {save} ({len(revision.digest.components)} components; "
                   f"lockstep hash {save} gives the same digests)", err=True)
    click.echo(dump_json(revision.digest.to_dict()) if as_json else _digest_table(revision.digest), nl=False)


def _endpoint_from(target: str, port: int | None, path: str | None, transport: str | None) -> dict[str, Any]:
    endpoint: dict[str, Any] = {"port": 8080, "path": "/mcp", "transport": "streamable-http"}
    if is_url(target):
        url = urlsplit(target)
        endpoint["port"] = url.port or (443 if url.scheme == "https" else 80)
        endpoint["path"] = url.path or "/"
        if url.path.rstrip("/").endswith("/sse"):
            endpoint["transport"] = "sse"
    if port is not None:
        endpoint["port"] = port
    if path is not None:
        endpoint["path"] = path
    if transport is not None:
        endpoint["transport"] = transport
    return endpoint


def _parse_selector(values: Sequence[str]) -> dict[str, str] | None:
    if not values:
        return None
    selector = {}
    for value in values:
        key, separator, label = value.partition("=")
        if not separator or not key:
            raise UsageError(f"selector {value!r} is not of the form key=value")
        selector[key] = label
    return selector


@click.command("snapshot")
@click.argument("target")
@click.option("--name", default=None, help="Name of the MCPServerInterface (required without --add-to).")
@click.option("-n", "--namespace", default=None, envvar="LOCKSTEP_NAMESPACE", help="Namespace of the resource.")
@click.option("-l", "--selector", "selector", multiple=True, metavar="KEY=VALUE",
              help="Pod label the resource selects (repeatable; default app=NAME).")
@click.option("--digests-only", is_flag=True, help="Leave the full definitions out of the manifest.")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.option("--endpoint-port", type=click.IntRange(1, 65535), default=None,
              help="Port of the server inside the pod (default: the URL's).")
@click.option("--endpoint-path", default=None, help="Path of the MCP endpoint inside the pod (default: the URL's).")
@click.option("--add-to", "add_to", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Add the interface as one more approved revision (a view) of this manifest, in place.")
@target_options
def snapshot_command(target: str, name: str | None, namespace: str | None, selector: Sequence[str],
                     digests_only: bool, output: str, endpoint_port: int | None, endpoint_path: str | None,
                     add_to: str | None, headers: Sequence[str], timeout: float, transport: str | None,
                     client_capabilities: str | None, ignore: Sequence[str]) -> None:
    """Print an MCPServerInterface that approves the interface of TARGET.

    \b
    Examples:
      # pin a reviewed server and apply the result
      lockstep snapshot http://weather.agents:8080/mcp --name weather -n agents > weather.yaml
      kubectl apply -f weather.yaml
      # a server whose lists depend on the caller: pin one view per identity
      lockstep snapshot http://127.0.0.1:8080/mcp --add-to weather.yaml -H 'Authorization: @admin.token'
      # also approve the view of agents that announce no client capabilities
      lockstep snapshot http://127.0.0.1:8080/mcp --add-to weather.yaml --client-capabilities none
    """
    if add_to is not None:
        _add_view(add_to, target, headers, timeout, transport, ignore, digests_only, client_capabilities)
        return
    if name is None:
        raise UsageError("--name is required (the MCPServerInterface's name), unless --add-to FILE is given")
    _check_name(name, "--name", DNS_SUBDOMAIN, 253)
    if namespace is not None:
        _check_name(namespace, "-n/--namespace", DNS_LABEL, 63)
    capabilities = _capabilities(client_capabilities)
    loaded = _load(target, headers, timeout, transport, capabilities)
    revision = _revision(loaded, ignore)
    endpoint = _endpoint_from(target, endpoint_port, endpoint_path, transport)
    # The sidecar must announce what this snapshot's probe announced, or it reads another view.
    probe = {"clientCapabilities": list(capabilities)} if capabilities is not None and is_url(target) else None
    manifest = build_manifest(
        revision, name=name, namespace=namespace, selector=_parse_selector(selector),
        endpoint=endpoint, ignore=list(ignore), with_definitions=not digests_only, probe=probe,
    )
    click.echo(dump_yaml(manifest) if output == "yaml" else dump_json(manifest), nl=False)
    click.echo(f"endpoint {endpoint['transport']} on port {endpoint['port']}, path {endpoint['path']}: "
               f"{_endpoint_source(target, endpoint_port, endpoint_path)}", err=True)


def _add_view(path: str, target: str, headers: Sequence[str], timeout: float, transport: str | None,
              ignore: Sequence[str], digests_only: bool, client_capabilities: str | None) -> None:
    """Append TARGET's interface to the manifest at ``path`` as one more approved revision."""
    manifest = load_document(path)
    pinned = pinned_from(manifest, path)
    if pinned.source != "manifest":
        raise UsageError(f"{path}: --add-to wants an MCPServerInterface manifest (lockstep snapshot --name ...)")
    if ignore and list(ignore) != pinned.ignore.pointers:
        raise UsageError(f"{path}: its revisions are digested with spec.ignore {pinned.ignore.pointers}; "
                         "--ignore must be the same or left out")
    capabilities = _capabilities(client_capabilities, manifest)
    revision = _revision(_load(target, headers, timeout, transport, capabilities), pinned.ignore.pointers)
    approved = manifest["spec"].setdefault("approved", [])
    if any(entry.get("digest") == revision.aggregate for entry in approved):
        click.echo(f"{path}: {revision.aggregate} is already approved ({len(approved)} revisions); unchanged",
                   err=True)
        return
    approved.append(revision.to_spec(with_definitions=not digests_only))
    Path(path).write_text(dump_json(manifest) if path.endswith(".json") else dump_yaml(manifest))
    click.echo(f"{path}: added {revision.aggregate} from {target} ({len(approved)} approved revisions)", err=True)


DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _check_name(value: str, option: str, pattern: re.Pattern[str], limit: int) -> None:
    """Kubernetes refuses names that are not DNS-1123: say so now, not at kubectl apply."""
    if len(value) > limit or not pattern.match(value):
        raise UsageError(f"{option} {value!r} is not a valid Kubernetes name: lowercase letters, digits and '-'"
                         f"{' and .' if pattern is DNS_SUBDOMAIN else ''}, starting and ending with a letter or "
                         f"digit, at most {limit} characters")


def _endpoint_source(target: str, port: int | None, path: str | None) -> str:
    given = [option for option, value in (("--endpoint-port", port), ("--endpoint-path", path)) if value is not None]
    if is_url(target):
        source = "from the URL" + (f" and {', '.join(given)}" if given else "")
        host = urlsplit(target).hostname or ""
        if port is None and (host == "localhost" or host.startswith("127.") or host == "::1"):
            # A loopback URL is most often `kubectl port-forward`, whose local port is not the pod's.
            source += ("; through kubectl port-forward the pod's port differs: pass --endpoint-port "
                       "(the container port of the MCP server)")
        return source
    if given:
        return f"from {', '.join(given)}, the rest the defaults"
    return ("the defaults: TARGET is a file, so the pod's port and path are not known; "
            "set --endpoint-port and --endpoint-path")


def _findings_between(approved: Sequence[Revision], observed: Revision) -> list[Any]:
    from lockstep.core.diff import closest_revision, diff_revisions

    return list(diff_revisions(closest_revision(approved, observed), observed))


@click.command("verify")
@click.argument("target")
@click.option("--against", "against", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="The pinned interface: an MCPServerInterface manifest or a snapshot JSON.")
@click.option("--fail-on", type=click.Choice(SEVERITIES), default="low", show_default=True,
              help="Lowest severity of drift that fails (exit 1).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@target_options
def verify_command(target: str, against: str, fail_on: str, as_json: bool, headers: Sequence[str],
                   timeout: float, transport: str | None, client_capabilities: str | None,
                   ignore: Sequence[str]) -> None:
    """Check that TARGET serves an approved interface (a CI gate).

    Exit 0 when it matches an approved revision, 1 on drift (the diff is
    printed), 2 on unusable input or an unreachable server.

    \b
    Examples:
      # gate a deployment on the pinned interface
      lockstep verify http://staging-weather:8080/mcp --against deploy/weather.yaml
      # fail only on high-severity drift
      lockstep verify http://staging-weather:8080/mcp --against weather.yaml --fail-on high
    """
    from lockstep.core.diff import Severity, max_severity, render_json, render_text

    document = load_document(against)
    pinned = pinned_from(document, against)
    if not pinned.revisions:
        raise UsageError(f"{against}: approves no revision")
    rules = [*pinned.ignore.pointers, *ignore]
    approved = _redigested(pinned.revisions, rules, against) if ignore else list(pinned.revisions)
    loaded = _load(target, headers, timeout, transport, _capabilities(client_capabilities, document))
    observed = _revision(loaded, rules)
    matched = next((revision for revision in approved if revision.aggregate == observed.aggregate), None)
    findings = [] if matched else _findings_between(approved, observed)
    worst = max_severity(findings) if findings else None
    failing = worst is not None and worst.rank >= Severity(fail_on).rank
    tolerated = f"the worst finding is {worst.value if worst else 'none'}, below --fail-on {fail_on}"
    if as_json:
        click.echo(dump_json({
            "match": matched is not None, "passed": not failing, "failOn": fail_on,
            "reason": "approved" if matched else (tolerated if not failing else "drift"),
            "digest": observed.aggregate, "approved": [revision.aggregate for revision in approved],
            "maxSeverity": worst.value if worst else None, "findings": render_json(findings),
        }), nl=False)
    elif matched:
        click.echo(f"verified: {target} serves approved revision {matched.aggregate}")
    else:
        verdict = f"passed ({tolerated})" if not failing else "drift"
        click.echo(f"{verdict}: {target} serves {observed.aggregate}, which {against} does not approve")
        colored = _color()
        click.echo(render_text(findings, color=colored), nl=False, color=colored)
    sys.exit(EXIT_DRIFT if failing else EXIT_SAME)


@dataclass(frozen=True)
class _Side:
    """One side of a diff: its revisions as read, and the ignore rules of its manifest (if it is one)."""

    source: str
    revisions: list[Revision]
    rules: tuple[str, ...] = ()


def _side_of(target: str, headers: Sequence[str], timeout: float, transport: str | None,
             capabilities: tuple[str, ...] | None = None) -> _Side:
    """Every approved revision of a manifest, or the one interface of a URL or snapshot."""
    if is_url(target):
        return _Side(target, [_revision(_load(target, headers, timeout, transport, capabilities), ())])
    document = load_document(target)  # read once, whichever it turns out to be
    if not is_manifest(document):
        return _Side(target, [_revision(snapshot_from(document, target), ())])
    pinned = pinned_from(document, target)
    if not pinned.revisions:
        raise UsageError(f"{target}: approves no revision")
    return _Side(target, list(pinned.revisions), pinned.ignore.pointers)


def _redigested(revisions: Sequence[Revision], rules: Sequence[str], source: str) -> list[Revision]:
    """``revisions`` digested again under ``rules`` (both sides of a comparison use the same rules)."""
    result = []
    for revision in revisions:
        if revision.interface is None:
            raise UsageError(f"{source}: --ignore needs the approved definitions, which this manifest leaves out "
                             "(made with --digests-only); pin it again without --digests-only")
        result.append(Revision.of(revision.interface, rules))
    return result


@click.command("diff")
@click.argument("old")
@click.argument("new", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True)
@target_options
@cluster_options
def diff_command(old: str, new: str | None, as_json: bool, color: str, headers: Sequence[str], timeout: float,
                 transport: str | None, client_capabilities: str | None, ignore: Sequence[str],
                 namespace: str | None, context: str | None, kubeconfig: str | None) -> None:
    """Show the drift from OLD to NEW (each a URL, a snapshot or a manifest),
    or, given one RESOURCE, the drift its pods serve in the cluster.

    A manifest with several approved revisions is compared through the
    revision closest to the other side. Exit 0 when they are the same, 1 when
    they differ, 2 on unusable input.

    \b
    Examples:
      # what changed between the pinned interface and the staging server
      lockstep diff weather.yaml http://staging-weather:8080/mcp
      # what the pods of MCPServerInterface weather serve that is not approved
      lockstep diff weather -n agents
    """
    from lockstep.core.diff import closest_revision, diff_revisions, render_json, render_text

    if new is None:
        from lockstep.cli.cluster import diff_resource

        target = ClusterTarget(kubeconfig, context, namespace)
        sys.exit(diff_resource(old, target, as_json=as_json, color=_color(color)))
    capabilities = _capabilities(client_capabilities)
    sides = [_side_of(old, headers, timeout, transport, capabilities),
             _side_of(new, headers, timeout, transport, capabilities)]
    # One set of rules for both sides: --ignore and the ignore rules of every manifest compared.
    rules = sorted({*ignore, *sides[0].rules, *sides[1].rules})
    old_revisions, new_revisions = (_redigested(side.revisions, rules, side.source) if _needs(side, rules)
                                    else side.revisions for side in sides)
    new_revision = closest_revision(new_revisions, old_revisions[-1]) if len(new_revisions) > 1 else new_revisions[0]
    old_revision = closest_revision(old_revisions, new_revision)
    findings = [] if old_revision.aggregate == new_revision.aggregate else diff_revisions(old_revision, new_revision)
    if as_json:
        click.echo(dump_json(render_json(findings)), nl=False)
    elif findings:
        colored = _color(color)
        click.echo(render_text(findings, color=colored), nl=False, color=colored)
    else:
        click.echo(f"no differences: {old} and {new} are the same interface ({new_revision.aggregate})")
    sys.exit(EXIT_DRIFT if findings else EXIT_SAME)


def _needs(side: _Side, rules: Sequence[str]) -> bool:
    """Whether the side's revisions were digested under other rules than ``rules``."""
    return sorted(side.rules) != list(rules)


def _color(mode: str = "auto") -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    return sys.stdout.isatty()
