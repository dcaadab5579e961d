"""A worker hands out its last state again while its figures repeat (`StateMemo`)."""

from workers.state import StateMemo, WorkerState


def _state(queue_depth: int) -> WorkerState:
    return WorkerState(name="prefill-0", pool="prefill", phase="prefill", queue_depth=queue_depth,
                       running=1, kv_resident_bytes=0.0, kv_capacity_bytes=8.0e10,
                       tokens_done=12_345, busy_s=2.5, target_batch=1, accepting=True)


def test_the_same_figures_give_the_very_state_kept():
    memo = StateMemo()
    assert memo.last((3, 1)) is None
    kept = memo.keep((3, 1), _state(3))
    assert memo.last((3, 1)) is kept
    assert memo.last((4, 1)) is None  # figures changed: a new state is due
    assert memo.last((3, 1)) is kept  # (asking does not forget)
