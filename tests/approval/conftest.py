"""Fixtures of the approval-flow tests (helpers in lockstep_testing.approval_support)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lockstep_testing.approval_support import Cluster, make_cluster


@pytest.fixture
def cluster(kmock: Any, tmp_path: Path) -> Cluster:
    """kmock as the API server, and a kubeconfig (context namespace agents) that points at it."""
    return make_cluster(kmock, tmp_path)


# The operator round trip reuses the operator tests' kmock support (tests/lockstep_testing/kmock_support.py).

@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from lockstep_testing.kmock_support import make_tls_files

    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tokens(kmock: Any) -> Any:
    from lockstep_testing.kmock_support import TokenBook, declare_resources

    declare_resources(kmock)
    return TokenBook(kmock)


@pytest.fixture
async def operator(kmock: Any, tokens: Any, tls_files: Any) -> AsyncIterator[Any]:
    from lockstep_testing.kmock_support import operator_config, run_operator

    async with run_operator(kmock, operator_config(tls_files)) as running:
        yield running
