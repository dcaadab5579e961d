"""metrics.om keeps a point when a value changes or a heartbeat is due, streams to spill
files, and gives an idle span skipped by the run the same points as ticking through it."""

import itertools

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

import orchestrator.run.openmetrics as om
from orchestrator.run.openmetrics import HEARTBEAT_S, OpenMetricsRecorder

BASE = 1_700_000_000.0


class Plant:
    """A registry with a gauge, a counter and a histogram a test moves by hand."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.gauge = Gauge("t_queue_requests", "queue", ["pool"], registry=self.registry)
        self.counter = Counter("t_done_requests", "done", registry=self.registry)
        self.hist = Histogram("t_ttft_seconds", "ttft", buckets=(0.1, 1.0),
                              registry=self.registry)
        self.gauge.labels("decode").set(0)


def points(text: str, name: str) -> list[tuple[float, str]]:
    """(simulated time, value) of one sample name's lines."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            *_, value, stamp = line.split()
            out.append((round(float(stamp) - BASE, 3), value))
    return out


def render(recorder, tmp_path, name="m.om") -> str:
    path = tmp_path / name
    recorder.write(path, BASE)
    return path.read_text()


def test_an_unchanged_series_keeps_only_heartbeats_and_the_end(tmp_path):
    plant = Plant()
    rec = OpenMetricsRecorder(plant.registry, 5.0)
    for t in range(0, 1001):
        rec.on_sample(None, None, float(t))
    rec.finish(1000.0)
    text = render(rec, tmp_path)
    # A heartbeat at the first reading (every 5 s) HEARTBEAT_S after the last point.
    got = [t for t, _ in points(text, "t_queue_requests")]
    assert got == [0.0, 285.0, 570.0, 855.0, 1000.0]
    assert HEARTBEAT_S + 5.0 < 300  # Prometheus' lookback: graphs stay continuous
    got = [t for t, _ in points(text, "t_done_requests_total")]  # a counter: the same
    assert got == [0.0, 285.0, 570.0, 855.0, 1000.0]
    # A histogram: no heartbeats (read through rate(), which has nothing to say then).
    got = [t for t, _ in points(text, "t_ttft_seconds_count")]
    assert got == [0.0, 1000.0]


def test_a_change_keeps_the_point_before_it_and_its_own(tmp_path):
    plant = Plant()
    rec = OpenMetricsRecorder(plant.registry, 5.0)
    for t in range(0, 200):
        if t == 102:
            plant.gauge.labels("decode").set(7)
            plant.counter.inc(3)
        rec.on_sample(None, None, float(t))
    rec.finish(199.0)
    text = render(rec, tmp_path)
    # Scrapes every 5 s: 100 is the last one before the change, 105 the first after.
    assert points(text, "t_queue_requests") == [(0.0, "0.0"), (100.0, "0.0"),
                                                 (105.0, "7.0"), (199.0, "7.0")]
    assert points(text, "t_done_requests_total") == [
        (0.0, "0.0"), (100.0, "0.0"), (105.0, "3.0"), (199.0, "3.0")]


def test_heartbeats_restart_from_a_change_and_stop_where_a_series_left(tmp_path):
    plant = Plant()
    rec = OpenMetricsRecorder(plant.registry, 5.0)
    for t in range(0, 1001, 5):
        if t == 300:
            plant.gauge.labels("decode").set(2)
        if t == 400:
            plant.gauge.labels("prefill").set(1)
        if t == 800:
            plant.gauge.remove("prefill")
        if t == 900:
            plant.hist.observe(0.5)
        rec.on_sample(None, None, float(t))
    rec.finish(1000.0)
    text = render(rec, tmp_path)
    assert [t for t, _ in points(text, 't_queue_requests{pool="decode"}')] == [
        0.0, 285.0, 295.0, 300.0, 585.0, 870.0, 1000.0]
    # present from 400 to 795: heartbeats until then, and its last reading kept
    assert [t for t, _ in points(text, 't_queue_requests{pool="prefill"}')] == [
        400.0, 685.0, 795.0]
    # a histogram: the reading before the change, the change, the end
    assert [t for t, _ in points(text, "t_ttft_seconds_count")] == [
        0.0, 895.0, 900.0, 1000.0]


