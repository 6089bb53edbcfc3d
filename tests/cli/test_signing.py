"""`lockstep keys generate`, `lockstep sign` and `lockstep verify-approval`: the two-person rule offline, on the
example manifest, as a CI job before merge would run it."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "weather-interface.yaml"


@pytest.fixture
def approvers(invoke, tmp_path: Path) -> Path:
    """Three approvers' keys, and a policy that wants two of them in namespace agents."""
    entries = []
    for name, kind in (("alice", "ed25519"), ("bob", "ecdsa-p256"), ("carol", "ed25519")):
        result = invoke("keys", "generate", name, "--type", kind, "--out", str(tmp_path / "keys"))
        assert result.exit_code == 0, result.output
        entries += yaml.safe_load(result.stdout)
    policy = {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPApprovalPolicy", "metadata": {"name": "approvers"},
              "spec": {"threshold": 2, "keys": entries, "scopes": [{"namespaces": ["agents"], "mode": "Enforce"}]}}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    return tmp_path


def verify(invoke, folder: Path, manifest: Path) -> tuple[int, str]:
    result = invoke("verify-approval", str(manifest), "--policy", str(folder / "policy.yaml"))
    return result.exit_code, result.stdout


def test_a_private_key_is_written_for_its_owner_alone_and_never_overwritten(invoke, approvers: Path) -> None:
    key = approvers / "keys" / "alice.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    before = key.read_bytes()
    again = invoke("keys", "generate", "alice", "--out", str(approvers / "keys"))
    assert again.exit_code == 2 and "never overwritten" in again.output
    assert key.read_bytes() == before


def test_two_of_three_approvers_sign_one_file_and_ci_accepts_it_only_then(invoke, approvers: Path) -> None:
    manifest = approvers / "weather.yaml"
    shutil.copy(EXAMPLE, manifest)
    code, out = verify(invoke, approvers, manifest)
    assert code == 1 and "Unsigned" in out
    assert invoke("sign", str(manifest), "--key", str(approvers / "keys" / "alice.key")).exit_code == 0
    code, out = verify(invoke, approvers, manifest)
    assert code == 1 and "1 of 2 required signatures" in out and "alice" in out
    assert invoke("sign", str(manifest), "--key", str(approvers / "keys" / "bob.key")).exit_code == 0
    code, out = verify(invoke, approvers, manifest)
    assert code == 0 and "signed by" in out and "alice" in out and "bob" in out
    # The rest of the manifest is as it was: the signature is the only change a reviewer sees.
    signed, original = yaml.safe_load(manifest.read_text()), yaml.safe_load(EXAMPLE.read_text())
    for entry in signed["spec"]["approved"]:
        del entry["attestation"]
    assert signed == original


def test_an_editor_who_changes_a_signed_revision_fails_ci(invoke, approvers: Path) -> None:
    manifest = approvers / "weather.yaml"
    shutil.copy(EXAMPLE, manifest)
    for name in ("alice", "carol"):
        invoke("sign", str(manifest), "--key", str(approvers / "keys" / f"{name}.key"))
    document = yaml.safe_load(manifest.read_text())
    document["metadata"]["namespace"] = "other-team"  # the signed approval, copied to another namespace
    manifest.write_text(yaml.safe_dump(document))
    code, out = verify(invoke, approvers, manifest)
    assert code == 0 and "Off" in out  # the policy does not cover other-team: nothing is enforced there
    document["metadata"]["namespace"] = "agents"
    document["metadata"]["name"] = "news"  # ... and to another resource of the same namespace
    manifest.write_text(yaml.safe_dump(document))
    code, out = verify(invoke, approvers, manifest)
    assert code == 1 and "WrongSubject" in out


def test_a_key_that_is_not_a_key_is_a_clear_error(invoke, approvers: Path, tmp_path: Path) -> None:
    manifest = approvers / "weather.yaml"
    shutil.copy(EXAMPLE, manifest)
    bogus = tmp_path / "bogus.key"
    bogus.write_text("hello")
    result = invoke("sign", str(manifest), "--key", str(bogus))
    assert result.exit_code == 2 and "not an unencrypted PEM private key" in result.output
    assert manifest.read_text() == EXAMPLE.read_text()
