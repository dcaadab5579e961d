"""The series streamed to disk as the run goes holds the run's records, in CSV or Parquet,
however the writes were cut."""

import csv
import math
from types import SimpleNamespace

import pytest

from orchestrator.run.output import SERIES_COLUMNS, SeriesWriter
from orchestrator.run.series import Series


def _series(records):
    s = Series()
    for i in range(records):
        s.time_s.append(float(i))
        for name in SERIES_COLUMNS:
            if name not in ("time_s", "reason", "ticks", "admit"):
                getattr(s, name).append(i % 7)
        s.latency_breakdown_s.setdefault("fill_p50_s", Series().time_s).append(0.5 * i)
        s.ticks.append(1 if i % 5 else 30)
        if i < records - 1:  # the final sample has no decision
            s.reason.append("hold")
            s.admit.append(i % 3)
    return s


def test_a_streamed_csv_holds_every_record_and_leaves_the_last_decision_empty(tmp_path):
    series = _series(10)
    writer = SeriesWriter(tmp_path / "series.csv")
    writer.FLUSH_RECORDS = 3
    orch = SimpleNamespace(series=Series())
    for i in range(10):  # records arrive one by one; writes happen every 3
        orch.series = _series(i + 1)
        writer.on_sample(orch, None, float(i))
    assert 0 < writer.written < 10
    writer.close(series)
    with (tmp_path / "series.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10
    assert [int(r["ticks"]) for r in rows] == list(series.ticks)
    assert [float(r["fill_p50_s"]) for r in rows] == [0.5 * i for i in range(10)]
    assert rows[-1]["reason"] == "" and rows[-2]["reason"] == "hold"


def test_parquet_holds_the_same_records(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow not installed")
    series = _series(9)
    writer = SeriesWriter(tmp_path / "series.parquet", "parquet")
    writer.FLUSH_RECORDS = 4
    writer.write(_series(5), 4)
    writer.close(series)
    table = pq.read_table(tmp_path / "series.parquet").to_pydict()
    assert table["time_s"] == list(series.time_s)
    assert table["ticks"] == list(series.ticks)
    assert table["reason"][-1] is None and table["admit"][:-1] == list(series.admit)
    assert not any(math.isnan(v) for v in table["fill_p50_s"])


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="series format"):
        SeriesWriter("x", "xlsx")


def test_parquet_without_pyarrow_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import sys

    from orchestrator.cli import main

    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails
    try:
        code = main(["replay", "--max-sessions", "1", "--no-progress", "--series-format",
                     "parquet", "--out", str(tmp_path / "out")])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--series-format parquet" in err[0]
    assert "pyarrow" in err[0] and not (tmp_path / "out").exists()
