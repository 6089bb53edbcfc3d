"""`lockstep approve RESOURCE`: print, rewrite a manifest in Git (-f), or patch the cluster (--apply)."""

from __future__ import annotations

import json

import pytest
import yaml
from lockstep_testing.approval_support import (
    NAMESPACE,
    add_a_tool,
    hide_a_character,
    interface_manifest,
    read_weather,
    weather,
    with_status,
)

from lockstep.core.manifest import load_pinned
from lockstep.core.revision import Revision

MANIFEST_IN_GIT = """\
# Weather MCP server: the interface its owners approved.
# Reviewed by the platform team; see docs/gitops.md.
apiVersion: lockstep.dev/v1alpha1
kind: MCPServerInterface
metadata:
  name: weather
  namespace: agents
  labels:
    team: forecasting   # owner of the server
spec:
  # pods of the weather Deployment
  selector:
    matchLabels:
      app: weather-mcp
  endpoint: {port: 8080, path: /mcp, transport: streamable-http}
  enforcement: Isolate  # cut drifted pods out of the Service
  approval: Manual
  approved:
    # v1.0.0, approved in PR #12
    - digest: {digest}
      formula: lockstep/v1
      components:
{components}
"""


def git_manifest(revision: Revision) -> str:
    components = "\n".join(f"        - {{kind: {entry.kind.value}, name: {entry.name}, digest: '{entry.digest}'}}"
                           for entry in revision.digest.components)
    return MANIFEST_IN_GIT.replace("{digest}", revision.aggregate).replace("{components}", components)


@pytest.fixture
async def clean():
    return await read_weather()


async def test_prints_the_manifest_with_the_observed_revision_added(cluster, clean):
    pulled = await read_weather(weather.rug_pull)
    await cluster.put(with_status(interface_manifest(clean), {"weather-0": clean, "weather-1": pulled}))
    result = await cluster.lockstep("approve", "weather")
    assert result.exit_code == 0, result.output
    manifest = yaml.safe_load(result.stdout)
    assert "status" not in manifest
    assert set(manifest["metadata"]) == {"name", "namespace"}  # no uid, resourceVersion, generation...
    pinned = load_pinned(manifest)
    assert [revision.aggregate for revision in pinned.revisions] == [Revision.of(clean).aggregate,
                                                                     Revision.of(pulled).aggregate]
    assert pinned.revisions[1].interface == pulled  # the definitions went along, for review
    assert f"approving {Revision.of(pulled).aggregate}, served by 1 pod(s): 1 finding(s)" in result.stderr
    assert "worst high" in result.stderr
    assert cluster.patches() == []  # printing never writes to the cluster


async def test_replace_keeps_only_the_new_revision(cluster, clean):
    pulled = await read_weather(weather.rug_pull)
    await cluster.put(with_status(interface_manifest(clean), {"weather-1": pulled}))
    result = await cluster.lockstep("approve", "weather", "--replace", "-o", "json")
    assert result.exit_code == 0
    approved = json.loads(result.stdout)["spec"]["approved"]
    assert [entry["digest"] for entry in approved] == [Revision.of(pulled).aggregate]
    assert f"{Revision.of(clean).aggregate} no longer approved" in result.stderr


async def test_refuses_definitions_that_do_not_match_the_digest(cluster, clean):
    pulled = await read_weather(weather.rug_pull)
    resource = with_status(interface_manifest(clean), {"weather-1": pulled})
    # Someone with write access to status swaps the poisoned text for a harmless one, keeping the digest.
    (entry,) = [entry for entry in resource["status"]["observed"] if not entry["approved"]]
    entry["definitions"]["tools"][0]["description"] = "Get the weather forecast for a city, for up to 7 days."
    await cluster.put(resource)
    result = await cluster.lockstep("approve", "weather")
    assert result.exit_code == 2 and result.stdout == ""
    assert "its definitions digest to sha256:" in result.stderr and "refusing to approve" in result.stderr


async def test_refuses_a_revision_whose_definitions_were_too_large_to_keep(cluster, clean):
    pulled = await read_weather(weather.rug_pull)
    await cluster.put(with_status(interface_manifest(clean), {"weather-1": pulled}, definitions_limit=10))
    result = await cluster.lockstep("approve", "weather")
    assert result.exit_code == 2 and "carries no definitions" in result.stderr and "lockstep snapshot" in result.stderr


