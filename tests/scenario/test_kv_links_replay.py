"""Replays whose KV copies run on the cluster's links: the prefill -> decode hand-off, the
rack cache on the Mooncake trace, and the links' figures in the summary."""

import json

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from tests.conftest import TRACE_DATA, run_cli
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock

LLAMA = load_model("llama-3.1-70b")


def replay(**kv):
    control = ControlConfig(realloc_enabled=False)
    orch = Orchestrator(small_cluster(kv=kv).bind(LLAMA), short_agent_sessions(6, 6, seed=3),
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), 1)
    result = VirtualClock().run(orch.run())
    return summarize(result, control.ttft_target_s, control.tpot_target_s)


def test_the_handoff_goes_gpu_to_gpu_unless_the_cluster_says_through_host_memory():
    direct, host = replay(handoff="direct"), replay(handoff="host")
    assert direct["requests"]["completed"] == host["requests"]["completed"] > 0
    gpu_gpu = {k: v for k, v in direct["kv"]["path_bytes"].items() if k.startswith("hbm_hbm")}
    assert sum(gpu_gpu.values()) > 0
    assert not any(k.startswith("hbm_hbm") for k in host["kv"]["path_bytes"])
    # Through host memory every decode load crosses DRAM; direct, only prefixes do.
    assert direct["kv"]["path_bytes"]["dram_hbm"] < host["kv"]["path_bytes"]["dram_hbm"]
    for s in (direct, host):
        util = s["kv"]["link_utilisation"]
        assert util and all(0 <= u["mean"] <= 1 + 1e-9 and 0 <= u["p99"] <= 1 + 1e-9
                            for u in util.values())


def test_on_the_mooncake_trace_shared_prefixes_are_promoted_read_from_the_rack_and_counted(capsys):
    code, out, err = run_cli(["replay", str(TRACE_DATA / "mooncake" / "synthetic_trace.jsonl"),
                              "--max-sessions", "300", "--cluster", "b200x8", "--json",
                              "--no-progress"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    paths = summary["kv"]["path_bytes"]
    promoted = paths.get("dram_rack", 0) + paths.get("hbm_rack", 0)
    assert promoted > 0
    assert paths.get("rack_hbm", 0) > 0  # later fetches read from the rack cache
    # ...and those reads are hits the rack served (its share of the striped loads), of
    # prefixes other sessions computed (Mooncake's block ids are global).
    cache = summary["cache"]
    assert cache["hit_tokens"]["rack"] > 0
    assert cache["cross_session_hit_tokens"] > 0
    found = sum(cache["hit_tokens"].values())
    assert cache["hbm_hit_share"] == cache["hit_tokens"]["hbm"] / found
