"""A sparse latency column reads as the dense column of the same appends would."""

import math
from array import array

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.run.series import Series, SparseColumn
from workers.request import LatencyPart, Request


@given(st.lists(st.one_of(st.just(math.nan), st.floats(-1e9, 1e9)), max_size=60),
       st.integers(-70, 70), st.integers(-70, 70))
def test_a_sparse_column_reads_as_the_dense_one(values, start, stop):
    dense, sparse = array("d"), SparseColumn()
    for v in values:
        dense.append(v)
        sparse.append(v)
    assert len(sparse) == len(dense)
    assert np.array_equal(np.asarray(sparse, dtype=np.float64), np.asarray(dense),
                          equal_nan=True)
    same = [(a == b) or (math.isnan(a) and math.isnan(b))
            for a, b in zip(sparse[start:stop], dense[start:stop], strict=True)]
    assert len(sparse[start:stop]) == len(dense[start:stop]) and all(same)
    if values:
        i = start % len(values)
        a, b = sparse[i], dense[i]
        assert a == b or (math.isnan(a) and math.isnan(b))


def _done(call_id: int, fill_s: float) -> Request:
    req = Request(call_id, "s", 64, 1, arrival_s=0.0)
    req.enter(LatencyPart.FILL, 0.0)
    req.finish(fill_s)
    return req


def test_periods_without_completions_read_nan_and_take_no_room():
    s = Series()
    s.add_breakdown([])
    s.add_breakdown([_done(1, 0.5), _done(2, 1.5)])
    for _ in range(1000):
        s.add_breakdown([])
    col = s.latency_breakdown_s["fill_p50_s"]
    assert len(col) == 1002 and math.isnan(col[0]) and col[1] == 1.0 and math.isnan(col[-1])
    assert len(col._values) == 1  # one record holds a value


@given(st.lists(st.lists(st.floats(0, 1e4), min_size=len(LatencyPart),
                         max_size=len(LatencyPart)), max_size=5), st.integers(0, 2))
def test_a_periods_breakdown_is_numpys_percentile_of_its_calls(parts, empty_before):
    """One call, several or none in a period: each column reads np.percentile of the
    period's calls' part (NaN without calls)."""
    s = Series()
    for _ in range(empty_before):
        s.add_breakdown([])
    done = []
    for values in parts:
        req = Request(len(done) + 1, "s", 64, 1, arrival_s=0.0)
        req.parts_s[:] = values
        done.append(req)
    s.add_breakdown(done)
    assert len(s.latency_breakdown_s) == len(LatencyPart) * 3
    for part in LatencyPart:
        for q in (50, 90, 99):
            col = s.latency_breakdown_s[f"{part.key}_p{q}_s"]
            assert len(col) == empty_before + 1
            assert all(math.isnan(v) for v in col[:empty_before])
            if done:
                assert col[-1] == float(np.percentile([r.parts_s[part] for r in done], q))
            else:
                assert math.isnan(col[-1])


@given(st.lists(st.one_of(st.integers(0, 3), st.integers(-3, -1)), max_size=20))
def test_a_series_latency_columns_count_every_record(steps):
    """Records with no call, one, several (add_breakdown) and idle spans (repeat_idle), in
    any order: every latency column has one value a record, NaN but where calls completed,
    as appending to each column by itself gives."""
    s, dense, call_id = Series(), {}, 0
    s.add_breakdown([])  # the first record makes the columns
    for name in s.latency_breakdown_s:
        dense[name] = SparseColumn()
        dense[name].append(math.nan)
    for step in steps:
        if step < 0:  # an idle span after the last record
            for name in ("decode_occupancy", "decode_running", "decode_slots",
                         "decode_draining", "backlog",
                         "ready_depth", "admission_queue", "held", "upstream_waiting",
                         "in_flight", "submitted_total", "completed_total",
                         "rejected_total", "time_s"):
                getattr(s, name).append(0)
            s.workers_by_pool.append({})
            s.repeat_idle(1.0, -step, "hold", 0)
            for col in dense.values():
                col.append(math.nan)
            continue
        done = [_done(call_id + i, 0.5 * (call_id + i + 1)) for i in range(step)]
        call_id += step
        s.add_breakdown(done)
        fill = sorted(r.parts_s[LatencyPart.FILL] for r in done)
        for name, col in dense.items():
            if not done:
                col.append(math.nan)
            elif name.startswith("fill_"):
                col.append(float(np.percentile(fill, int(name.split("_p")[1][:-2]))))
            else:
                col.append(0.0)
    for name, col in s.latency_breakdown_s.items():
        assert len(col) == len(dense[name]) == 1 + len(steps)
        assert np.array_equal(np.asarray(col), np.asarray(dense[name]), equal_nan=True)
