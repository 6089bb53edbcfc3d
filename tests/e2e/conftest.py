"""End-to-end tests against a real cluster with Lockstep installed (see docs/e2e.md for kind and the
real-node tier).

They run only when ``KUBECONFIG`` is set; otherwise every test in this folder is skipped with
the reason. Fixtures: a Kubernetes API client, a check that Lockstep is installed, and a fresh
namespace opted in to injection (deleted afterwards).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
INJECT_LABEL = "lockstep.dev/inject"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KUBECONFIG"):
        return
    skip = pytest.mark.skip(reason="needs a real cluster with Lockstep installed: set KUBECONFIG (docs/e2e.md)")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kube_api() -> Iterator[Any]:
    import kubernetes

    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(client_configuration=configuration)
    except kubernetes.config.ConfigException as error:
        pytest.skip(f"KUBECONFIG is set but unusable: {error}")
    with kubernetes.client.ApiClient(configuration) as api:
        yield api


@pytest.fixture(scope="session")
def lockstep_installed(kube_api: Any) -> None:
    import kubernetes

    extensions = kubernetes.client.ApiextensionsV1Api(kube_api)
    try:
        extensions.read_custom_resource_definition("mcpserverinterfaces.lockstep.dev")
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            pytest.skip("Lockstep is not installed in this cluster: helm install lockstep charts/lockstep")
        raise


@contextlib.contextmanager
def fresh_namespace(kube_api: Any, name: str, labels: dict[str, str]) -> Iterator[str]:
    """Namespace ``name`` for the block; deleted with everything in it unless LOCKSTEP_E2E_KEEP is set."""
    import kubernetes

    core = kubernetes.client.CoreV1Api(kube_api)
    core.create_namespace({"metadata": {"name": name, "labels": labels}})
    try:
        yield name
    finally:
        if not os.environ.get("LOCKSTEP_E2E_KEEP"):
            core.delete_namespace(name)


@pytest.fixture
def e2e_namespace(kube_api: Any, lockstep_installed: None) -> Iterator[str]:
    """A fresh namespace with ``lockstep.dev/inject: enabled``."""
    with fresh_namespace(kube_api, f"lockstep-e2e-{secrets.token_hex(3)}", {INJECT_LABEL: "enabled"}) as name:
        yield name


@pytest.fixture
def agent_namespace(kube_api: Any, e2e_namespace: str) -> Iterator[str]:
    """A namespace that is not opted in, for the agents (MCP clients) that call the servers."""
    with fresh_namespace(kube_api, f"{e2e_namespace}-agents", {}) as name:
        yield name


@pytest.fixture
def cluster(kube_api: Any, e2e_namespace: str, agent_namespace: str) -> Any:
    """The e2e namespaces with the API helpers of lockstep_testing.real_cluster (pods, verdicts,
    endpoints, exec, an agent, the CLI)."""
    from lockstep_testing.real_cluster import Cluster

    return Cluster(kube_api, e2e_namespace, agent_namespace)
