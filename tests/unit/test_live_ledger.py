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


def test_a_loss_moves_each_open_call_once_and_counts_any_other_as_a_bad_move():
    ledger = ledger_of(range(1, 8), final=[6])
    # Found on the lost workers: 1, 2 (open), 2 again (found twice), 6 (final already),
    # 9 (never issued), 3 (open but held elsewhere too: in the ready buffer, say).
    assert ledger.move([1, 2, 2, 6, 9, 3], elsewhere={3, 4}) == 2
    ledger.move([1], elsewhere=set())  # moved again by a second loss
    assert (ledger.times_moved(1), ledger.times_moved(2), ledger.times_moved(3)) == (2, 1, 0)
    report = ledger.reconcile(held=[1, 2, 3, 4, 5, 7])
    assert (report.moved, report.bad_moves) == (3, 4)
    assert "moved" not in report.as_dict()  # the account of calls is the same in both modes


class Worker:
    def __init__(self, name, queue=(), held=()):
        self.name, self.queue, self._held_calls = name, [Req(i) for i in queue], held

    def _held(self):
        return [Req(i) for i in self._held_calls]


def test_the_walk_of_some_workers_and_of_all_the_others():
    from types import SimpleNamespace

    from orchestrator.run.ledger import calls_on, held_call_ids

    fill, decode = Worker("midfill-0", queue=[1, 2]), Worker("decode-0", held=[3, 2])
    rt = SimpleNamespace(fill_workers={"midfill-0": fill}, decode_workers={"decode-0": decode},
                         ready=SimpleNamespace(_items=[Req(4)]))
    orch = SimpleNamespace(queue=[SimpleNamespace(request=Req(5))], runtime=rt)
    assert calls_on(orch, ["decode-0", "prefill-9"]) == [3, 2]  # prefill-9: not there now
    assert calls_on(orch, ["midfill-0", "decode-0"]) == [1, 2, 3, 2]
    assert held_call_ids(orch, extra=[Req(6)]) == {1, 2, 3, 4, 5, 6}
    assert held_call_ids(orch, skip={"decode-0"}) == {1, 2, 4, 5}
