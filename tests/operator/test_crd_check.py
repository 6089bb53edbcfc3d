"""The operator checks the installed MCPServerInterface CRD at start (lockstep.operator.crd_check): the
fields it lacks are named in the log, in a Warning Event on the CRD and in lockstep_crd_missing_fields,
and the operator keeps running. The real CRD, on a real API server: tests/envtest/test_crd.py."""

from __future__ import annotations

import copy
import logging
from typing import Any

import kmock
import pytest
import yaml
from lockstep.operator.crd_check import CRD_NAME, REASON, check_crd, expected_schema, missing_fields
from lockstep.operator.kube import KubeApiError

from lockstep_testing.chart_render import REPO
from lockstep_testing.kmock_support import (
    Emulator,
    TlsFiles,
    TokenBook,
    metrics_text,
    operator_config,
    run_operator,
)
from lockstep_testing.polling import eventually

pytestmark = pytest.mark.kmock(cls=Emulator)

CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"


def root_crd() -> dict[str, Any]:
    return dict(yaml.safe_load((REPO / "crds" / "mcpserverinterfaces.lockstep.dev.yaml").read_text()))


def schema_of(crd: dict[str, Any]) -> dict[str, Any]:
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def without(crd: dict[str, Any], *path: str) -> dict[str, Any]:
    crd = copy.deepcopy(crd)
    node = schema_of(crd)
    for part in path[:-1]:
        node = node["properties"][part]
    del node["properties"][path[-1]]
    return crd


def test_the_packaged_schema_is_the_root_crds() -> None:
    assert expected_schema() == schema_of(root_crd())
    assert missing_fields(root_crd()) == []


def test_missing_fields_are_named_by_their_outermost_path() -> None:
    crd = without(without(root_crd(), "status", "pods", "quarantined"), "spec", "proxy")
    assert missing_fields(crd) == ["spec.proxy", "status.pods.quarantined"]
    assert missing_fields(without(root_crd(), "status")) == ["status"]


def test_array_items_and_open_branches() -> None:
    crd = root_crd()
    components = schema_of(crd)["properties"]["spec"]["properties"]["approved"]["items"]["properties"]["components"]
    del components["items"]["properties"]["kind"]
    assert missing_fields(crd) == ["spec.approved[].components[].kind"]
    # A branch the installed CRD keeps open is not pruned: nothing under it is missing.
    schema_of(crd)["properties"]["spec"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert missing_fields(crd) == []


def test_a_crd_without_the_operators_version_misses_it_whole() -> None:
    crd = root_crd()
    crd["spec"]["versions"][0]["name"] = "v1beta1"
    assert missing_fields(crd) == ["v1alpha1"]


class Recorder:
    def __init__(self, answer: Any) -> None:
        self.answer, self.value, self.posted = answer, None, []

    async def get(self, path: str) -> dict[str, Any]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return dict(self.answer)

    def set(self, value: float) -> None:
        self.value = value

    async def post(self, ref: Any, type_: str, reason: str, message: str) -> bool:
        self.posted.append((dict(ref), type_, reason, message))
        return True


async def test_an_unreadable_crd_is_logged_and_the_start_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder(KubeApiError(403, "customresourcedefinitions is forbidden"))
    with caplog.at_level(logging.WARNING):
        assert await check_crd(recorder, recorder, recorder) is None
    assert recorder.value is None and not recorder.posted
    assert f"Cannot check the installed CRD {CRD_NAME}" in caplog.text


async def test_missing_fields_are_logged_as_an_error_and_posted_on_the_crd(caplog: pytest.LogCaptureFixture) -> None:
    crd = without(root_crd(), "status", "observed")
    crd["metadata"]["uid"] = "crd-uid"
    recorder = Recorder(crd)
    with caplog.at_level(logging.ERROR):
        assert await check_crd(recorder, recorder, recorder) == ["status.observed"]
    assert recorder.value == 1
    [(ref, type_, reason, message)] = recorder.posted
    assert (ref["kind"], ref["name"], ref["uid"], ref["namespace"]) == \
        ("CustomResourceDefinition", CRD_NAME, "crd-uid", "default")
    assert (type_, reason) == ("Warning", REASON) and "status.observed" in message
    assert [r.levelno for r in caplog.records if "status.observed" in r.getMessage()] == [logging.ERROR]


async def test_an_operator_on_a_crd_without_status_says_so_and_keeps_running(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    kmock.objects[CRDS, None, CRD_NAME] = without(root_crd(), "status")
    async with run_operator(kmock, operator_config(tls_files, metrics_port=0)) as running:
        text = await metrics_text(running)
        assert "lockstep_crd_missing_fields 1.0" in text
        posted = await eventually(lambda: [request.data for request in kmock["post", kmock_events()]
                                         if request.data["reason"] == REASON])
        [event] = posted
        assert event["type"] == "Warning" and event["involvedObject"]["name"] == CRD_NAME
        assert event["metadata"]["namespace"] == "default" and "status" in event["message"]
        assert running.thread.is_alive() and running.operator.reconciler is not None


async def test_an_operator_on_the_crd_it_was_built_with_misses_nothing(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    kmock.objects[CRDS, None, CRD_NAME] = root_crd()
    async with run_operator(kmock, operator_config(tls_files, metrics_port=0)) as running:
        assert "lockstep_crd_missing_fields 0.0" in await metrics_text(running)
        assert not [request for request in kmock["post", kmock_events()] if request.data["reason"] == REASON]


def kmock_events() -> Any:
    return kmock.resource("v1/events")
