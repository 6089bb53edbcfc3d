"""The approval loop end to end on the emulated API with the real operator: drift isolates the pods,
`lockstep diff` shows it, `lockstep approve` (-f then a GitOps apply, or --apply) approves it, the
operator re-judges every pod at once and the pods are verified again, with no new report."""

from __future__ import annotations

import pytest
import yaml
from lockstep_testing.approval_support import Cluster, write_kubeconfig
from lockstep_testing.kmock_support import (
    CRD_RESOURCE,
    NAMESPACE,
    POISON,
    Emulator,
    create_objects,
    document_of,
    make_pod,
    make_resource,
    resource_status,
    sidecar_for,
    wait_verdict,
    weather_server,
)
from lockstep_testing.mcp_servers import serve_mcp
from lockstep_testing.polling import eventually

from lockstep.core import Interface
from lockstep.core.manifest import load_pinned
from lockstep.core.revision import Revision

pytestmark = pytest.mark.kmock(cls=Emulator)

RESOURCE_PATH = f"/apis/lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/mcpserverinterfaces/weather"


async def drift_two_pods(kmock, tokens, operator, tls_files, server, url):
    """Two verified pods, then a rug pull that the operator catches on both."""
    await create_objects(kmock, make_resource([document_of(server)]), make_pod("p1"), make_pod("p2"))
    sidecars = [sidecar_for(operator, tokens, tls_files, name) for name in ("p1", "p2")]
    for sidecar in sidecars:
        await sidecar.probe(url)
    await wait_verdict(kmock, "p1", ("True", "Verified"))
    server.update_tool("get_alerts", description=POISON)
    for sidecar in sidecars:
        await sidecar.probe(url)
    await wait_verdict(kmock, "p1", ("False", "InterfaceChanged"))
    await wait_verdict(kmock, "p2", ("False", "InterfaceChanged"))
    drifted = Revision.of(Interface.from_document(document_of(server))).aggregate
    # status is written a moment after the pod conditions: wait until it lists both pods on the new revision
    await eventually(lambda: any(entry.get("digest") == drifted and entry.get("definitions")
                               and entry.get("pods") == ["p1", "p2"]
                               for entry in resource_status(kmock).get("observed") or []))
    return sidecars, drifted


async def test_approve_in_git_then_apply_restores_the_pods(kmock, tokens, operator, tls_files, tmp_path):
    cluster = Cluster(kmock, write_kubeconfig(kmock, tmp_path))
    server = weather_server()
    async with serve_mcp(server) as url:
        sidecars, drifted = await drift_two_pods(kmock, tokens, operator, tls_files, server, url)

        review = await cluster.lockstep("diff", "weather")
        assert review.exit_code == 1
        assert f"observed {drifted} (NOT APPROVED), 2 pod(s): p1, p2" in review.stdout
        assert "~ tool/get_alerts [high] description" in review.stdout and f"+{POISON}" in review.stdout

        # The manifest in Git, as a reviewer keeps it (with a comment that must survive).
        in_git = tmp_path / "interface.yaml"
        committed = make_resource([{"instructions": "Weather tools.", "tools": document_of(weather_server())["tools"]}])
        del committed["metadata"]["uid"], committed["metadata"]["generation"]
        in_git.write_text("# approved by the weather team\n" + yaml.safe_dump(committed, sort_keys=False))
        approved = await cluster.lockstep("approve", "weather", "-f", str(in_git))
        assert approved.exit_code == 0, approved.output
        assert in_git.read_text().startswith("# approved by the weather team\n")
        merged = yaml.safe_load(in_git.read_text())
        assert [revision.aggregate for revision in load_pinned(merged).revisions][-1] == drifted

        # The pull request merges; Argo CD or Flux applies the file (kmock does not bump generation itself).
        async with kmock.patch(RESOURCE_PATH, json={"metadata": {"generation": 2}, "spec": merged["spec"]}) as answer:
            assert answer.status == 200
        await wait_verdict(kmock, "p1", ("True", "Verified"))
        await wait_verdict(kmock, "p2", ("True", "Verified"))
        assert [len(sidecar.answers) for sidecar in sidecars] == [2, 2]  # re-judged without a new report
        await eventually(lambda: resource_status(kmock).get("phase") == "Verified")
        assert (await cluster.lockstep("diff", "weather")).exit_code == 0


async def test_approve_apply_restores_the_pods(kmock, tokens, operator, tls_files, tmp_path):
    cluster = Cluster(kmock, write_kubeconfig(kmock, tmp_path))
    server = weather_server()
    async with serve_mcp(server) as url:
        sidecars, drifted = await drift_two_pods(kmock, tokens, operator, tls_files, server, url)
        result = await cluster.lockstep("approve", "weather", "--replace", "--apply")
        assert result.exit_code == 0, result.output
        approved = dict(kmock.objects[CRD_RESOURCE, NAMESPACE, "weather"])["spec"]["approved"]
        assert [entry["digest"] for entry in approved] == [drifted]
        await wait_verdict(kmock, "p1", ("True", "Verified"))
        await wait_verdict(kmock, "p2", ("True", "Verified"))
        assert [len(sidecar.answers) for sidecar in sidecars] == [2, 2]
