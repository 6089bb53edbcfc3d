"""Fixtures of the approval-flow tests (helpers in lockstep_testing.approval_support); the operator
round trip reuses the operator tests' fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lockstep_testing.approval_support import Cluster, make_cluster
from lockstep_testing.operator_fixtures import operator, tls_files, tokens  # noqa: F401


@pytest.fixture
def cluster(kmock: Any, tmp_path: Path) -> Cluster:
    """kmock as the API server, and a kubeconfig (context namespace agents) that points at it."""
    return make_cluster(kmock, tmp_path)
