"""The Helm-generated CA survives `helm upgrade`: rendered cluster-aware (Helm's `lookup` reads the live
API, here kmock), the chart reuses the existing TLS Secret instead of generating a new pair."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helm_python import Config
from helm_python.chart import Chart
from lockstep_testing.chart_render import NAMESPACE, RELEASE, Render, documents, one

SECRET = "demo-lockstep-tls"


async def cluster_render(chart: Any, kmock: Any, **options: Any) -> list[dict[str, Any]]:
    """Render in a thread: the native call blocks, and kmock answers on this test's event loop."""
    config = Config(kube_apiserver=str(kmock.url).rstrip("/"), kube_token="test",
                    kube_insecure_skip_tls_verify=True, namespace=NAMESPACE)
    try:
        rendered = await asyncio.to_thread(config.render, chart, {}, name=RELEASE, namespace=NAMESPACE, **options)
        return documents(rendered)
    finally:
        config.close()


@pytest.fixture
def api(kmock: Any) -> Any:
    kmock.resources.load_bundled()
    return kmock


async def test_an_upgrade_reuses_the_secret_that_the_install_generated(chart: Chart, render: Render, api: Any) -> None:
    installed = one(render(), "Secret", SECRET)
    async with api.post(f"/api/v1/namespaces/{NAMESPACE}/secrets", json=installed) as answer:
        assert answer.status < 300, await answer.text()

    upgraded = await cluster_render(chart, api, is_upgrade=True, revision=2)

    assert one(upgraded, "Secret", SECRET)["data"] == installed["data"]
    webhooks = one(upgraded, "MutatingWebhookConfiguration")["webhooks"]
    assert {h["clientConfig"]["caBundle"] for h in webhooks} == {installed["data"]["ca.crt"]}
    assert len(api["get", f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}"]) >= 1, "no lookup reached the API"
    assert len(api["get", f"/api/v1/namespaces/{NAMESPACE}/secrets/elsewhere"]) == 0


async def test_a_first_install_against_a_cluster_generates_a_new_ca(chart: Chart, render: Render, api: Any) -> None:
    offline = one(render(), "Secret", SECRET)
    installed = one(await cluster_render(chart, api, is_install=True), "Secret", SECRET)
    assert installed["data"]["ca.crt"] != offline["data"]["ca.crt"]
    assert set(installed["data"]) == {"ca.crt", "tls.crt", "tls.key"}


async def test_an_incomplete_secret_is_replaced_rather_than_reused(chart: Chart, render: Render, api: Any) -> None:
    broken = one(render(), "Secret", SECRET)
    del broken["data"]["tls.key"]
    async with api.post(f"/api/v1/namespaces/{NAMESPACE}/secrets", json=broken) as answer:
        assert answer.status < 300
    upgraded = one(await cluster_render(chart, api, is_upgrade=True, revision=2), "Secret", SECRET)
    assert upgraded["data"]["ca.crt"] != broken["data"]["ca.crt"] and "tls.key" in upgraded["data"]
