"""The one error type of `traces`: a problem in a trace file, located and explained."""

from __future__ import annotations

from pathlib import Path


class TraceError(Exception):
    """A trace that cannot be read as it is: `file:where: field: what is wrong`.

    `where` is a line number for line-oriented files (JSONL, CSV) and a record
    path such as `requests[12]` for one-document JSON files, whose records
    have no line of their own.
    """

    def __init__(self, path: Path | str, where: int | str | None, field: str, problem: str):
        self.path = str(path)
        self.where = where
        self.field = field
        self.problem = problem
        super().__init__(self.describe())

    def describe(self) -> str:
        place = self.path if self.where is None else f"{self.path}:{self.where}"
        return f"{place}: {self.field}: {self.problem}"


class ProblemSink:
    """Collects problems instead of raising them (what `trace validate` uses).

    Keeps the first `keep` problems and counts the rest, so memory stays
    bounded on a trace that is wrong everywhere.
    """

    def __init__(self, keep: int = 20):
        self.keep = keep
        self.problems: list[TraceError] = []
        self.count = 0

    def add(self, error: TraceError) -> None:
        self.count += 1
        if len(self.problems) < self.keep:
            self.problems.append(error)


def report(sink: ProblemSink | None, error: TraceError) -> None:
    """Raise `error`, or hand it to `sink` so the reader can carry on."""
    if sink is None:
        raise error
    sink.add(error)
