"""The call ledger: calls issued on the session side, reconciled against the calls that
reached a final state and the calls the service still holds. A dropped call is lost = 1."""

import pytest

from orchestrator.run.ledger import CallLedger, Final, LedgerListener


def ledger_of(issued, final=(), how=Final.COMPLETED):
    ledger = CallLedger()
    for call_id in issued:
        ledger.issue(call_id)
    for call_id in final:
        ledger.finish(call_id, how)
    return ledger


def test_every_call_final_or_held_is_not_lost():
    ledger = ledger_of(range(1, 6), final=[1, 2])
    ledger.finish(3, Final.REJECTED)
    report = ledger.reconcile(held=[4, 5])
    assert (report.issued, report.completed, report.rejected) == (5, 2, 1)
    assert (report.in_flight, report.lost, report.final_twice) == (2, 0, 0)


def test_a_dropped_call_is_lost():
    ledger = ledger_of(range(1, 6), final=[1, 2])
    report = ledger.reconcile(held=[3, 5])  # call 4 is held nowhere
    assert report.lost == 1 and report.lost_ids == (4,)
    assert report.in_flight == 2
    assert report.as_dict()["lost_call_ids"] == [4]


def test_a_held_call_that_finished_since_counts_as_final_not_in_flight():
    ledger = ledger_of([1, 2], final=[1, 2])
    report = ledger.reconcile(held=[1, 2])
    assert report.in_flight == 0 and report.completed == 2 and report.lost == 0


def test_a_call_final_twice_is_counted_and_not_double_counted():
    ledger = ledger_of([1, 2], final=[1])
    ledger.finish(1, Final.COMPLETED)
    report = ledger.reconcile(held=[2])
    assert report.final_twice == 1 and report.completed == 1


def test_a_final_call_never_issued_is_counted():
    ledger = ledger_of([1], final=[1, 7])
    report = ledger.reconcile(held=[])
    assert report.unknown_final == 1 and report.completed == 1


def test_a_call_issued_twice_is_misuse():
    ledger = ledger_of([1])
    with pytest.raises(ValueError, match="call 1 issued twice"):
        ledger.issue(1)


class Req:
    def __init__(self, call_id):
        self.call_id = call_id


def test_the_listener_issues_submitted_calls_and_finishes_done_and_rejected_ones():
    listener = LedgerListener()
    for i in (1, 2, 3):
        listener.on_submit(None, Req(i), 0.0)
    listener.on_done(None, Req(1), 1.0)
    listener.on_reject(None, Req(2), 1.0)
    report = listener.ledger.reconcile(held=[])
    assert (report.completed, report.rejected, report.lost, report.lost_ids) == (1, 1, 1, (3,))


def test_a_long_run_keeps_a_bit_per_final_call_and_a_set_of_the_open_ones():
    ledger = ledger_of(range(1, 100_001), final=range(1, 99_999))
    assert len(ledger._open) == 2 and len(ledger._final_bits) <= 2 * 100_001 // 8 + 1
    report = ledger.reconcile(held=[99_999])
    assert (report.completed, report.in_flight, report.lost_ids) == (99_998, 1, (100_000,))


def test_ids_beyond_the_bitmap_and_a_final_reported_before_its_issue():
    far = CallLedger._BITMAP_IDS + 5
    ledger = ledger_of([far, -3], final=[far, -3])
    ledger.finish(far, Final.COMPLETED)
    ledger.finish(9, Final.REJECTED)  # reported before the session side issued it
    ledger.issue(9)
    report = ledger.reconcile(held=[])
    assert (report.completed, report.rejected, report.final_twice, report.unknown_final,
            report.issued, report.lost) == (2, 1, 1, 0, 3, 0)
