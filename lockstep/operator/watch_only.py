"""kopf's change tracking, turned off: Lockstep handles raw watch events only.

kopf builds a "diff base" of every watched object on every watch event (a deep copy of the body, then a
second deep copy by the progress storage) so that `on.create`/`on.update` handlers can be given a diff.
Lockstep registers no such handler: its pods, resources and Services are handled from the raw event
(`kopf.on.event`), and a profile of the operator under load put those two copies and the diff at about a
quarter of its CPU (docs/scale.md). This storage gives kopf an empty essence instead, through kopf's own
extension point (`settings.persistence.diffbase_storage`), so nothing is copied or compared.

It is only correct while no changing handler exists: `refuse_changing_handlers` stops the operator at
start if one is registered, and the storage refuses to store a diff base, which only those handlers do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import kopf

__all__ = ["ChangingHandlerRegistered", "WatchOnlyDiffBase", "refuse_changing_handlers"]


class ChangingHandlerRegistered(RuntimeError):
    """A create/update/delete/resume handler (or a daemon or timer) was registered beside WatchOnlyDiffBase."""


class WatchOnlyDiffBase(kopf.DiffBaseStorage):
    """No diff base: every object's essence is empty, so kopf sees no change to hand to a handler."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        raise ChangingHandlerRegistered("kopf stored a diff base: a changing handler ran beside WatchOnlyDiffBase")


def refuse_changing_handlers(registry: kopf.OperatorRegistry) -> None:
    """Raise ChangingHandlerRegistered if the registry holds a handler that needs kopf's diff base."""
    # kopf lists a registry's handlers only through these private registries.
    found = [handler.id for handler in (*registry._changing.get_all_handlers(),
                                        *registry._spawning.get_all_handlers())]
    if found:
        raise ChangingHandlerRegistered(
            f"handlers that need kopf's diff base are registered ({', '.join(found)}); "
            "lockstep.operator.watch_only.WatchOnlyDiffBase must not be used with them")
