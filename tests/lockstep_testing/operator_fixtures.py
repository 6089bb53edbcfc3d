"""Fixtures that run the real operator against kmock, shared by the operator and approval suites.

A suite's conftest.py imports them by name::

    from lockstep_testing.operator_fixtures import operator, tls_files, tokens  # noqa: F401
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lockstep_testing.kmock_support import (
    Emulator,
    RunningOperator,
    TlsFiles,
    TokenBook,
    declare_resources,
    make_tls_files,
    operator_config,
    run_operator,
)

__all__ = ["operator", "tls_files", "tokens"]


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """A self-signed certificate for the operator's HTTPS endpoints."""
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tokens(kmock: Emulator) -> TokenBook:
    """kmock with Lockstep's resources declared, and pod-bound tokens that its TokenReview accepts."""
    declare_resources(kmock)
    return TokenBook(kmock)


@pytest.fixture
async def operator(kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> AsyncIterator[RunningOperator]:
    """The real operator, on its own thread and event loop, logged in to kmock."""
    async with run_operator(kmock, operator_config(tls_files)) as running:
        yield running
