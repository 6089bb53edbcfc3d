"""``lockstep approve RESOURCE``: approve an observed interface revision.

The revision's definitions come from the resource's status in the cluster (or
from the ConfigMap its status entry names, for large ones) and
are digested again before anything is written: a status that does not digest
to the revision being approved is refused. Three outputs:

* default: the updated manifest on stdout, ready to commit;
* ``-f FILE``: the manifest in a Git work tree, rewritten in place with its
  comments, key order and indentation kept (ruamel.yaml round trip,
  :mod:`lockstep.cli.yaml_edit`);
* ``--apply``: a merge patch of ``spec.approved`` on the cluster, for users
  without GitOps.

``--dry-run`` shows what ``-f`` or ``--apply`` would write without writing it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from lockstep.cli.cluster import (
    Cluster,
    ClusterTarget,
    ObservedDrift,
    cluster_options,
    drift_of,
    parse_resource,
    with_referenced_definitions,
)
from lockstep.cli.output import dump_json, dump_yaml
from lockstep.cli.targets import UsageError
from lockstep.cli.yaml_edit import RoundTripFile, plain, review_style
from lockstep.core import Interface
from lockstep.core.approval import (
    ApprovalResult,
    ObservedRevision,
    approve,
    observed_revisions,
    prune_unserved,
    select_revision,
    verified_interface,
)
from lockstep.core.diff import max_severity
from lockstep.core.manifest import KIND
from lockstep.core.severity import visible

__all__ = ["approve_command"]

#: Metadata that belongs to the cluster's copy, not to a manifest in Git.
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
                   "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "finalizers", "ownerReferences")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@click.command("approve")
@click.argument("resource")
@click.option("--revision", "digest", metavar="DIGEST",
              help="Observed revision to approve (a digest or its prefix; default: the only unapproved one).")
@click.option("--replace", is_flag=True, help="Make it the only approved revision (drop the others).")
@click.option("--prune", is_flag=True, help="Also drop approved revisions that no selected pod serves any more.")
@click.option("-f", "--filename", "filename", type=click.Path(dir_okay=False), metavar="FILE",
              help="Rewrite this manifest in place (comments and key order are kept).")
@click.option("--apply", "apply_", is_flag=True, help="Patch spec.approved in the cluster directly.")
@click.option("--dry-run", is_flag=True, help="With -f or --apply: print what would be written, write nothing.")
@click.option("--digests-only", is_flag=True, help="Leave the definitions out of the approved entry.")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
              help="Format of the printed manifest (without -f and --apply).")
@click.option("--sign", "key", metavar="KEY", default=None,
              help="Sign the approved revision with this approver key (lockstep sign's KEY), for an MCPApprovalPolicy.")
@cluster_options
def approve_command(resource: str, digest: str | None, replace: bool, prune: bool, filename: str | None,
                    apply_: bool, dry_run: bool, digests_only: bool, output: str, key: str | None,
                    namespace: str | None, context: str | None, kubeconfig: str | None) -> None:
    """Approve a revision that the pods of RESOURCE serve.

    The definitions are read from the resource's status and digested again;
    they must match the revision approved. Review first with
    `lockstep diff RESOURCE`.

    \b
    Examples:
      # rewrite the manifest in Git, then open a pull request
      lockstep approve weather -n agents -f deploy/weather/interface.yaml
      # after a rolling update: approve the new revision and drop the old one
      lockstep approve weather -n agents -f deploy/weather/interface.yaml --prune
      # no GitOps: patch the cluster
      lockstep approve weather -n agents --apply
    """
    if filename and apply_:
        raise UsageError("use either -f FILE (Git) or --apply (cluster), not both")
    if dry_run and not (filename or apply_):
        raise UsageError("--dry-run goes with -f FILE or --apply; without them nothing is written anyway")
    name = parse_resource(resource)
    signer = None
    if key is not None:
        from lockstep.cli.signing import signer_of

        signer = signer_of(key)
    with Cluster(ClusterTarget(kubeconfig, context, namespace)) as cluster:
        live, unread = with_referenced_definitions(cluster, cluster.get_interface(name))
        for note in unread:
            click.echo(f"note: {note}", err=True)
        plan = dataclasses.replace(_plan(live, digest, prune), signer=signer, replace=replace)
        if filename:
            _rewrite_file(Path(filename), live, plan, replace=replace, prune=prune, digests_only=digests_only,
                          dry_run=dry_run)
        elif apply_:
            _apply(cluster, name, live, plan, replace=replace, prune=prune, digests_only=digests_only,
                   dry_run=dry_run)
        else:
            manifest = manifest_from_cluster(live)
            result = _edit(manifest, plan, replace=replace, prune=prune, digests_only=digests_only)
            _sign(manifest, plan, result, "the manifest above")
            click.echo(dump_yaml(manifest) if output == "yaml" else dump_json(manifest), nl=False)
            _report(result, "the manifest above", dry_run=False)


@dataclass(frozen=True)
class Plan:
    """What to approve (verified definitions), and which digests the pods serve."""

    observed: ObservedRevision | None
    interface: Interface | None
    served: tuple[str, ...]
    drift: ObservedDrift | None = None
    #: --sign: the approver's signer; the added revision is signed (revoking the others only with --replace).
    signer: Any = None
    replace: bool = False


def _plan(live: Mapping[str, Any], digest: str | None, prune: bool) -> Plan:
    observed = observed_revisions(live)
    served = tuple(entry.digest for entry in observed)
    if prune and not digest and all(entry.approved for entry in observed):
        return Plan(None, None, served)
    chosen = select_revision(observed, digest)
    ignore = list((live.get("spec") or {}).get("ignore") or [])
    interface = verified_interface(chosen, ignore)
    drift = next((item for item in drift_of(live) if item.observed.digest == chosen.digest), None)
    _describe_choice(chosen, drift)
    return Plan(chosen, interface, served, drift)


def _describe_choice(chosen: ObservedRevision, drift: ObservedDrift | None) -> None:
    """Tell the approver, on stderr, what they are approving."""
    pods = f"{chosen.pod_count} pod(s)"
    if chosen.approved or drift is None:
        click.echo(f"approving {chosen.digest}, served by {pods}, already approved in the cluster", err=True)
        return
    worst = max_severity(drift.findings)
    click.echo(f"approving {chosen.digest}, served by {pods}: {len(drift.findings)} finding(s) against "
               f"{drift.closest or 'nothing approved'}" + (f", worst {worst.value}" if worst else "")
               + " (review them with lockstep diff)", err=True)


def _edit(manifest: Any, plan: Plan, *, replace: bool, prune: bool, digests_only: bool,
          style: Any = None) -> ApprovalResult:
    result = ApprovalResult(None, added=False)
    if plan.interface is not None:
        result = approve(manifest, plan.interface, replace=replace, with_definitions=not digests_only,
                         style=style)
    if prune:
        pruned = prune_unserved(manifest, (*plan.served, *([result.digest] if result.digest else [])))
        result = ApprovalResult(result.digest, result.added, (*result.removed, *pruned.removed))
    return result


def _report(result: ApprovalResult, where: str, *, dry_run: bool) -> None:
    would = "would be " if dry_run else ""
    if result.digest and not result.added:
        click.echo(f"{result.digest} is already approved in {where}", err=True)
    elif result.digest:
        click.echo(f"{result.digest} {would}approved in {where}", err=True)
    for removed in result.removed:
        click.echo(f"{removed} {would}no longer approved in {where}", err=True)
    if not result.changed:
        click.echo(f"nothing to change in {where}", err=True)


def manifest_from_cluster(live: Mapping[str, Any]) -> dict[str, Any]:
    """The resource as a manifest for Git: no status, no server-owned metadata."""
    metadata = copy.deepcopy(dict(live.get("metadata") or {}))
    for key in SERVER_METADATA:
        metadata.pop(key, None)
    annotations = metadata.get("annotations") or {}
    annotations.pop(LAST_APPLIED, None)
    if not annotations:
        metadata.pop("annotations", None)
    return {"apiVersion": live.get("apiVersion"), "kind": live.get("kind"), "metadata": metadata,
            "spec": copy.deepcopy(live.get("spec") or {})}


def _sign(manifest: Any, plan: Plan, result: ApprovalResult, where: str) -> None:
    """--sign: the revision just approved gets a signed statement (the file's next sequence)."""
    if plan.signer is None or not result.added or result.digest is None:
        return
    from lockstep.cli.signing import sign_approved

    metadata = manifest.get("metadata") or {}
    for line in sign_approved(manifest["spec"]["approved"], str(metadata.get("namespace") or ""),
                              str(metadata.get("name")), plan.signer, only={result.digest},
                              keep_previous=not plan.replace, where=where):
        click.echo(f"{where}: {line}", err=True)


# --------------------------------------------------------------------------- --apply

def _apply(cluster: Cluster, name: str, live: Mapping[str, Any], plan: Plan, *, replace: bool, prune: bool,
           digests_only: bool, dry_run: bool) -> None:
    manifest = manifest_from_cluster(live)
    result = _edit(manifest, plan, replace=replace, prune=prune, digests_only=digests_only)
    where = f"{KIND} {cluster.namespace}/{name}"
    if not result.changed:
        _report(result, where, dry_run=dry_run)
        return
    _sign(manifest, plan, result, where)
    patch: dict[str, Any] = {"spec": {"approved": manifest["spec"]["approved"]}}
    version = (live.get("metadata") or {}).get("resourceVersion")
    if version:  # optimistic concurrency: a concurrent change makes the API server answer 409
        patch["metadata"] = {"resourceVersion": version}
    if dry_run:
        click.echo(dump_json(patch), nl=False)
    else:
        cluster.patch_interface(name, patch)
    _report(result, where, dry_run=dry_run)


# --------------------------------------------------------------------------- -f FILE (round trip)

def _rewrite_file(path: Path, live: Mapping[str, Any], plan: Plan, *, replace: bool, prune: bool,
                  digests_only: bool, dry_run: bool) -> None:
    metadata = live.get("metadata") or {}
    name, namespace = str(metadata.get("name")), str(metadata.get("namespace") or "")
    document = RoundTripFile.load(path)
    # Decide on a plain copy with the pure edit functions, then make the same change to the file.
    result = _edit(plain(document.find(name, namespace)), plan, replace=replace, prune=prune,
                   digests_only=digests_only)
    if result.removed:
        document = document.without_entries(document.find(name, namespace), set(result.removed))
    if result.added:
        manifest = document.find(name, namespace)
        if manifest["spec"].get("approved") is None:  # every entry was cut out (--replace)
            from ruamel.yaml.comments import CommentedSeq

            manifest["spec"]["approved"] = CommentedSeq()
        approve(manifest, plan.interface, with_definitions=not digests_only, style=review_style)  # type: ignore[arg-type]
        _sign(manifest, plan, result, str(path))
        approved = manifest["spec"]["approved"]
        approved.yaml_set_comment_before_after_key(len(approved) - 1, before=approval_comment(plan),
                                                   indent=document.dash_column(approved))
    if result.changed:
        text = document.dump() if result.added else document.text
        if dry_run:
            click.echo(text, nl=False)
        else:
            _write(path, text)
    _report(result, str(path), dry_run=dry_run)


COMMENT_FINDINGS = 12
COMMENT_WIDTH = 150


def approval_comment(plan: Plan) -> str:
    """The comment above a new entry in Git: what the pull request approves, in words a reviewer reads."""
    assert plan.observed is not None
    observed = plan.observed
    lines = [f"lockstep approve: {observed.digest[:19]}, served by {observed.pod_count} pod(s)"
             + (f" since {observed.first_seen}" if observed.first_seen else "")]
    drift = plan.drift
    if drift is not None and drift.findings:
        lines.append(f"changes against {drift.closest[:19] if drift.closest else 'nothing approved'}:")
        for finding in drift.findings[:COMMENT_FINDINGS]:
            symbol = {"added": "+", "removed": "-"}.get(finding.change.value, "~")
            line = f"  {symbol} {finding.kind.value}/{finding.name} [{finding.severity.value}] " + \
                "; ".join(finding.reasons)
            line = visible(line)
            lines.append(line if len(line) <= COMMENT_WIDTH else line[: COMMENT_WIDTH - 1] + "…")
        if len(drift.findings) > COMMENT_FINDINGS:
            lines.append(f"  and {len(drift.findings) - COMMENT_FINDINGS} more (lockstep diff shows them all)")
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    try:
        temporary = path.with_name(f".{path.name}.lockstep")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None
