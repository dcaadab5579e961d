"""decisions.jsonl's writer gives the lines structlog's JSON renderer and print logger
gave (what the file held before it), key order and number formatting included."""

from __future__ import annotations

import io

import structlog

from orchestrator.run.output import DecisionFile

EVENTS = [
    ("admission", dict(t_s=round(2.0000004, 6), controller="buffered", admit=174,
                       reason="backlog_low", decode_target_batch=None, queue=0, periods=1)),
    ("admission", dict(t_s=19.25, controller="retire", admit=0, reason="slo_guard",
                       decode_target_batch=48, queue=3, periods=12)),
    ("reallocation", dict(t_s=1e-7, reason="decode_starved", src="fill", dst="decode",
                          workers=2, note="µ \"quoted\"")),
]


def test_the_same_lines_as_structlog():
    ours, theirs = io.StringIO(), io.StringIO()
    log = structlog.wrap_logger(structlog.PrintLogger(file=theirs),
                                processors=[structlog.processors.JSONRenderer(sort_keys=True)])
    writer = DecisionFile(ours)
    for event, fields in EVENTS:
        log.info(event, **fields)
        writer.info(event, **fields)
    assert ours.getvalue() == theirs.getvalue()
    assert len(ours.getvalue().splitlines()) == len(EVENTS)
