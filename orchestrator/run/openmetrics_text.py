"""metrics.om's text from the points `OpenMetricsRecorder` kept (its base class).

`OpenMetricsText` reads each series' records back (spilled, then in memory), lays
the heartbeats in between (`_points`), and writes the file's text: a family's head,
then each series' points, a histogram's lines but their timestamps formatted once
per change of values; gzip-compressed when the name ends in `.gz` (by a second thread,
beside the formatting: `_write_behind`). `open_text` and
`time_range` read such a file back.
"""

from __future__ import annotations

import bisect
import gzip
import math
import queue
import threading
from array import array
from itertools import chain, islice
from operator import itemgetter
from pathlib import Path

from prometheus_client.utils import floatToGoString

# gzip's fastest level: ~20x smaller (the text repeats its names and labels on every line)
# for a small share of the time taken to write the text.
GZIP_LEVEL = 1
# Encoded pieces of text waiting for the compressing thread (each ~3 MB at most: a
# histogram's 250 points of ~110 lines; a gauge's 4,096 lines): memory stays flat.
_PIECES_QUEUED = 2
# Value and timestamp texts `lines` keeps for reuse (a few MB) before it starts again.
_TEXTS_KEPT = 100_000
_EPS_S = 1e-9  # sample instants are sums of float periods


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


class OpenMetricsText:
    """The writing half of `OpenMetricsRecorder`: it uses the recorder's `instants`,
    `busy` and `_families` (each family's `series`, `_Series` records)."""

    @staticmethod
    def _records(s):
        """(time_s, values or None) of every point kept, in order: spilled, then memory's."""
        width = 2 + len(s.prefixes)

        def chunks():
            if s.path is not None and s.path.exists():
                with s.path.open("rb") as f:
                    while doubles := array("d", f.read(8 * width * 4096)):  # 4,096 records
                        yield doubles
            yield s.buffer

        for doubles in chunks():
            if width == 3:  # a gauge's or a counter's: (flag, time, value) records
                for flag, t_s, v in zip(doubles[0::3], doubles[1::3], doubles[2::3],
                                        strict=True):
                    yield (t_s, (v,) if flag else None)
                continue
            for k in range(0, len(doubles), width):
                yield (doubles[k + 1], tuple(doubles[k + 2:k + width]) if doubles[k] else None)

    def _points(self, s):
        """(time_s, values) of every point to write: those kept, and between them the
        heartbeats (a gauge's or a counter's): the last point again at the first reading
        `heartbeat_s` after it, or (a counter) the first reading with calls in flight
        `busy_heartbeat_s` after it, until the next point or the series' last reading."""
        instants, busy = self.instants, self.busy
        hb, busy_hb = s.heartbeat_s, s.busy_heartbeat_s

        def beat(after_s: float) -> float:
            i = bisect.bisect_left(instants, after_s + hb - _EPS_S)
            at = instants[i] if i < len(instants) else math.inf
            if busy_hb:
                j = bisect.bisect_left(busy, after_s + busy_hb - _EPS_S)
                if j < len(busy) and busy[j] < at:
                    at = busy[j]
            return at

        # No heartbeat can fall less than the shorter of the two after a point: most
        # points (a series changing reading after reading) look none up.
        soonest = (min(hb, busy_hb) if busy_hb else hb) - 2 * _EPS_S
        last = None
        for t_s, values in chain(self._records(s), [(s.seen_s, None)]):
            if last is not None and hb and t_s - last[0] >= soonest:
                at = beat(last[0])
                while at < t_s if values is not None else at <= t_s:
                    yield at, last[1]
                    at = beat(at)
            if values is None:
                last = None
            else:
                yield t_s, values
                last = (t_s, values)

    def lines(self, start_unix_s: float):
        """The file's text, in pieces: a family's head, or a series' points."""
        # Each value's text and each instant's timestamp text, formatted once: series
        # share their readings' instants and many values (counts); emptied when large.
        text: dict[float, str] = {}
        stamps: dict[float, str] = {}

        def shown(v: float) -> str:
            out = text[v] = floatToGoString(v)
            return out

        def stamp(t_s: float) -> str:
            out = stamps[t_s] = f" {start_unix_s + t_s:.3f}\n"
            return out

        for fam in self._families:
            fam.seen()
            kept = [s for s in fam.series.values() if s.kept_s > -math.inf]
            if not kept:
                continue
            yield f"# HELP {fam.name} {_escape_help(fam.help)}\n# TYPE {fam.name} {fam.kind}\n"
            for s in kept:
                if len(text) > _TEXTS_KEPT:  # memory stays flat
                    text.clear()
                if len(stamps) > _TEXTS_KEPT:
                    stamps.clear()
                if not fam.histogram:  # one line a point, 4,096 points a piece
                    prefix = s.prefixes[0]
                    points = self._points(s)
                    while piece := list(islice(points, 4096)):
                        yield "".join([f"{prefix}{text.get(v) or shown(v)}"
                                       f"{stamps.get(t_s) or stamp(t_s)}"
                                       for t_s, (v,) in piece])
                    continue
                keep = s.informing()
                prefixes = [s.prefixes[i] for i in keep]
                pick = itemgetter(*keep) if len(keep) > 1 else None  # a tuple of those values
                out: list[str] = []
                # A point's lines but their timestamps, kept while the next point has the
                # same values (the point before a change, a heartbeat): formatted once, and
                # only the lines whose value changed (a histogram's buckets above the
                # observations' since the last point).
                last_values = last_picked = None
                body: list[str] = []
                for t_s, values in self._points(s):
                    at = stamps.get(t_s) or stamp(t_s)
                    if values != last_values:
                        last_values = values
                        picked = values if pick is None else pick(values)
                        if last_picked is None:
                            body = [p + (text.get(v) or shown(v))
                                    for p, v in zip(prefixes, picked, strict=True)]
                        else:
                            body = [line if v == was else p + (text.get(v) or shown(v))
                                    for p, v, was, line
                                    in zip(prefixes, picked, last_picked, body, strict=True)]
                        last_picked = picked
                    out.append(at.join(body))
                    out.append(at)
                    if len(out) >= 500:  # pieces of a few MB: memory stays flat
                        yield "".join(out)
                        out.clear()
                yield "".join(out)
        yield "# EOF\n"

    def write(self, path: Path, start_unix_s: float) -> None:
        """The file at `path`: gzip-compressed when its name ends in `.gz` (what --out
        writes; the same bytes from the same points: no name or time in the header)."""
        path = Path(path)
        if path.suffix != ".gz":
            with path.open("w") as f:
                f.writelines(self.lines(start_unix_s))
            return
        with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                   compresslevel=GZIP_LEVEL, mtime=0) as f:
            _write_behind(f, (piece.encode() for piece in self.lines(start_unix_s)))


