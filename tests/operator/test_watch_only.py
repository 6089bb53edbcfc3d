"""kopf runs without a diff base (lockstep.operator.watch_only): Lockstep handles raw watch events only, so
the deep copies and the diff kopf makes per event for on.create/on.update handlers are skipped; a changing
handler registered beside it stops the operator at start instead of silently never seeing a change."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from lockstep.operator.app import LockstepOperator
from lockstep.operator.config import OperatorConfig
from lockstep.operator.watch_only import ChangingHandlerRegistered, WatchOnlyDiffBase


class Uncopyable:
    """A value kopf's default diff base would deep-copy on every event."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Uncopyable:
        raise AssertionError("the body was deep-copied")


def test_the_operator_gives_kopf_no_diff_base() -> None:
    settings = LockstepOperator(OperatorConfig()).settings()
    storage = settings.persistence.diffbase_storage
    assert isinstance(storage, WatchOnlyDiffBase)
    body = kopf.Body({"metadata": {"name": "p", "labels": {"app": "a"}}, "spec": {"big": Uncopyable()}})
    assert storage.build(body=body) == {} and storage.fetch(body=body) is None
    with pytest.raises(ChangingHandlerRegistered):
        storage.store(body=body, patch=kopf.Patch(), essence=kopf.BodyEssence())


@pytest.mark.parametrize("decorator", [kopf.on.update, kopf.on.create, kopf.on.resume, kopf.on.delete])
def test_a_changing_handler_stops_the_operator_at_start(decorator: Any) -> None:
    operator = LockstepOperator(OperatorConfig())

    @decorator("", "v1", "pods", registry=operator.registry, id="someone-elses-update")
    def handler(**_: Any) -> None: ...

    with pytest.raises(ChangingHandlerRegistered, match="someone-elses-update"):
        operator.settings()


def test_a_timer_stops_the_operator_at_start() -> None:
    operator = LockstepOperator(OperatorConfig())

    @kopf.timer("", "v1", "pods", registry=operator.registry, interval=1, id="a-timer")
    def tick(**_: Any) -> None: ...

    with pytest.raises(ChangingHandlerRegistered, match="a-timer"):
        operator.settings()
