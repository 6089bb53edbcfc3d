"""The report endpoint's refusal table (lockstep.core.refusals): what the operator answers and what the
sidecar does agree by construction; these are the table's own invariants."""

from __future__ import annotations

from lockstep.core.refusals import GATEWAY_STATUSES, Refusal, SidecarAction, retried_statuses


def test_each_status_means_one_thing_to_the_sidecar() -> None:
    """The sidecar sees the status first (a gateway's answer has no reason): two refusals with one status
    must ask for the same handling."""
    actions: dict[int, set[SidecarAction]] = {}
    for refusal in Refusal:
        actions.setdefault(refusal.status, set()).add(refusal.sidecar)
    assert all(len(found) == 1 for found in actions.values()), actions
    assert len({refusal.reason for refusal in Refusal}) == len(Refusal)


def test_the_sidecars_sets_come_from_the_table() -> None:
    from lockstep.sidecar.reporter import RETRIED_REJECTIONS, RETRIED_STATUSES, TOO_LARGE

    assert RETRIED_STATUSES == {r.status for r in Refusal if r.sidecar is SidecarAction.RETRY} | GATEWAY_STATUSES
    assert RETRIED_REJECTIONS == retried_statuses(SidecarAction.RETRY_REJECTED) == {401, 403, 404}
    assert TOO_LARGE == 413 and Refusal.TOO_LARGE.sidecar is SidecarAction.REPORT_INVALID
    assert not RETRIED_STATUSES & retried_statuses(SidecarAction.GIVE_UP)


def test_the_metric_labels_are_the_counted_refusals() -> None:
    from lockstep.operator.metrics import REJECTION_REASONS

    assert set(REJECTION_REASONS) == {r.reason for r in Refusal} - {"NotServing"}