def test_a_histogram_point_keeps_its_buckets_count_and_sum_together(tmp_path):
    plant = Plant()
    rec = OpenMetricsRecorder(plant.registry, 1.0)
    rec.on_sample(None, None, 0.0)
    plant.hist.observe(0.5)
    rec.on_sample(None, None, 1.0)
    rec.finish(1.0)
    lines = [ln for ln in render(rec, tmp_path).splitlines() if ln.startswith("t_ttft")]
    assert [ln.split()[0] for ln in lines] == [
        't_ttft_seconds_bucket{le="0.1"}', 't_ttft_seconds_bucket{le="1.0"}',
        't_ttft_seconds_bucket{le="+Inf"}', "t_ttft_seconds_count", "t_ttft_seconds_sum"] * 2
    assert [ln.split()[1] for ln in lines[5:]] == ["0.0", "1.0", "1.0", "1.0", "0.5"]


def _run(skip: bool, tmp_path, name: str) -> str:
    """Busy 0..20 s, idle 21..3000 s (ticked or skipped), a change at 3001 s."""
    plant = Plant()
    rec = OpenMetricsRecorder(plant.registry, 5.0)
    for t in range(0, 21):
        plant.counter.inc()
        rec.on_sample(None, None, float(t))
    if skip:
        rec.on_skip(None, 21.0, 3000.0, 2980)
    else:
        for t in range(21, 3001):
            rec.on_sample(None, None, float(t))
    plant.gauge.labels("decode").set(4)
    for t in range(3001, 3011):
        rec.on_sample(None, None, float(t))
    rec.finish(3010.0)
    return render(rec, tmp_path, name)


def test_a_skipped_idle_span_gives_the_points_of_ticking_through_it(tmp_path):
    ticked, skipped = _run(False, tmp_path, "a.om"), _run(True, tmp_path, "b.om")
    assert skipped == ticked
    gauge = points(skipped, "t_queue_requests")
    assert gauge[-3:] == [(3000.0, "0.0"), (3005.0, "4.0"), (3010.0, "4.0")]
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(gauge)]
    assert max(gaps) <= HEARTBEAT_S + 5.0


def test_a_counter_the_skip_advances_takes_its_value_at_the_span_start(tmp_path):
    """Decisions are counted once a period, idle or not: the skip counts a span's at once,
    and the recorder keeps that value from the span's first scrape; the run then goes on
    with the ticking run's values."""
    texts = []
    for skip in (False, True):
        plant = Plant()
        rec = OpenMetricsRecorder(plant.registry, 5.0)
        for t in range(0, 21):
            plant.counter.inc()
            rec.on_sample(None, None, float(t))
        if skip:
            plant.counter.inc(2980)  # the metrics listener's on_skip runs first
            rec.on_skip(None, 21.0, 3000.0, 2980)
        else:
            for t in range(21, 3001):
                plant.counter.inc()
                rec.on_sample(None, None, float(t))
        for t in range(3001, 3011):
            plant.counter.inc()
            rec.on_sample(None, None, float(t))
        rec.finish(3010.0)
        texts.append(points(render(rec, tmp_path, f"{skip}.om"), "t_done_requests_total"))
    ticked, skipped = dict(texts[0]), texts[1]
    assert skipped[4:7] == [(20.0, "21.0"), (25.0, "3001.0"), (310.0, "3001.0")]
    assert all(ticked[t] == value for t, value in skipped if t <= 20 or t > 3000)
    assert skipped[-1] == (3010.0, "3011.0") and len(skipped) < len(ticked) / 4


def test_spilled_points_give_the_same_file_and_are_removed(tmp_path, monkeypatch):
    whole = _run(True, tmp_path, "whole.om")
    monkeypatch.setattr(om, "SPILL_VALUES", 1)
    plant = Plant()
    rec = OpenMetricsRecorder(plant.registry, 1.0, spill_dir=tmp_path / "spill")
    for t in range(0, 50):
        plant.counter.inc(t % 3)
        rec.on_sample(None, None, float(t))
    rec.finish(49.0)
    assert any((tmp_path / "spill").iterdir())
    text = render(rec, tmp_path, "spilled.om")
    monkeypatch.setattr(om, "SPILL_VALUES", 10**9)
    plant2 = Plant()
    mem = OpenMetricsRecorder(plant2.registry, 1.0)
    for t in range(0, 50):
        plant2.counter.inc(t % 3)
        mem.on_sample(None, None, float(t))
    mem.finish(49.0)
    assert text == render(mem, tmp_path, "memory.om")
    assert render(rec, tmp_path, "again.om") == text  # a second write reads the spill again
    rec.close()
    assert not any((tmp_path / "spill").iterdir())
    assert whole.endswith("# EOF\n")


