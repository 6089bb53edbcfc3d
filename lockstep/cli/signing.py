"""``lockstep keys generate``, ``lockstep sign`` and ``lockstep verify-approval``: approvals signed by approver keys
(docs/gitops.md, "Two approvers"), offline, before a pull request merges.

``sign`` signs the approved revisions of an MCPServerInterface manifest in place: a revision that carries no
statement yet gets a new one (the next sequence of the file, valid for ``--valid-for`` days); a revision
another approver already signed gets this key's signature on the same statement, so that m of n approvers
sign one file. ``verify-approval`` checks every approved revision under an MCPApprovalPolicy file, exactly as
the validating webhook and the operator do.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from lockstep.cli.commands import EXIT_DRIFT
from lockstep.cli.targets import UsageError, load_document
from lockstep.cli.yaml_edit import RoundTripFile, plain
from lockstep.core.approver_keys import ApproverKeyError, KeyKind, generate_key, signer_of_pem
from lockstep.core.errors import InterfaceError
from lockstep.core.manifest import KIND
from lockstep.core.names import POLICY_KIND
from lockstep.core.revision import Revision
from lockstep.core.signed_approval import (
    ATTESTATION_FIELD,
    ApprovalStatement,
    MalformedAttestationError,
    SignedApproval,
)
from lockstep.core.trust_policy import PolicyError, PolicyMode, TrustPolicy, verify_approved

__all__ = ["keys_command", "sign_approved", "sign_command", "signer_of", "verify_approval_command"]

DEFAULT_VALID_DAYS = 90


@click.group("keys")
def keys_command() -> None:
    """Make approver keys for signed approvals."""


@keys_command.command("generate")
@click.argument("name")
@click.option("--type", "kind", type=click.Choice([kind.value for kind in KeyKind]), default=KeyKind.ED25519.value,
              show_default=True, help="The key's algorithm.")
@click.option("--out", "out", type=click.Path(file_okay=False), default=".", show_default=True,
              help="The folder to write NAME.key (private, mode 0600) and NAME.pub into.")
def generate_command(name: str, kind: str, out: str) -> None:
    """Write a new approver key pair, NAME.key and NAME.pub, and print the policy entry of its public half."""
    folder = Path(out)
    private, public = folder / f"{name}.key", folder / f"{name}.pub"
    for path in (private, public):
        if path.exists():
            raise UsageError(f"{path} exists: an approver key is never overwritten")
    pair = generate_key(KeyKind(kind))
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pair.private_pem)
    public.write_bytes(pair.public_pem)
    click.echo(f"wrote {private} (keep it secret) and {public}; key id {pair.keyid}", err=True)
    pem = "".join(f"    {line}\n" for line in pair.public_pem.decode().splitlines())
    click.echo(f"# the entry of spec.keys of an {POLICY_KIND}\n- name: {json.dumps(name)}\n  publicKey: |\n{pem}", nl=False)


@click.command("sign")
@click.argument("filename", type=click.Path(dir_okay=False, exists=True))
@click.option("--key", "key_path", required=True, metavar="KEY",
              help="The approver's private key (a PEM file), or a KMS/HSM key URI with its public key: URI#PUB.pem.")
@click.option("--revision", "digest", metavar="DIGEST", help="Sign only this approved revision (default: all).")
@click.option("--valid-for", "valid_days", type=click.IntRange(1, 3660), default=DEFAULT_VALID_DAYS,
              show_default=True, help="Days a new statement stays valid.")
@click.option("--keep-previous", is_flag=True,
              help="A new statement does not revoke the revisions signed before it (a rolling update).")
@click.option("-n", "--namespace", default=None, help="The resource's namespace, if the manifest names none.")
def sign_command(filename: str, key_path: str, digest: str | None, valid_days: int, keep_previous: bool,
                 namespace: str | None) -> None:
    """Sign the approved revisions of an MCPServerInterface manifest (adds a signature to a signed one)."""
    signer = signer_of(key_path)
    path = Path(filename)
    document = RoundTripFile.load(path)
    manifest = _only_interface(document.documents, path)
    name, namespace = _resource_of(manifest, namespace, path)
    approved = (manifest.get("spec") or {}).get("approved") or []
    if digest is not None and not any(entry.get("digest") == digest for entry in approved):
        raise UsageError(f"{path}: no approved revision {digest}")
    for line in sign_approved(approved, namespace, name, signer, only={digest} if digest else None,
                              keep_previous=keep_previous, valid_days=valid_days, where=str(path)):
        click.echo(f"{path}: {line}", err=True)
    path.write_text(document.dump(), encoding="utf-8")


@click.command("verify-approval")
@click.argument("filename", type=click.Path(dir_okay=False, exists=True))
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False), required=True,
              help=f"An {POLICY_KIND} manifest.")
@click.option("--at", "at", default=None, metavar="TIME", help="Verify as at this RFC 3339 time (default: now).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def verify_approval_command(filename: str, policy_path: str, at: str | None, as_json: bool) -> None:
    """Check that every approved revision of a manifest is signed as an MCPApprovalPolicy requires (for CI)."""
    policy = _policy(Path(policy_path))
    now = datetime.datetime.fromisoformat(at) if at else datetime.datetime.now(datetime.UTC)
    if now.tzinfo is None:
        raise UsageError("--at needs a time zone, e.g. 2026-12-01T00:00:00Z")
    path = Path(filename)
    manifest = _only_interface([load_document(str(path))], path)
    name, namespace = _resource_of(manifest, None, path)
    approved = (manifest.get("spec") or {}).get("approved") or []
    verified = verify_approved(approved, namespace, name, policy, now)
    if as_json:
        click.echo(json.dumps({"mode": verified.mode.value, "floor": verified.floor, "revisions": [
            {"digest": check.revision, "trusted": check.trusted, "signers": list(check.signers),
             "reason": check.reason.value if check.reason else None, "detail": check.detail}
            for check in verified.checks]}, indent=2))
    else:
        click.echo(f"{namespace}/{name} under {POLICY_KIND} {policy.name}: {verified.mode.value}")
        for check in verified.checks:
            click.echo(("  ok      " if check.trusted else "  REFUSED ") + check.describe())
    if verified.mode is PolicyMode.ENFORCE and verified.refused:
        sys.exit(EXIT_DRIFT)


def sign_approved(approved: Any, namespace: str, name: str, signer: Any, *, only: set[str] | None = None,
                  keep_previous: bool = False, valid_days: int = DEFAULT_VALID_DAYS, where: str = "") -> list[str]:
    """Sign the ``spec.approved[]`` entries (all, or those of ``only``) in place: an entry whose statement is already
    about this revision of this resource gets one more signature; any other a new statement at the next sequence
    (revoking the ones before it, unless ``keep_previous``). Returns one line per entry, saying what was done."""
    statements = [_statement_of(entry) for entry in approved]
    sequences = [statement.sequence for statement in statements if statement is not None]
    next_sequence = max(sequences, default=0) + 1
    now = datetime.datetime.now(datetime.UTC)
    done = []
    for entry, statement in zip(approved, statements, strict=True):
        if only is not None and entry.get("digest") not in only:
            continue
        revision = _revision(entry, where)
        if statement is not None and statement.digest.digest == revision.aggregate \
                and (statement.namespace, statement.name) == (namespace, name):
            signed = SignedApproval.from_dict(plain(entry[ATTESTATION_FIELD])).add_signature(signer)
            action = f"added a signature to sequence {statement.sequence}"
        else:
            revokes = min(sequences, default=next_sequence) if keep_previous else next_sequence
            new = ApprovalStatement.of(revision, namespace, name, next_sequence,
                                       now + datetime.timedelta(days=valid_days), revokes)
            signed = SignedApproval.create(new, signer)
            action = f"signed as sequence {next_sequence}" + (f", revoking below {revokes}" if revokes > 1 else "")
            next_sequence += 1
        entry[ATTESTATION_FIELD] = signed.to_dict()
        done.append(f"revision {revision.aggregate}: {action} (key {signer.public_key.keyid[:12]})")
    return done


def signer_of(reference: str) -> Any:
    """A PEM file, or a securesystemslib private-key URI (``awskms:``, ``gcpkms:``, ``azurekms:``, ``hsm:``) with
    its public key's PEM file after ``#``."""
    head = reference.split("/", 1)[0]
    if ":" in head and not Path(reference).exists():
        from securesystemslib.signer import Signer

        from lockstep.core.trust_policy import key_of_pem

        uri, _, public_path = reference.partition("#")
        if not public_path:
            raise UsageError(f"a key URI needs its public key's PEM file after '#': {uri}#/path/to/public.pem")
        try:
            return Signer.from_priv_key_uri(uri, key_of_pem(Path(public_path).read_bytes()))
        except (ValueError, OSError, PolicyError) as error:
            raise UsageError(f"cannot use the key {uri}: {error}") from None
    try:
        return signer_of_pem(Path(reference).read_bytes())
    except OSError as error:
        raise UsageError(f"cannot read the key {reference}: {error.strerror}") from None
    except ApproverKeyError as error:
        raise UsageError(f"{reference}: {error}") from None