def _write_behind(f, pieces) -> None:
    """Write `pieces` (bytes) to `f` in order, from a second thread: zlib's compression
    and the file's writes release the interpreter's lock, so they run beside the text's
    formatting (this thread) on another core. The same bytes as writing them here."""
    waiting: queue.Queue = queue.Queue(_PIECES_QUEUED)
    failed: list[BaseException] = []

    def drain() -> None:
        while (piece := waiting.get()) is not None:
            if not failed:
                try:
                    f.write(piece)
                except BaseException as exc:  # raised again in the formatting thread
                    failed.append(exc)

    writer = threading.Thread(target=drain, name="metrics-om-gzip", daemon=True)
    writer.start()
    try:
        for piece in pieces:
            if failed:
                break
            waiting.put(piece)
    finally:
        waiting.put(None)
        writer.join()
    if failed:
        raise failed[0]


def open_text(path: Path):
    """A metrics.om file for reading as text, gzip-compressed (`.gz`) or not."""
    path = Path(path)
    return gzip.open(path, "rt") if path.suffix == ".gz" else path.open()


def time_range(path: Path) -> tuple[float, float] | None:
    """First and last timestamp of a metrics.om file, or None when it has no samples.
    Raises ValueError naming the file and line of a sample line without a timestamp."""
    lo = hi = None
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.startswith("#"):
                continue
            try:
                t = float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                raise ValueError(f"{path}:{lineno}: expected a sample ending in a timestamp, "
                                 f"got {line.strip()[:80]!r}") from None
            lo = t if lo is None or t < lo else lo
            hi = t if hi is None or t > hi else hi
    return None if lo is None else (lo, hi)
