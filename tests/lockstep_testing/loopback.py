"""Loopback servers for sidecar tests and benches: ASGI apps on fixed ports, an HTTPS stand-in for the
operator's report endpoint that records every report, a restartable MCP server. The TLS material and the
machine's address are the demo's (lockstep/demo/certificates.py), re-exported here."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from lockstep.core.report import Observation
from lockstep.demo.certificates import Certificates, host_address, make_certificates
from lockstep_testing.mcp_servers import MutableServer

__all__ = ["Certificates", "McpServerHandle", "OperatorStandIn", "Report", "host_address",
           "make_certificates", "serve_asgi", "sidecar_env"]


# ---------------------------------------------------------------- serving ASGI apps on a fixed port


@contextlib.asynccontextmanager
async def serve_asgi(app: Any, port: int = 0, **ssl_options: Any) -> AsyncIterator[int]:
    """Serve ``app`` on 127.0.0.1:``port`` (0: a free one) until the block exits; yield the port."""
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="auto",
                            timeout_graceful_shutdown=1, **ssl_options)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        yield int(server.servers[0].sockets[0].getsockname()[1])
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


# ---------------------------------------------------------------- the operator stand-in


@dataclass
class Report:
    received: float  # time.monotonic() on arrival
    authorization: str
    body: dict[str, Any]

    @property
    def observation(self) -> Observation:
        return Observation.from_dict(self.body)  # the operator's own parser: refuses a forged body

    @property
    def digest(self) -> str | None:
        return self.body.get("digest")

    @property
    def failure(self) -> str | None:
        return (self.body.get("failure") or {}).get("reason")


@dataclass
class OperatorStandIn:
    """Records every report; ``answers`` (status codes) are used up first, then 202."""

    certificates: Certificates
    port: int = 0
    reports: list[Report] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    refused: int = 0
    #: Sent as ``approved`` in every answer, as the operator does to a sidecar in proxy mode.
    approved: dict[str, Any] | None = None

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/reports")
        async def report(request: Request) -> JSONResponse:
            status = self.answers.pop(0) if self.answers else 202
            if status != 202:
                self.refused += 1
                return JSONResponse({"error": "injected"}, status_code=status, headers={"Retry-After": "0"})
            self.reports.append(Report(time.monotonic(), request.headers.get("authorization", ""),
                                       await request.json()))
            answer: dict[str, Any] = {"verdict": {"status": "True", "reason": "Verified"}}
            if self.approved is not None:
                answer["approved"] = self.approved
            return JSONResponse(answer, status_code=202)

        return app

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[OperatorStandIn]:
        async with serve_asgi(self.app(), self.port, ssl_certfile=str(self.certificates.cert_file),
                              ssl_keyfile=str(self.certificates.key_file)) as port:
            self.port = port
            yield self

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


# ---------------------------------------------------------------- the MCP server


@dataclass
class McpServerHandle:
    """A MutableServer that can be stopped and started again on the same port."""

    server: MutableServer
    transport: str = "streamable-http"
    port: int = 0
    path: str = "/mcp"
    _stack: contextlib.AsyncExitStack | None = None

    async def start(self) -> None:
        app, self.path = self.server.asgi_app(self.transport)  # a fresh app: a session manager runs once
        self._stack = contextlib.AsyncExitStack()
        self.port = await self._stack.enter_async_context(serve_asgi(app, self.port))

    async def stop(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
            self._stack = None
            self.server._sessions.clear()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[McpServerHandle]:
        """Started for the duration of the block."""
        await self.start()
        try:
            yield self
        finally:
            await self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"


def sidecar_env(mcp_url: str, operator_url: str, ca_pem: str, token_file: Path, *, interval: float = 60,
                transport: str = "streamable-http", **extra: str) -> dict[str, str]:
    return {"LOCKSTEP_MCP_URL": mcp_url, "LOCKSTEP_MCP_TRANSPORT": transport,
            "LOCKSTEP_INTERFACE": "weather", "LOCKSTEP_PROBE_INTERVAL": str(interval),
            "LOCKSTEP_PROBE_TIMEOUT": "5", "LOCKSTEP_OPERATOR_URL": operator_url,
            "LOCKSTEP_TOKEN_PATH": str(token_file), "LOCKSTEP_OPERATOR_CA": ca_pem,
            "LOCKSTEP_SIDECAR_PORT": "0", **extra}