def _pools_over_time(rec, plant) -> None:
    """A pool's gauge that appears after the first spill, ahead of series spilled before
    it (a new label set of the first family)."""
    for t in range(0, 40):
        plant.gauge.labels("decode").set(t % 4)
        plant.counter.inc(t % 3)
        if t >= 20:
            plant.gauge.labels("prefill").set(100 + t % 5)
        rec.on_sample(None, None, float(t))
    rec.finish(39.0)


def test_a_series_that_comes_after_a_spill_keeps_its_own_spill_file(tmp_path, monkeypatch):
    # Spill files were numbered by the series' position at the spill: a series coming
    # later took a number already given, and two series wrote into one file.
    monkeypatch.setattr(om, "SPILL_VALUES", 1)
    plant = Plant()
    rec = OpenMetricsRecorder(plant.registry, 1.0, spill_dir=tmp_path / "spill")
    _pools_over_time(rec, plant)
    spilled = render(rec, tmp_path, "spilled.om")
    monkeypatch.setattr(om, "SPILL_VALUES", 10**9)
    plant2 = Plant()
    mem = OpenMetricsRecorder(plant2.registry, 1.0)
    _pools_over_time(mem, plant2)
    assert spilled == render(mem, tmp_path, "memory.om")
    assert [v for _, v in points(spilled, 't_queue_requests{pool="prefill"}')][:2] == [
        "100.0", "101.0"]


def test_bad_cadences_are_refused():
    with pytest.raises(ValueError, match="interval"):
        OpenMetricsRecorder(CollectorRegistry(), 0.0)
    with pytest.raises(ValueError, match="heartbeats"):
        OpenMetricsRecorder(CollectorRegistry(), 5.0, heartbeat_s=-1.0)
    with pytest.raises(ValueError, match="heartbeats"):
        OpenMetricsRecorder(CollectorRegistry(), 5.0, rate_heartbeat_s=600.0)


class Busy:
    """The run as the recorder asks it: calls in flight from `start_s` to `end_s`."""

    def __init__(self, start_s: float, end_s: float) -> None:
        self.start_s, self.end_s, self.now_s = start_s, end_s, 0.0

    def in_flight(self) -> int:
        return int(self.start_s <= self.now_s < self.end_s)


def test_a_counter_beats_every_30_s_while_calls_are_in_flight(tmp_path):
    """So rate() over a one-minute window reads 0 while the service works; a gauge and
    an idle span keep the lookback's heartbeat."""
    plant = Plant()
    rec = OpenMetricsRecorder(plant.registry, 5.0)
    run = Busy(400.0, 520.0)
    for t in range(0, 1001):
        run.now_s = float(t)
        rec.on_sample(run, None, float(t))
    rec.finish(1000.0)
    text = render(rec, tmp_path)
    assert [t for t, _ in points(text, "t_done_requests_total")] == [
        0.0, 285.0, 400.0, 430.0, 460.0, 490.0, 775.0, 1000.0]
    assert [t for t, _ in points(text, "t_queue_requests")] == [
        0.0, 285.0, 570.0, 855.0, 1000.0]


def test_the_compressing_thread_writes_the_pieces_in_order_and_hands_back_its_error():
    """metrics.om.gz's pieces are compressed from a second thread (`_write_behind`): the
    same bytes in the same order; a failed write is raised in the caller, not lost."""
    import io

    from orchestrator.run.openmetrics_text import _write_behind

    pieces = [f"piece {k}\n".encode() * (k % 7 + 1) for k in range(200)]
    out = io.BytesIO()
    _write_behind(out, iter(pieces))
    assert out.getvalue() == b"".join(pieces)

    class Full(io.BytesIO):
        def write(self, data):
            if self.tell() > 100:
                raise OSError(28, "No space left on device")
            return super().write(data)

    with pytest.raises(OSError, match="No space left"):
        _write_behind(Full(), iter(pieces))
