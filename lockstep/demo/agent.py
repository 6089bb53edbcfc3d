"""The demo's connected agent: one MCP session through the pod's in-line proxy, held across the rug pull."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from lockstep.demo.narrator import DemoFailed, Narrator

__all__ = ["AGENT_INTERVAL", "POISON_MARKER", "ConnectedAgent"]

#: What only the rug-pulled get_forecast carries (examples/weather_server.py, POISONED_DESCRIPTION).
POISON_MARKER = "<IMPORTANT>"
#: The agent lists tools on every tools/list_changed and at least this often (seconds).
AGENT_INTERVAL = 0.5


class ConnectedAgent:
    """An agent that holds ONE MCP session (the ``mcp`` SDK's client over streamable HTTP) through the pod's
    in-line proxy (the Service's ``targetPort: lockstep-mcp``; here its port on the host's loopback) and lists
    tools at once on every ``notifications/tools/list_changed``, and every AGENT_INTERVAL seconds. A rug pull
    is aimed at exactly such agents: leaving the Service steers only new connections. Every answer is kept
    with its time, classified: ``clean``, ``POISONED`` (carries the rug pull's marker), ``refused`` (the
    proxy refused the answer), ``isolated`` (every request refused while the verdict is not True) or
    ``error``."""

    def __init__(self, url: str, narrator: Narrator) -> None:
        self.url, self.narrator = url, narrator
        self.entries: list[tuple[str, str, str]] = []  # (narrator's stamp, kind, what it received)
        self.session_id: str | None = None
        self.statuses: list[int] = []
        self._shown = 0
        self._changed = asyncio.Event()
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def count(self, kind: str, since: int = 0) -> int:
        return sum(1 for _, entry_kind, _ in self.entries[since:] if entry_kind == kind)

    @property
    def poisoned(self) -> int:
        return self.count("POISONED")

    async def connect(self) -> None:
        self._task = asyncio.create_task(self._run(), name="demo-agent")
        ready = asyncio.ensure_future(self._ready.wait())
        await asyncio.wait({ready, self._task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if not self._ready.is_set():
            await self.disconnect()
            raise DemoFailed("the agent could not open a session through the in-line proxy: "
                             + (self.entries[-1][2] if self.entries else "no answer within 30s"))

    async def disconnect(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 15)

    def _record(self, kind: str, text: str) -> None:
        self.entries.append((self.narrator.stamp(), kind, text))

    async def _on_response(self, response: Any) -> None:
        if response.request.method == "POST":
            self.statuses.append(response.status_code)
            self.session_id = self.session_id or response.headers.get("mcp-session-id")

    async def _on_message(self, message: Any) -> None:
        from mcp import types

        if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
            self._record("list_changed", "notifications/tools/list_changed (the server announces new tools)")
            self._changed.set()

    async def _run(self) -> None:
        import httpx2
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        try:
            async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=300), trust_env=False,
                                          event_hooks={"response": [self._on_response]}) as http, \
                    streamable_http_client(self.url, http_client=http) as (read, write), \
                    ClientSession(read, write, message_handler=self._on_message) as session:
                await session.initialize()
                await self._list(session)
                self._ready.set()
                while not self._stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wait(), AGENT_INTERVAL)
                    if not self._stop.is_set():
                        await self._list(session)
        except Exception as error:  # noqa: BLE001 - narrated, and the demo fails if it matters
            self._record("error", f"session ended: {error!r:.200}")

    async def _wait(self) -> None:
        changed, stop = asyncio.ensure_future(self._changed.wait()), asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({changed, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            stop.cancel()
        self._changed.clear()

    async def _list(self, session: Any) -> None:
        from mcp.shared.exceptions import MCPError

        before = len(self.statuses)
        try:
            result = await asyncio.wait_for(session.list_tools(), 10)
        except MCPError as error:
            status = self.statuses[-1] if len(self.statuses) > before else None
            http = f"HTTP {status}, " if status else ""
            kind = "isolated" if "isolated by Lockstep" in error.error.message else "refused"
            self._record(kind, f"tools/list → refused ({http}{error.error.code}): "
                               f"{_short(error.error.message, 130)}")
            return
        except Exception as error:  # noqa: BLE001
            self._record("error", f"tools/list → {error!r:.200}")
            return
        tools = [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in result.tools]
        forecast = next((tool for tool in tools if tool["name"] == "get_forecast"), {})
        poisoned = POISON_MARKER in json.dumps(tools)
        described = (forecast.get("description") or "").replace("\n", " ")
        self._record("POISONED" if poisoned else "clean",
                     f"tools/list → {', '.join(tool['name'] for tool in tools)}; get_forecast: {described!r}")

    def show(self, heading: str) -> None:
        """Narrate what the agent received since the last call (if anything), runs of the same answer
        collapsed."""
        new = self.entries[self._shown:]
        self._shown = len(self.entries)
        if not new:
            return
        self.narrator.say(heading)
        index = 0
        while index < len(new):
            stamp, kind, text = new[index]
            run = index + 1
            while run < len(new) and new[run][1:] == (kind, text):
                run += 1
            repeated = f"  (×{run - index}, the last at {new[run - 1][0].strip('[] ')})" if run - index > 1 else ""
            self.narrator.detail(f"{stamp} {'!! ' if kind == 'POISONED' else ''}{text}{repeated}")
            index = run


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"
