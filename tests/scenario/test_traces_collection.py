"""`trace stats` on real agent sessions against an independent computation.

The independent side parses the raw JSON with the standard library and
derives every figure straight from the format's definitions, without any
of the readers' shortcuts (no slice comparison, no namespacing).
"""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from orchestrator.cli import main
from tests.conftest import TRACE_DATA
from traces import sample_path

WEKA = TRACE_DATA / "weka-cc-dev"


def visit(requests, agent, state, values, counts):
    """Walk one agent's requests in order; sub-agents in place, as the format nests them."""
    prev_end = None
    for req in requests:
        if req["type"] == "subagent":
            visit(req["requests"], req["agent_id"], state, values, counts)
            continue
        ids = req["hash_ids"]
        cached_blocks = 0
        for x in ids:
            if x not in state["computed"]:
                break
            cached_blocks += 1
        state["computed"].update(ids)
        cached = cached_blocks * state["block"]
        counts["calls"] += 1
        counts["subagent_calls"] += agent != "main"
        last = state["last_input"]
        if agent in last and req["in"] < 0.7 * last[agent]:
            counts["resets"] += 1
        last[agent] = req["in"]
        values["input_tokens"].append(req["in"])
        values["cached_tokens"].append(cached)
        values["new_tokens"].append(req["in"] - cached)
        values["output_tokens"].append(req["out"])
        if state["first"]:
            state["first"] = False
        else:
            think = req.get("think_time")
            if think is None:
                think = max(0.0, req["t"] - prev_end) if prev_end is not None else 0.0
            values["think_s"].append(think)
        prev_end = req["t"] + (req.get("api_time") or 0.0)


def independent_figures(directory: Path) -> dict:
    names = ("input_tokens", "cached_tokens", "new_tokens", "output_tokens", "think_s")
    values = {k: [] for k in names}
    counts = {"sessions": 0, "calls": 0, "subagent_calls": 0, "resets": 0}
    for path in sorted(directory.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        counts["sessions"] += 1
        state = {"computed": set(), "last_input": {}, "first": True, "block": doc["block_size"]}
        visit(doc["requests"], "main", state, values, counts)
    figures = dict(counts)
    for name, v in values.items():
        p50, p90, p99 = np.percentile(np.asarray(v, dtype=float), [50, 90, 99])
        figures[name] = {"p50": p50, "p90": p90, "p99": p99}
    return figures


def assert_stats_agree(capsys, directory: Path) -> dict:
    assert main(["trace", "stats", "--json", str(directory)]) == 0
    got = json.loads(capsys.readouterr().out)
    expected = independent_figures(directory)
    for key in ("sessions", "calls", "subagent_calls", "resets"):
        assert got[key] == expected[key], key
    for name in ("input_tokens", "cached_tokens", "new_tokens", "output_tokens", "think_s"):
        for p in ("p50", "p90", "p99"):
            assert got[name][p] == pytest.approx(expected[name][p], rel=1e-9, abs=1e-6), (name, p)
    return got


def test_stats_on_the_bundled_sample_agree_with_an_independent_computation(capsys):
    got = assert_stats_agree(capsys, sample_path())
    assert got["subagent_calls"] > 0 and got["resets"] > 0


@pytest.mark.slow
def test_stats_on_the_whole_collection_agree_with_an_independent_computation(capsys):
    got = assert_stats_agree(capsys, WEKA)
    # The collection as its README and MANIFEST describe it.
    manifest = json.loads((WEKA / "MANIFEST.json").read_text())
    assert got["sessions"] == 113 == len(manifest)
    assert got["resets"] == sum(m["context_resets"] for m in manifest) == 40
    assert got["calls"] - got["subagent_calls"] == sum(m["top_requests"] for m in manifest)
