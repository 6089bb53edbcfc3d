"""Issue 33 on the real node: the README's story with signed approvals enforced. A cluster administrator's
MCPApprovalPolicy covers the app's namespace; the snapshot is refused until an approver signs it (`lockstep sign`),
then the pod is verified and in its Service; after a rug pull `lockstep approve --apply --sign` signs the new
revision and the pod is back, without a restart. Needs KUBECONFIG and Lockstep installed (docs/e2e.md)."""

from __future__ import annotations

import contextlib
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.test_operator_e2e import FAST_PROBE, all_verified, restart, snapshot_through_port_forward
from lockstep_testing.real_cluster import POISON, Cluster, app_objects, eventually

from lockstep.core.names import GROUP, POLICY_PLURAL, VERSION

pytestmark = pytest.mark.e2e


@pytest.fixture
def approver(cluster: Cluster, tmp_path: Path) -> Any:
    """The approver's key (lockstep keys generate) and an Enforce policy over the test's namespace."""
    keys = cluster.lockstep("keys", "generate", "approver", "--out", str(tmp_path))
    assert keys.returncode == 0, keys.stderr
    name = f"e2e-{secrets.token_hex(3)}"
    cluster.custom.create_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "MCPApprovalPolicy", "metadata": {"name": name},
        "spec": {"threshold": 1, "keys": yaml.safe_load(keys.stdout),
                 "scopes": [{"namespaces": [cluster.namespace], "mode": "Enforce"}]}})
    yield tmp_path / "approver.key"
    with contextlib.suppress(Exception):
        cluster.custom.delete_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, name)


def test_the_readme_story_with_signed_approvals_enforced(cluster: Cluster, approver: Path, tmp_path: Path) -> None:
    import kubernetes

    cluster.create(app_objects("weather", cluster.namespace, replicas=1))
    [pod] = eventually(lambda: len(p := cluster.pods("weather")) == 1 and p, "the weather pod")
    eventually(lambda: cluster.pods("weather")[0].status.phase == "Running", "the pod to run")
    manifest = snapshot_through_port_forward(cluster, pod.metadata.name, "weather")
    manifest["spec"]["probe"] = FAST_PROBE

    # Unsigned: the webhook refuses it, even from the cluster administrator that runs this test.
    with pytest.raises(kubernetes.client.ApiException) as refused:
        cluster.apply_interface(manifest)
    assert refused.value.status == 422 and "Unsigned" in str(refused.value.body)

    path = tmp_path / "weather.yaml"
    path.write_text(yaml.safe_dump({**manifest, "metadata": {**manifest["metadata"], "namespace": cluster.namespace}}))
    signed = cluster.lockstep("sign", str(path), "--key", str(approver))
    assert signed.returncode == 0, signed.stderr
    cluster.apply_interface(yaml.safe_load(path.read_text()))
    # As the README says: the pod admitted before its interface has no in-line proxy (ProxyMissing); the
    # restart gives it one.
    restart(cluster, "weather")
    eventually(lambda: all_verified(cluster, "weather", 1) and cluster.pods("weather")[0].metadata.name
               != pod.metadata.name, "the restarted pod verified and Ready under the signed approval")
    name = cluster.pods("weather")[0].metadata.name
    eventually(lambda: cluster.ready_endpoints("weather") == {name}, "the pod in the Service")

    cluster.write_file(name, "/data/description", POISON)
    eventually(lambda: cluster.verdicts("weather")[name] == ("False", "InterfaceChanged"), "the drift detected")
    eventually(lambda: cluster.ready_endpoints("weather") == set(), "the drifted pod out of the Service")
    diff = cluster.lockstep("diff", "weather", "-n", cluster.namespace, "--color", "never")
    assert diff.returncode == 1 and "(signed by approver (sequence 1" in diff.stdout, diff.stdout

    approved = cluster.lockstep("approve", "weather", "-n", cluster.namespace, "--apply", "--sign", str(approver))
    assert approved.returncode == 0 and "signed as sequence 2" in approved.stderr, approved.stderr
    eventually(lambda: all_verified(cluster, "weather", 1), "the pod verified again")
    eventually(lambda: cluster.ready_endpoints("weather") == {name}, "the pod back in the Service")