def _only_interface(documents: Sequence[Any], path: Path) -> Any:
    found = [document for document in documents if isinstance(document, Mapping) and document.get("kind") == KIND]
    if len(found) != 1:
        raise UsageError(f"{path}: holds {len(found)} {KIND} documents; sign one manifest at a time")
    return found[0]


def _resource_of(manifest: Mapping[str, Any], namespace: str | None, path: Path) -> tuple[str, str]:
    metadata = manifest.get("metadata") or {}
    name, written = metadata.get("name"), metadata.get("namespace")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{path}: the {KIND} has no metadata.name")
    if written and namespace and written != namespace:
        raise UsageError(f"{path}: the manifest says namespace {written}, not {namespace}")
    namespace = written or namespace
    if not namespace:
        raise UsageError(f"{path}: an approval is bound to a namespace: give metadata.namespace or -n")
    return name, str(namespace)


def _revision(entry: Any, where: str) -> Revision:
    try:
        return Revision.from_spec(plain(entry))
    except InterfaceError as error:
        raise UsageError(f"{where}: approved revision {entry.get('digest')}: {error}") from None


def _statement_of(entry: Any) -> ApprovalStatement | None:
    attestation = entry.get(ATTESTATION_FIELD) if isinstance(entry, Mapping) else None
    if attestation is None:
        return None
    try:
        return SignedApproval.from_dict(plain(attestation)).statement
    except MalformedAttestationError:
        return None  # replaced by a new statement


def _policy(path: Path) -> TrustPolicy:
    document = load_document(str(path))
    if not isinstance(document, Mapping) or document.get("kind") != POLICY_KIND:
        raise UsageError(f"{path}: not an {POLICY_KIND}")
    try:
        return TrustPolicy.from_resource(document)
    except PolicyError as error:
        raise UsageError(f"{path}: {error}") from None

