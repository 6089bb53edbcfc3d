"""Signed approvals in the running operator (kmock): the MCPApprovalPolicy objects it lists and watches."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from lockstep_testing.interface_admission import manifest
from lockstep_testing.kmock_support import operator_config, run_operator
from lockstep_testing.polling import eventually

from lockstep.core.approver_keys import generate_key, signer_of_pem
from lockstep.core.revision import Revision
from lockstep.core.signed_approval import ATTESTATION_FIELD, ApprovalStatement, SignedApproval
from lockstep.demo.emulator import POLICY_RESOURCE, Emulator

ALICE = generate_key()
pytestmark = pytest.mark.kmock(cls=Emulator)


def policy_object(public_pem: str) -> dict[str, Any]:
    return {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPApprovalPolicy", "metadata": {"name": "approvers"},
            "spec": {"keys": [{"name": "alice", "publicKey": public_pem}],
                     "scopes": [{"namespaces": ["agents"], "mode": "Enforce"}]}}


def signed(body: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    for entry in body["spec"]["approved"]:
        statement = ApprovalStatement.of(Revision.from_spec(entry), "agents", "weather", 1,
                                         datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1))
        entry[ATTESTATION_FIELD] = SignedApproval.create(statement, signer_of_pem(ALICE.private_pem)).to_dict()
    return body


async def test_the_operator_counts_the_untrusted_revisions_of_each_resource(kmock: Any, tokens: Any,
                                                                          tls_files: Any) -> None:
    """The gauge lockstep_approvals_untrusted: 1 for the unsigned revision under an Enforce policy; 0 once signed."""
    kmock.objects[POLICY_RESOURCE, None, "approvers"] = policy_object(ALICE.public_pem.decode())
    body = manifest()
    body["metadata"].update(uid="uid-weather", generation=1, resourceVersion="1")
    kmock.objects["lockstep.dev/v1alpha1/mcpserverinterfaces", "agents", "weather"] = body
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        gauge = operator.operator.metrics.approvals_untrusted  # type: ignore[union-attr]

        def untrusted() -> float | None:
            samples = [sample.value for metric in gauge.collect() for sample in metric.samples
                       if sample.labels == {"namespace": "agents", "interface": "weather"}]
            return samples[0] if samples else None

        await eventually(lambda: untrusted() == 1, what="one untrusted revision counted")
        path = "/apis/lockstep.dev/v1alpha1/namespaces/agents/mcpserverinterfaces/weather"
        async with kmock.patch(path, json={"spec": {"approved": signed(body)["spec"]["approved"]}}) as response:
            assert response.status < 300, await response.text()  # a watch event, as the API server sends one
        await eventually(lambda: untrusted() == 0, what="none once it is signed")
