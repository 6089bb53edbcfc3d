"""The report endpoint refuses forged, mis-addressed, oversized and too frequent reports, and such a
report never touches a pod's condition."""

from __future__ import annotations

import copy
import json
from typing import Any

import kmock
import pytest
from lockstep_testing.kmock_support import (
    NAMESPACE,
    TOOLS,
    Emulator,
    RunningOperator,
    Sidecar,
    TlsFiles,
    TokenBook,
    create_objects,
    make_pod,
    make_resource,
    metrics_text,
    operator_config,
    run_operator,
    verdict_of,
    wait_for,
)

from lockstep.core import Interface
from lockstep.core.report import Observation

pytestmark = pytest.mark.kmock(cls=Emulator)

AT = "2026-11-22T02:00:00Z"


def _report(tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    document = {"tools": copy.deepcopy(tools or TOOLS)}
    return copy.deepcopy(Observation.of_interface(Interface.from_document(document), AT).to_dict())


def _sidecar(operator: RunningOperator, tls: TlsFiles, token: str) -> Sidecar:
    return Sidecar(f"https://127.0.0.1:{operator.report_port}", token, tls)


def _pod_writes(emulator: Emulator) -> int:
    return len(emulator["patch", kmock.resource("v1/pods"), kmock.subresource("status")])


async def _scene(emulator: Emulator, operator: RunningOperator) -> None:
    await create_objects(emulator, make_resource([{"tools": TOOLS}]), make_pod("p1"),
                         make_pod("lonely", {"app": "other"}))
    cache = operator.operator.reconciler.cache  # type: ignore[union-attr]
    await wait_for(lambda: cache.pod(NAMESPACE, "lonely") and cache.resource(NAMESPACE, "weather"))


async def test_forged_and_misaddressed_reports_are_refused(kmock: Emulator, tokens: TokenBook,
                                                           operator: RunningOperator, tls_files: TlsFiles) -> None:
    await _scene(kmock, operator)
    good = tokens.issue(NAMESPACE, "p1", "uid-p1")
    sidecar = _sidecar(operator, tls_files, good)

    forged = _report()
    forged["definitions"]["tools"][0]["description"] = "Tampered after digesting."
    wrong_aggregate = _report()
    wrong_aggregate["digest"] = "sha256:" + "0" * 64
    cases: list[tuple[str, Any, str, int, str]] = [
        ("no token", _report(), "", 401, "Unauthenticated"),
        ("unknown token", _report(), "not-a-token", 401, "Unauthenticated"),
        ("token for another audience", _report(), tokens.issue(NAMESPACE, "p1", "uid-p1", audience="vault"),
         401, "Unauthenticated"),
        ("token of a pod that does not exist", _report(), tokens.issue(NAMESPACE, "gone", "uid-gone"),
         404, "UnknownPod"),
        ("token of an earlier pod with the same name", _report(), tokens.issue(NAMESPACE, "p1", "uid-old"),
         403, "UidMismatch"),
        ("pod that nothing selects", _report(), tokens.issue(NAMESPACE, "lonely", "uid-lonely"),
         403, "NotSelected"),
        ("definitions that do not digest to the digests", forged, good, 400, "BadReport"),
        ("aggregate that does not match the components", wrong_aggregate, good, 400, "BadReport"),
        ("not a report", {"hello": "world"}, good, 400, "BadReport"),
    ]
    for name, body, token, status, reason in cases:
        answer = await sidecar.post(body, token=token)
        assert answer[0] == status and answer[1]["reason"] == reason, name

    status, answer = await sidecar.post(None, raw=b'{"observedAt": NaN', token=good)
    assert (status, answer["reason"]) == (400, "BadReport")
    # A report body that names another pod changes nothing: the pod comes from the token only.
    named = {**_report(), "pod": "lonely", "podName": "lonely", "uid": "uid-lonely"}
    status, answer = await sidecar.post(named)
    assert (status, answer["verdict"]["reason"]) == (202, "Verified"), answer
    await wait_for(lambda: verdict_of(kmock, "p1") == ("True", "Verified"))
    assert verdict_of(kmock, "lonely") is None
    assert _pod_writes(kmock) == 1

    metrics = await metrics_text(operator)
    for reason, count in [("Unauthenticated", 3), ("UnknownPod", 1), ("UidMismatch", 1), ("NotSelected", 1),
                          ("BadReport", 4)]:
        assert f'lockstep_reports_rejected_total{{reason="{reason}"}} {count}.0' in metrics


async def test_oversized_and_too_frequent_reports(kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    config = operator_config(tls_files, body_limit=64 * 1024, rate_per_pod=0.01, rate_burst=2)
    async with run_operator(kmock, config) as operator:
        await _scene(kmock, operator)
        sidecar = _sidecar(operator, tls_files, tokens.issue(NAMESPACE, "p1", "uid-p1"))
        big_tools = copy.deepcopy(TOOLS) + [{"name": f"t{i}", "description": "x" * 1000,
                                             "inputSchema": {"type": "object"}} for i in range(80)]
        status, answer = await sidecar.post(_report(big_tools))
        assert (status, answer["reason"]) == (413, "TooLarge")
        raw = json.dumps(_report()).encode()
        assert (await sidecar.post(None, raw=raw))[0] == 202
        assert (await sidecar.post(None, raw=raw))[0] == 202  # the burst is 2
        status, answer = await sidecar.post(None, raw=raw)
        assert (status, answer["reason"]) == (429, "RateLimited")
        assert _pod_writes(kmock) == 1
