"""The pod condition's one home (lockstep.core.conditions): every reason counts as a state, and one rule for
lastTransitionTime serves the pod's condition and the resource's."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lockstep.core.conditions import DRIFT_REASONS, PodState, Reason, condition_dict, state_of, transition_time


def test_every_reason_counts_as_a_state_and_drift_is_one_set() -> None:
    assert {reason: state_of(reason) for reason in Reason}  # no KeyError: the table is complete
    assert state_of(Reason.QUARANTINED) is PodState.QUARANTINED
    assert {state_of(reason) for reason in DRIFT_REASONS} == {PodState.DRIFTED}
    assert "NotApproved" in DRIFT_REASONS and "Verified" not in DRIFT_REASONS  # as the CLI reads it from a pod


@given(st.sampled_from(["True", "False"]), st.sampled_from(["True", "False"]))
def test_the_transition_time_moves_only_when_the_status_changes(before: str, after: str) -> None:
    previous = {"status": before, "lastTransitionTime": "2026-01-01T00:00:00Z"}
    expected = previous["lastTransitionTime"] if before == after else "NOW"
    assert transition_time(previous, after, "NOW") == expected
    assert transition_time(None, after, "NOW") == "NOW"
    condition = condition_dict("T", after, "R", "m", previous, "NOW", observedGeneration=3)
    assert condition == {"type": "T", "status": after, "reason": "R", "message": "m", "observedGeneration": 3,
                         "lastTransitionTime": expected}