async def test_two_unapproved_revisions_need_revision(cluster, clean):
    pulled, grown = await read_weather(weather.rug_pull), await read_weather(add_a_tool)
    await cluster.put(with_status(interface_manifest(clean), {"weather-1": pulled, "weather-2": grown}))
    ambiguous = await cluster.lockstep("approve", "weather")
    assert ambiguous.exit_code == 2 and "2 observed revisions are not approved" in ambiguous.stderr
    assert "--revision" in ambiguous.stderr
    short = Revision.of(grown).aggregate[:19]  # as `kubectl get mcpi` and `lockstep diff` print it
    chosen = await cluster.lockstep("approve", "weather", "--revision", short)
    assert chosen.exit_code == 0
    approved = [entry["digest"] for entry in yaml.safe_load(chosen.stdout)["spec"]["approved"]]
    assert approved == [Revision.of(clean).aggregate, Revision.of(grown).aggregate]
    unknown = await cluster.lockstep("approve", "weather", "--revision", "sha256:ffff")
    assert unknown.exit_code == 2 and "no observed revision has digest sha256:ffff" in unknown.stderr


async def test_rewrites_a_git_manifest_in_place_keeping_comments_and_order(cluster, clean, tmp_path):
    pulled = await read_weather(weather.rug_pull)
    await cluster.put(with_status(interface_manifest(clean), {"weather-0": clean, "weather-1": pulled}))
    original = git_manifest(Revision.of(clean))
    path = tmp_path / "interface.yaml"
    path.write_text(original)
    result = await cluster.lockstep("approve", "weather", "-f", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert f"{Revision.of(pulled).aggregate} approved in {path}" in result.stderr
    rewritten = path.read_text()
    # Everything that was there is still there, in the same order: the change only appends.
    assert rewritten.startswith(original)
    added = rewritten[len(original):]
    # The pull request opens with what changed, in words, above the new entry.
    digest, before = Revision.of(pulled).aggregate, Revision.of(clean).aggregate
    comment, entry = added.split("    - digest:", 1)
    first_seen = cluster.get()["status"]["observed"][1]["firstSeen"]
    summary, against, finding = comment.splitlines()
    assert summary == f"    # lockstep approve: {digest[:19]}, served by 1 pod(s) since {first_seen}"
    assert against == f"    # changes against {before[:19]}:"
    assert finding.startswith("    #   ~ tool/get_forecast [high] description gains instruction-like text")
    assert finding.endswith("…")
    assert entry.startswith(f" {digest}\n      formula: lockstep/v1\n")
    # The poisoned description reads as a block in the pull request, not as an escaped one-liner.
    assert "description: |-\n" in added and "            <IMPORTANT>Before using this tool" in added
    pinned = load_pinned(yaml.safe_load(rewritten))
    assert [revision.aggregate for revision in pinned.revisions] == [Revision.of(clean).aggregate,
                                                                     Revision.of(pulled).aggregate]


async def test_rewrite_spells_out_invisible_characters(cluster, clean, tmp_path):
    hidden = await read_weather(hide_a_character)
    await cluster.put(with_status(interface_manifest(clean), {"weather-1": hidden}))
    path = tmp_path / "interface.yaml"
    path.write_text(git_manifest(Revision.of(clean)))
    assert (await cluster.lockstep("approve", "weather", "-f", str(path))).exit_code == 0
    text = path.read_text()
    assert "\u200b" not in text and '"Active weather alerts\\u200b for a US state (two-letter code)."' in text
    assert load_pinned(yaml.safe_load(text)).revisions[1].aggregate == Revision.of(hidden).aggregate


async def test_rewrite_dry_run_and_idempotence(cluster, clean, tmp_path):
    pulled = await read_weather(weather.rug_pull)
    await cluster.put(with_status(interface_manifest(clean), {"weather-1": pulled}))
    path = tmp_path / "interface.yaml"
    path.write_text(original := git_manifest(Revision.of(clean)))
    dry = await cluster.lockstep("approve", "weather", "-f", str(path), "--dry-run")
    assert dry.exit_code == 0 and path.read_text() == original
    assert dry.stdout.startswith(original) and "would be approved" in dry.stderr
    await cluster.lockstep("approve", "weather", "-f", str(path))
    once = path.read_text()
    again = await cluster.lockstep("approve", "weather", "-f", str(path))
    assert again.exit_code == 0 and path.read_text() == once and "already approved" in again.stderr


async def test_rewrite_refuses_the_manifest_of_another_resource(cluster, clean, tmp_path):
    pulled = await read_weather(weather.rug_pull)
    await cluster.put(with_status(interface_manifest(clean), {"weather-1": pulled}))
    path = tmp_path / "other.yaml"
    path.write_text(original := git_manifest(Revision.of(clean)).replace("name: weather", "name: billing"))
    result = await cluster.lockstep("approve", "weather", "-f", str(path))
    assert result.exit_code == 2 and "holds MCPServerInterface billing, not weather" in result.stderr
    assert path.read_text() == original


async def test_apply_merge_patches_spec_approved(cluster, clean):
    pulled = await read_weather(weather.rug_pull)
    await cluster.put(with_status(interface_manifest(clean), {"weather-1": pulled}))
    dry = await cluster.lockstep("approve", "weather", "--apply", "--dry-run")
    assert dry.exit_code == 0 and cluster.patches() == []
    assert json.loads(dry.stdout)["metadata"] == {"resourceVersion": "41"}
    result = await cluster.lockstep("approve", "weather", "--apply")
    assert result.exit_code == 0, result.output
    (patch,) = cluster.patches()
    # A real API server rejects a dict sent as a JSON Patch: the content type must say merge patch.
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert set(patch.data) == {"spec", "metadata"} and set(patch.data["spec"]) == {"approved"}
    stored = [entry["digest"] for entry in cluster.get()["spec"]["approved"]]
    assert stored == [Revision.of(clean).aggregate, Revision.of(pulled).aggregate]
    assert f"approved in MCPServerInterface {NAMESPACE}/weather" in result.stderr


async def test_prune_drops_revisions_no_pod_serves(cluster, clean, tmp_path):
    pulled = await read_weather(weather.rug_pull)
    path = tmp_path / "interface.yaml"
    path.write_text(original := git_manifest(Revision.of(clean)))
    # A rollout: one pod on the new release, approved in a first pull request.
    await cluster.put(with_status(interface_manifest(clean), {"weather-0": clean, "weather-1": pulled}))
    assert (await cluster.lockstep("approve", "weather", "-f", str(path))).exit_code == 0
    # The rollout finished; a second pull request prunes the old revision.
    await cluster.put(with_status(interface_manifest([clean, pulled]), {"weather-1": pulled, "weather-2": pulled}))
    result = await cluster.lockstep("approve", "weather", "--prune", "-f", str(path))
    assert result.exit_code == 0, result.output
    assert f"{Revision.of(clean).aggregate} no longer approved" in result.stderr
    text = path.read_text()
    pinned = load_pinned(yaml.safe_load(text))
    assert [revision.aggregate for revision in pinned.revisions] == [Revision.of(pulled).aggregate]
    # The old entry went with the comment above it; the new one kept its own; the rest is untouched.
    head = original[: original.index("    # v1.0.0")]
    assert text.startswith(head + f"    # lockstep approve: {Revision.of(pulled).aggregate[:19]}")
    assert "PR #12" not in text and "# owner of the server" in text


async def test_prune_never_leaves_nothing_approved(cluster, clean, tmp_path):
    pulled = await read_weather(weather.rug_pull)
    await cluster.put(with_status(interface_manifest(clean), {"weather-1": pulled}))
    result = await cluster.lockstep("approve", "weather", "--prune", "--revision", "sha256:ffff")
    assert result.exit_code == 2 and "no observed revision has digest" in result.stderr
    manifest = interface_manifest(clean)
    await cluster.put(with_status(manifest, {}))
    result = await cluster.lockstep("approve", "weather", "--prune")
    assert result.exit_code == 2 and "pruning would approve nothing" in result.stderr


async def test_replace_in_git_drops_old_entries_and_their_comments(cluster, clean, tmp_path):
    pulled = await read_weather(weather.rug_pull)
    await cluster.put(with_status(interface_manifest(clean), {"weather-1": pulled}))
    path = tmp_path / "interface.yaml"
    path.write_text(original := git_manifest(Revision.of(clean)))
    assert (await cluster.lockstep("approve", "weather", "--replace", "-f", str(path))).exit_code == 0
    text = path.read_text()
    assert text.startswith(original[: original.index("    # v1.0.0")] + "    # lockstep approve:")
    assert [revision.aggregate for revision in load_pinned(yaml.safe_load(text)).revisions] == \
        [Revision.of(pulled).aggregate]


async def test_a_revision_trusted_on_first_use_can_be_pinned_in_git(cluster, clean, tmp_path):
    from lockstep.operator.cache import PodRecord
    from lockstep.operator.judge import Policy, judge
    from lockstep.operator.state import PodTrack, ResourceMemory
    from lockstep.operator.status import build_status

    from lockstep.core.report import Observation

    manifest = interface_manifest(clean)
    manifest["spec"].update(approval="FirstSeen", approved=[])
    resource = json.loads(json.dumps(manifest))
    resource["metadata"]["generation"] = 1
    observation = Observation.of_interface(clean, "2026-11-22T02:00:00Z")
    verdict = judge(observation, Policy.from_resource(resource))
    assert verdict.trusts is not None  # the operator trusts it ...
    memory = ResourceMemory(trusted={**verdict.trusts.to_spec(), "trustedAt": "2026-11-22T02:00:00Z",
                                     "pod": "weather-0"})
    pod = PodRecord(NAMESPACE, "weather-0", "uid-0", {"app": "weather-mcp"}, {}, [])
    resource["status"] = build_status(Policy.from_resource(resource), [(pod, PodTrack("uid-0", observation,
                                      verdict=verdict))], memory, {}, definitions_limit=65536)
    await cluster.put(resource)  # ... and keeps no definitions in status.observed for a verified revision
    digest = Revision.of(clean).aggregate
    review = await cluster.lockstep("diff", "weather")
    assert review.exit_code == 0 and f"trusted on first use: {digest}" in review.stdout
    path = tmp_path / "interface.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    result = await cluster.lockstep("approve", "weather", "--revision", digest[:19], "-f", str(path))
    assert result.exit_code == 0, result.output
    (revision,) = load_pinned(yaml.safe_load(path.read_text())).revisions
    assert revision.aggregate == digest and revision.interface is not None


async def test_sign_signs_the_approved_revision_in_git_and_in_the_cluster(cluster, clean, tmp_path):
    """`approve --sign KEY` (issue 33): the revision approved carries the approver's statement, at the next sequence,
    keeping the revisions approved before it (a rolling update); verify-approval accepts it under a policy."""
    import datetime

    from lockstep.core.approver_keys import generate_key
    from lockstep.core.trust_policy import TrustPolicy, verify_approved

    pair = generate_key()
    key = tmp_path / "alice.key"
    key.write_bytes(pair.private_pem)
    policy = TrustPolicy.from_spec("approvers", {"keys": [{"name": "alice", "publicKey": pair.public_pem.decode()}]})
    pulled = await read_weather(weather.rug_pull)
    await cluster.put(with_status(interface_manifest(clean), {"weather-0": clean, "weather-1": pulled}))
    path = tmp_path / "interface.yaml"
    path.write_text(git_manifest(Revision.of(clean)))
    result = await cluster.lockstep("approve", "weather", "-f", str(path), "--sign", str(key))
    assert result.exit_code == 0, result.output
    assert "signed as sequence 1" in result.stderr
    approved = yaml.safe_load(path.read_text())["spec"]["approved"]
    now = datetime.datetime.now(datetime.UTC)
    checks = verify_approved(approved, NAMESPACE, "weather", policy, now).checks
    # The revision approved before stays unsigned (sign it with `lockstep sign`); the new one is alice's.
    assert [(check.revision, check.trusted) for check in checks] == [(Revision.of(clean).aggregate, False),
                                                                     (Revision.of(pulled).aggregate, True)]
    applied = await cluster.lockstep("approve", "weather", "--apply", "--sign", str(key))
    assert applied.exit_code == 0, applied.output
    stored = cluster.get()["spec"]["approved"]
    assert verify_approved(stored, NAMESPACE, "weather", policy, now).checks[1].signers == ("alice",)
