"""kopf runs without a diff base (lockstep.operator.watch_only): Lockstep handles raw watch events only, so
the deep copies and the diff kopf makes per event for on.create/on.update handlers are skipped; a changing
handler registered beside it stops the operator at start instead of silently never seeing a change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
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


def test_bench_pod_events_counts_kopfs_work_per_event() -> None:
    """bench/pod_events.py runs (it reaches into kopf's processing) and its exact call counts show the saving."""
    script = Path(__file__).resolve().parents[2] / "bench" / "pod_events.py"
    result = subprocess.run([sys.executable, str(script), "--events", "40", "--rounds", "1"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    rows = {line.split("  ")[0]: line.split()[-1] for line in result.stdout.splitlines()
            if line.startswith(("kopf's default", "Lockstep's"))}
    default, lockstep = int(rows["kopf's default"]), int(rows["Lockstep's (no diff base)"])
    assert lockstep * 3 < default, result.stdout
