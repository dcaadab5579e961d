"""The two KV placement policies replayed on a small cluster: retain serves prefixes from
HBM and moves fewer bytes; offload leaves nothing in HBM between calls."""

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from storage.tiers import Tier
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock
from workers.kv_policy import KVPolicy

LLAMA = load_model("llama-3.1-70b")


def replay(policy: KVPolicy, sessions):
    control = ControlConfig(realloc_enabled=False)
    orch = Orchestrator(small_cluster().bind(LLAMA), sessions,
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), 1,
                        kv_policy=policy)
    result = VirtualClock().run(orch.run())
    summary = summarize(result, control.ttft_target_s, control.tpot_target_s)
    summary["sim"].pop("wall_s")
    return orch, summary


def test_retain_serves_hbm_hits_and_moves_fewer_bytes_than_offload():
    sessions = short_agent_sessions(6, 8, seed=3)
    off_orch, off = replay(KVPolicy.OFFLOAD, sessions)
    ret_orch, ret = replay(KVPolicy.RETAIN, sessions)
    assert off["kv"]["policy"] == "offload" and ret["kv"]["policy"] == "retain"
    for s in (off, ret):
        assert s["requests"]["completed"] == sum(len(x.calls) for x in sessions)
        assert sum(s["kv"]["bytes_moved"][k] for k in s["kv"]["bytes_moved"]
                   if k != "total") == s["kv"]["bytes_moved"]["total"]
    # Offload: between calls nothing stays in HBM; a prefix comes from host memory (or
    # from an HBM copy a call in flight still holds).
    assert off["cache"]["hit_tokens"]["dram"] > 0
    assert all(n == 0 for loc, n in off_orch.runtime.store.placement.used_bytes.items()
               if loc.tier is Tier.HBM)
    # Retain: most prefix tokens are found in HBM, and far fewer bytes move.
    assert ret["cache"]["hbm_hit_share"] > max(0.5, off["cache"]["hbm_hit_share"])
    assert ret["kv"]["bytes_moved"]["total"] < off["kv"]["bytes_moved"]["total"] / 2
    assert ret["kv"]["copies_per_input_token"] < 1 < off["kv"]["copies_per_input_token"]
    assert any(n > 0 for loc, n in ret_orch.runtime.store.placement.used_bytes.items()
               if loc.tier is Tier.HBM)


def test_retain_is_deterministic():
    sessions = short_agent_sessions(4, 6, seed=5)
    assert replay(KVPolicy.RETAIN, sessions)[1] == replay(KVPolicy.RETAIN, sessions)[1]
