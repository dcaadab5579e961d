"""Which fill pool a call's work belongs to: one rule for the router and the planner.

A long cached prefix with no more new tokens than it is midfill work; a call that shares
a cached prefix (the tool definitions every session caches) but brings more new tokens
than that is prefill work, as a session's first call is."""

import dataclasses
import itertools

import numpy as np
import pytest

from costmodel.fill_phase import MIDFILL_MIN_PREFIX_TOKENS, is_midfill
from costmodel.model import load_model
from costmodel.plan_values import WorkloadStats
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.control.router import FillCandidate, PrefixAffinityRouter, choose_fill_worker
from orchestrator.run.plugin_checks import takes_new_tokens
from orchestrator.run.replay import Orchestrator
from tests.conftest import TRACE_DATA
from tests.factories import short_agent_sessions, small_cluster
from traces import read_sessions
from traces.replay import LoadOptions
from workers.clock import VirtualClock
from workers.cluster_toml import load_cluster

# (cached prefix, new tokens, midfill?)
CASES = [
    (12_000, 155_000, False),  # a session's first call: shared tool definitions, cold rest
    (100_000, 2_000, True),  # a later call: its own context cached, a short suffix
    (100_000, 100_000, True),  # as many new as cached: still reading a long prefix
    (100_000, 100_001, False),
    (MIDFILL_MIN_PREFIX_TOKENS - 1, 10, False),  # too short a prefix to be midfill
    (MIDFILL_MIN_PREFIX_TOKENS, 10, True),
    (0, 50_000, False),
]


@pytest.mark.parametrize("cached, new, midfill", CASES)
def test_a_call_is_midfill_when_its_prefix_is_long_and_its_suffix_no_longer(cached, new,
                                                                             midfill):
    assert is_midfill(cached, new) is midfill


def test_arrays_give_the_integers_answers_element_by_element():
    cached = np.array([c for c, _, _ in CASES])
    new = np.array([n for _, n, _ in CASES])
    assert is_midfill(cached, new).tolist() == [m for _, _, m in CASES]


def _candidates() -> list[FillCandidate]:
    return [FillCandidate("prefill-0", "prefill", "n0", 0, True),
            FillCandidate("midfill-0", "midfill", "n0", 0, True)]


@pytest.mark.parametrize("cached, new, midfill", CASES)
def test_the_router_sends_a_call_to_the_pool_the_rule_names(cached, new, midfill):
    worker = choose_fill_worker(cached, _candidates(), frozenset(), new_tokens=new)
    assert worker == ("midfill-0" if midfill else "prefill-0")


def test_the_planner_splits_a_trace_as_the_router_routes_it():
    cached = np.array([c for c, _, _ in CASES], dtype=float)
    new = np.array([n for _, n, _ in CASES], dtype=float)
    stats = WorkloadStats(sessions=1, input_tokens=cached + new, cached_tokens=cached,
                          output_tokens=np.full(len(CASES), 100.0), session_time_s=60.0,
                          midfill_min_prefix_tokens=MIDFILL_MIN_PREFIX_TOKENS)
    shapes = stats.shapes("three-pool")
    routed = [choose_fill_worker(int(c), _candidates(), frozenset(), new_tokens=int(n))
              for c, n in zip(cached, new, strict=True)]
    for pool in ("prefill", "midfill"):
        want = sorted(n for n, w in zip(new, routed, strict=True) if w.startswith(pool))
        assert sorted(shapes[pool].new_tokens.tolist()) == want


class ThreeArguments:
    def choose(self, prefix_tokens, candidates, prefix_nodes):
        return None


class NamesNewTokens:
    def choose(self, prefix_tokens, candidates, prefix_nodes, new_tokens=0):
        return None


class AnyKeyword:
    def choose(self, prefix_tokens, candidates, prefix_nodes, **extra):
        return None


def test_only_a_router_that_takes_new_tokens_is_told_them():
    assert not takes_new_tokens(ThreeArguments())
    assert takes_new_tokens(NamesNewTokens())
    assert takes_new_tokens(AnyKeyword())


