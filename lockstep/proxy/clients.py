"""Which client an exchange comes from: the name its ``clientInfo`` gives (the 2025 handshake names it once per
session; the 2026 era in every request's ``_meta``), bounded, and as a metric label (at most MAX_CLIENT_LABELS,
then "other")."""

from __future__ import annotations

from typing import Any

from mcp_types import CLIENT_INFO_META_KEY

__all__ = ["MAX_CLIENT_LABELS", "ClientNames"]

#: Client names kept as metric labels; later ones are counted as "other".
MAX_CLIENT_LABELS = 20


class ClientNames:
    def __init__(self, max_sessions: int) -> None:
        self._max_sessions = max_sessions
        self._sessions: dict[str, str] = {}  # session id -> client name
        self._labels: set[str] = set()

    def of(self, message: Any, session_id: str) -> str:
        """The client of a request: named in it (and remembered for its session), or its session's, or unknown."""
        params = message.get("params") if isinstance(message, dict) else None
        info = None
        if isinstance(params, dict):
            info = params.get("clientInfo")
            meta = params.get("_meta")
            if info is None and isinstance(meta, dict):
                info = meta.get(CLIENT_INFO_META_KEY)
        name = info.get("name") if isinstance(info, dict) else None
        if isinstance(name, str) and name:
            name = name[:64]
            self.remember(session_id, name)
            return name
        return self._sessions.get(session_id, "unknown")

    def remember(self, session_id: str | None, name: str) -> None:
        """The 2025 handshake names the client once per session: keep it for the session's later requests."""
        if session_id and name != "unknown" and len(self._sessions) < self._max_sessions:
            self._sessions[session_id] = name

    def label(self, client: str) -> str:
        if client in self._labels or len(self._labels) < MAX_CLIENT_LABELS:
            self._labels.add(client)
            return client
        return "other"
