"""Fixtures of the operator tests: kmock as the API server, the real operator on its own thread,
real MCP servers, and a sidecar stand-in (the core's live reader posting real reports over HTTPS)."""

from lockstep_testing.operator_fixtures import operator, tls_files, tokens  # noqa: F401