class _Recording(PrefixAffinityRouter):
    """The built-in router, noting what each call's routing was told."""

    def __init__(self) -> None:
        self.told: list[tuple[int, int]] = []  # (prefix tokens, new tokens)
        self.chosen: list[str | None] = []  # the worker each call went to

    def choose(self, prefix_tokens, candidates, prefix_nodes, new_tokens=0):
        self.told.append((prefix_tokens, new_tokens))
        worker = super().choose(prefix_tokens, candidates, prefix_nodes, new_tokens)
        self.chosen.append(worker)
        return worker


class _ThreeArgumentsRouting(PrefixAffinityRouter):
    """A router written before `new_tokens` existed."""

    def __init__(self) -> None:
        self.calls = 0

    def choose(self, prefix_tokens, candidates, prefix_nodes):
        self.calls += 1
        return choose_fill_worker(prefix_tokens, candidates, prefix_nodes)


def _replay(router):
    control = ControlConfig(realloc_enabled=False)
    orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")),
                        short_agent_sessions(3, 5, seed=7), make_policy("local", control, 4),
                        control, LoadOptions(sessions_per_hour=3600, think_scale=0.05), 2,
                        router=router)
    return VirtualClock().run(orch.run())


def test_a_replay_tells_a_router_that_asks_each_calls_new_tokens():
    router = _Recording()
    calls = _replay(router).requests
    # Each call is routed once, told its tokens less the prefix cached when it was routed.
    assert len(router.told) == len(calls) > 0
    assert sorted(p + n for p, n in router.told) == sorted(calls.column("input_tokens"))
    assert any(p > 0 for p, _ in router.told)  # later calls of a session find a prefix


def test_a_router_of_three_arguments_still_routes_every_call():
    router = _ThreeArgumentsRouting()
    calls = _replay(router).requests
    assert router.calls == len(calls) > 0


def test_the_spill_router_example_sends_prefill_work_to_the_shortest_fill_queue():
    from examples.spill_router import SpillRouter

    busy_prefill = [FillCandidate("prefill-0", "prefill", "n0", 500_000, True),
                    FillCandidate("midfill-0", "midfill", "n0", 20_000, True)]
    router = SpillRouter()
    assert takes_new_tokens(router)
    # Prefill work (more new tokens than cached) goes where fewer tokens are queued...
    assert router.choose(12_000, busy_prefill, frozenset(), new_tokens=150_000) == "midfill-0"
    idle_prefill = [FillCandidate("prefill-0", "prefill", "n0", 0, True),
                    FillCandidate("midfill-0", "midfill", "n0", 0, True)]
    assert router.choose(12_000, idle_prefill, frozenset(), new_tokens=150_000) == "prefill-0"
    # ...and midfill work stays on midfill, even with the prefill worker idle.
    assert router.choose(100_000, idle_prefill, frozenset(), new_tokens=2_000) == "midfill-0"


def test_on_the_preset_a_call_sharing_a_cached_prefix_but_bringing_more_is_prefilled():
    """The bug 7dcbb5f fixed, on real sessions: the development traces' sessions share
    their tool definitions, cached after the first session, and a later session's first
    call brings far more new tokens than that: it is prefill work, not midfill."""
    sessions = [dataclasses.replace(s, calls=s.calls[:3]) for s in
                itertools.islice(read_sessions([TRACE_DATA / "weka-cc-dev"], "auto"), 4)]
    control = ControlConfig(realloc_enabled=False)
    router = _Recording()
    orch = Orchestrator(load_cluster("gb200-nvl72x1").bind(load_model("kimi-k3-like")),
                        sessions, make_policy("local", control, 12), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.02), 1,
                        router=router)
    calls = VirtualClock().run(orch.run()).requests
    routed = [(p, n, w) for (p, n), w in zip(router.told, router.chosen, strict=True)]
    assert len(routed) == len(calls) == 12
    for prefix, new, worker in routed:
        assert worker.startswith("midfill" if is_midfill(prefix, new) else "prefill")
    shared_but_cold = [w for p, n, w in routed if MIDFILL_MIN_PREFIX_TOKENS <= p < n]
    assert shared_but_cold and all(w.startswith("prefill") for w in shared_but_cold)
    assert any(w.startswith("midfill") for _, _, w in routed)
