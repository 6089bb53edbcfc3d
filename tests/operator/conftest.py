"""Fixtures of the operator tests: kmock as the API server, the real operator on its own thread,
real MCP servers, and a sidecar stand-in (the core's live reader posting real reports over HTTPS)."""

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


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tokens(kmock: Emulator) -> TokenBook:
    declare_resources(kmock)
    return TokenBook(kmock)


@pytest.fixture
async def operator(kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> AsyncIterator[RunningOperator]:
    async with run_operator(kmock, operator_config(tls_files)) as running:
        yield running


