"""The verdict watches' wake-ups: one event per watched pod, which the reconciler sets when it has judged the pod
(lockstep.operator.verdict_watch waits on them). A leaf: the reconciler and the watch both import it."""

from __future__ import annotations

import asyncio

from lockstep.operator.state import Key

__all__ = ["VerdictPulses"]


class VerdictPulses:
    """One event per watched pod, set (and replaced) when the reconciler has judged the pod."""

    def __init__(self) -> None:
        self._events: dict[Key, asyncio.Event] = {}

    def changed(self, key: Key) -> None:
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    def event(self, key: Key) -> asyncio.Event:
        """The event the next change of ``key`` sets (take it before reading the state it guards)."""
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = asyncio.Event()
        return event

    def wake_all(self) -> None:
        for key in list(self._events):
            self.changed(key)

    def discard(self, key: Key) -> None:
        """Nobody waits on ``key`` any more."""
        self._events.pop(key, None)

    def __len__(self) -> int:
        return len(self._events)
