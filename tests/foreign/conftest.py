"""Fixtures for tests against foreign MCP implementations (see tests/lockstep_testing/foreign.py).

Every test here is skipped, with the reason, when the npm packages are not installed: run
``tests/foreign/install`` (CI does). Servers are subprocesses on free loopback ports.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockstep_testing.foreign import ForeignServer, everything_server, foreign_missing, ts_server


@pytest.fixture(autouse=True)
def _foreign_installed() -> None:
    if reason := foreign_missing():
        pytest.skip(reason)


@pytest.fixture(params=["streamable-http", "sse"])
def everything(request: pytest.FixtureRequest) -> Iterator[ForeignServer]:
    """server-everything over each transport, one process per test."""
    if reason := foreign_missing():
        pytest.skip(reason)
    with everything_server(request.param) as server:
        yield server


@pytest.fixture
def everything_http() -> Iterator[ForeignServer]:
    if reason := foreign_missing():
        pytest.skip(reason)
    with everything_server("streamable-http") as server:
        yield server


@pytest.fixture(params=["streamable-http", "sse"])
def mutable_ts(request: pytest.FixtureRequest) -> Iterator[ForeignServer]:
    """The TypeScript-SDK server whose tools a test swaps (``server.set_tools``), over each transport."""
    if reason := foreign_missing():
        pytest.skip(reason)
    with ts_server(transport=request.param) as server:
        yield server
