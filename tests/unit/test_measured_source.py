"""The measured tables as a cost source: selection, fallback, bad input, and (slow, with
the extra) agreement with the tables' own composition and use by a replay."""

from __future__ import annotations

import asyncio
import copy
import json

import numpy as np
import pytest

from costmodel.errors import CostModelError
from costmodel.hardware import load_hardware
from costmodel.layout import Layout
from costmodel.measured.source import CostSourceKind, Uncovered, precheck
from costmodel.model import load_model
from costmodel.precision import Precision
from orchestrator.cli import main
from orchestrator.kit.scenario import KIT_CLUSTER
from workers import cost_sources
from workers.clock import VirtualClock
from workers.cluster import ClusterError
from workers.cluster_toml import cluster_from_dict
from workers.pricing import StepPricer
from workers.request import Request
from workers.runtime import ClusterRuntime

LLAMA = load_model("llama-3.1-70b")
DSV3 = load_model("deepseek-v3")
COST = ["cost", "--model", "deepseek-v3", "--hardware", "h200", "--phase", "decode",
        "--batch", "4", "--context", "8192", "--tp", "8", "--ep", "8", "--json"]


def _cost(capsys, *extra) -> tuple[int, dict, str]:
    code = main([*COST, *extra])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else {}), out.err


# Selection and bad input: no table is read -------------------------------------------------


def test_the_default_is_the_roofline_and_says_so(capsys):
    code, row, err = _cost(capsys)
    assert code == 0 and err == ""
    assert row["cost_source"] == "roofline" and row["sources"] == {"step": "roofline"}


def test_hardware_without_tables_falls_back_with_one_line(capsys, monkeypatch):
    monkeypatch.setattr(cost_sources, "_SAID", set())
    monkeypatch.setattr("costmodel.measured.available", lambda: True)  # no table is read
    code, row, err = _cost(capsys, "--hardware", "mi355x", "--cost-source", "auto")
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "mi355x" in lines[0] and "roofline prices" in lines[0]
    assert row["sources"] == {"step": "roofline"} and "all terms" in row["fell_back"]
    _, roofline, _ = _cost(capsys, "--hardware", "mi355x")
    assert row["step_time_s"] == roofline["step_time_s"]


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--engine", "tensorrt", "unknown engine 'tensorrt' (known: "),
    ("--cost-source", "tables", "argument --cost-source: invalid choice: 'tables'"),
])
def test_an_unknown_engine_or_source_is_one_line_and_exit_2(capsys, flag, value, message):
    with pytest.raises(SystemExit) as stop:
        main([*COST, flag, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and message in err[-1]


def test_measured_without_the_extra_is_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.setattr("costmodel.measured.available", lambda: False)
    code = main([*COST, "--cost-source", "measured"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "tokenfactory[measured]" in err[0]


def test_a_cluster_file_names_its_cost_source():
    data = copy.deepcopy(KIT_CLUSTER)
    data["cost_source"] = "auto"
    assert cluster_from_dict(data, "c.toml").cost_source == "auto"
    data["cost_source"] = "tables"
    with pytest.raises(ClusterError, match="c.toml: cost_source: unknown cost source 'tables'"):
        cluster_from_dict(data, "c.toml")


def test_what_rules_a_layout_out_before_reading_tables():
    h200 = load_hardware("h200")
    assert precheck(LLAMA, h200, Layout(tp=4), "trtllm") is None
    assert "pipeline" in precheck(LLAMA, h200, Layout(pp=2, tp=4), "trtllm").reasons
    mi = precheck(LLAMA, load_hardware("mi355x"), Layout(tp=4), "trtllm")
    assert isinstance(mi, Uncovered) and "mi355x" in mi.line()
    gpt = precheck(load_model("gpt-oss-120b"), h200, Layout(tp=4), "trtllm")
    assert "no measured composition" in gpt.reasons["all terms"]
    with pytest.raises(CostModelError, match="unknown cost source 'x'"):
        CostSourceKind.parse("x")


def _mixed_cluster(hardware: str, source: str, engine: str = "trtllm"):
    data = copy.deepcopy(KIT_CLUSTER)
    for node in data["nodes"]:
        node["hardware"] = hardware
    data["engine"], data["cost_source"] = engine, source
    data["pools"] = [{"name": "mixed", "phase": "mixed", "nodes": ["n0", "n1"], "gpus": 16,
                      "tp": 4, "precision": "bf16", "target_batch": 8,
                      "max_batch_sequences": 8, "max_batch_tokens": 2048}]
    return cluster_from_dict(data, "mixed.toml")


def _one_call(cluster) -> tuple[Request, ClusterRuntime]:
    req = Request(1, "s1", input_tokens=5_000, output_tokens=3, block_ids=tuple(range(78)))

    async def run():
        rt = ClusterRuntime(cluster.bind(LLAMA), block_tokens=64)
        rt.start()
        loop = asyncio.get_running_loop()
        req.arrival_s = loop.time()
        rt.submit_fill("mixed-0", req, loop.time())
        while not rt.done:
            await asyncio.sleep(0.05)
        await rt.stop()
        return rt

    return req, VirtualClock().run(run())


def test_a_replay_on_uncovered_hardware_is_the_roofline_s(capsys, monkeypatch):
    monkeypatch.setattr(cost_sources, "_SAID", set())
    monkeypatch.setattr("costmodel.measured.available", lambda: True)  # no table is read
    req, rt = _one_call(_mixed_cluster("h800", "measured"))
    assert type(rt.pricers["mixed"]) is StepPricer
    assert rt.service["cost_source"]["pools"]["mixed"]["source"] == "roofline"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "h800" in err[0]
    base, _ = _one_call(_mixed_cluster("h800", "roofline"))
    assert (req.fill_end_s, req.done_s) == (base.fill_end_s, base.done_s)


# With the extra: the tables read and composed ------------------------------------------------

measured = pytest.mark.skipif(not __import__("costmodel.measured").measured.available(),
                              reason="needs the measured extra (installed in CI)")


@pytest.mark.slow
@measured
def test_a_replay_prices_its_steps_from_the_tables_when_they_cover_it():
    from workers.measured_pricing import MeasuredPricer

    req, rt = _one_call(_mixed_cluster("h200", "measured"))
    pricer = rt.pricers["mixed"]
    assert isinstance(pricer, MeasuredPricer)
    record = rt.service["cost_source"]["pools"]["mixed"]
    assert record["source"] == "measured" and record["tables"].startswith("h200_sxm/trtllm/")
    # The call fills in three chunks of at most 2,048 tokens, then decodes twice alone.
    chunks = [pricer.mixed_step_s([2048], [0], [])[0], pricer.mixed_step_s([2048], [2048], [])[0],
              pricer.mixed_step_s([904], [4096], [])[0]]
    assert req.fill_end_s == pytest.approx(sum(chunks), abs=1e-8)
    assert req.done_s == pytest.approx(sum(chunks) + pricer.decode_steps_s(1, 5_001, 2).sum(),
                                       abs=1e-7)
    # ... and these are not the roofline's prices.
    roofline, _ = _one_call(_mixed_cluster("h200", "roofline"))
    assert abs(req.fill_end_s / roofline.fill_end_s - 1) > 0.02


@pytest.mark.slow
@measured
def test_the_curves_reproduce_the_direct_composition():
    """Off-knot batches and lengths: the grids' interpolation within 1% of composing the
    step from the tables directly."""
    from costmodel.configs import Phase
    from costmodel.engines import serving_efficiency
    from costmodel.measured.catalog import Engine
    from costmodel.measured.compose import Dtypes
    from costmodel.measured.compose import Layout as TableLayout
    from costmodel.measured.compose import Phase as TablePhase
    from costmodel.measured.compose_mla import mla_moe_step
    from costmodel.measured.tables import MLA_MOE_FAMILIES

    eff = serving_efficiency(DSV3, "trtllm")
    layout = Layout(tp=1, ep=8, kv=Precision.FP8, mtp=0)
    pricer = cost_sources.Pricers(DSV3, eff, "trtllm", "measured").pricer(
        "p", load_hardware("h200"), layout)
    tables = cost_sources._load("h200_sxm", Engine.TRTLLM, pricer.prices.version,
                                MLA_MOE_FAMILIES)
    dt = Dtypes(gemm="fp8_block", moe="fp8_block", kv="fp8", fmha="bfloat16")
    tl = TableLayout(tp=1, ep=8, dp_attention=8)
    batch, isl = np.array([1, 3, 7, 20, 50]), np.array([700, 1500, 3000, 5000, 9000])
    pre = mla_moe_step(tables, DSV3, tl, dt, TablePhase.PREFILL, batch, isl).total_s()
    dec = mla_moe_step(tables, DSV3, tl, dt, TablePhase.DECODE, batch * 5, isl).total_s()
    for i in range(len(batch)):
        fill = pricer.fill_s(Phase.PREFILL, int(batch[i]) * 8, int(isl[i]), 0)[0]
        step = pricer.decode_step_times_s(int(batch[i]) * 40, [float(isl[i])])[0]
        assert fill - eff.step_overhead_s == pytest.approx(pre[i], rel=0.01)
        assert step - eff.step_overhead_s == pytest.approx(dec[i], rel=0.01)


def _package(model_path, system, tp, dp, ep, dtypes, batch, isl):
    from aiconfigurator_core.sdk.engine import EngineHandle

    h = EngineHandle.compile(
        model_path, system, "trtllm", tp_size=tp, attention_dp_size=dp,
        moe_tp_size=tp * dp // ep, moe_ep_size=ep, gemm_quant_mode=dtypes[0],
        moe_quant_mode=dtypes[1], kvcache_quant_mode=dtypes[2], fmha_quant_mode=dtypes[3])
    ctx, gen = h.run_static_per_op(batch_size=batch, isl=isl, osl=2)
    return sum(op[1] for op in ctx) * 1e-3, sum(op[1] for op in gen) * 1e-3


@pytest.mark.slow
@measured
@pytest.mark.parametrize(("model", "path", "hw", "system", "tp", "ep", "batch", "isl"), [
    ("llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", "h100", "h100_sxm", 4, 1, 2, 4096),
    ("deepseek-v3", "deepseek-ai/DeepSeek-V3", "h200", "h200_sxm", 8, 8, 2, 4096),
    ("deepseek-v3", "deepseek-ai/DeepSeek-V3", "b200", "b200_sxm", 1, 8, 1, 8192),
    # GB200/GB300: groups of 8 on the rack read the 4-GPU (tray) curves, scaled.
    ("deepseek-v3", "deepseek-ai/DeepSeek-V3", "gb200", "gb200", 8, 8, 2, 4096),
    ("deepseek-v3", "deepseek-ai/DeepSeek-V3", "gb300", "gb300", 1, 8, 1, 8192),
])
def test_cost_agrees_with_the_tables_own_composition(capsys, model, path, hw, system, tp, ep,
                                                     batch, isl):
    """`cost --cost-source measured` against aiconfigurator-core's own estimate
    (`run_static_per_op`, offline) on layouts the tables cover, within 5%; the engine's
    host gap (engines.toml), which the package's static estimate has none of, taken out."""
    dp = max(tp, ep) // tp
    dtypes = (("fp8", "fp8", "fp8", "fp8") if model.startswith("llama")
              else ("fp8_block", "fp8_block", "fp8", "bfloat16"))
    ref_prefill, ref_decode = _package(path, system, tp, dp, ep, dtypes, batch, isl)
    base = ["cost", "--model", model, "--hardware", hw, "--tp", str(tp), "--ep", str(ep),
            "--precision", "fp8", "--kv-precision", "fp8", "--batch", str(batch),
            "--engine", "trtllm", "--cost-source", "measured", "--json"]
    assert main([*base, "--phase", "prefill", "--new-tokens", str(isl)]) == 0
    prefill = json.loads(capsys.readouterr().out)
    assert main([*base, "--phase", "decode", "--context", str(isl), "--mtp", "0"]) == 0
    decode = json.loads(capsys.readouterr().out)
    for row, ref in ((prefill, ref_prefill), (decode, ref_decode)):
        assert row["cost_source"] == "measured" and row["tables"].startswith(f"{system}/trtllm/")
        assert row["engine_version"] and "fell_back" not in row
        assert row["step_time_s"] - row["step_overhead_s"] == pytest.approx(ref, rel=0.05)
        assert row["step_time_s"] != row["roofline_step_time_s"]
    assert prefill["sources"]["attention_prefill"].startswith(f"measured:{system}/trtllm/")
    assert decode["sources"]["logits_gemm"].endswith(":gemm")


def test_an_attention_ffn_split_falls_back_with_one_line(capsys, monkeypatch):
    monkeypatch.setattr(cost_sources, "_SAID", set())
    monkeypatch.setattr("costmodel.measured.available", lambda: True)  # no table is read
    code, row, err = _cost(capsys, "--tp", "1", "--af-experts-hardware", "h200",
                           "--af-experts-ep", "8", "--cost-source", "auto")
    assert code == 0 and len(err.strip().splitlines()) == 1
    assert row["fell_back"] == {"all terms": "attention-FFN split layouts"}


def test_auto_without_the_extra_is_the_roofline_said_in_one_line(capsys, monkeypatch):
    monkeypatch.setattr(cost_sources, "_SAID", set())
    monkeypatch.setattr("costmodel.measured.available", lambda: False)
    code, row, err = _cost(capsys, "--cost-source", "auto")
    assert code == 0 and row["cost_source"] == "roofline"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "not installed" in lines[0]


@pytest.mark.slow
@measured
def test_a_step_beyond_any_gpus_memory_is_the_roofline_s_said_in_one_line(capsys):
    """4,000 sequences of 100k tokens on one H100 rank: no table goes there."""
    code = main(["cost", "--model", "llama-3.1-70b", "--hardware", "h100", "--phase", "decode",
                 "--batch", "4000", "--context", "100000", "--tp", "8", "--engine", "trtllm",
                 "--cost-source", "measured", "--json"])
    out = capsys.readouterr()
    row = json.loads(out.out)
    assert code == 0 and row["sources"] == {"step": "roofline"} and "all terms" in row["fell_back"]
    assert sum("beyond the measured grid" in line for line in out.err.splitlines()) == 1


@pytest.mark.slow
@measured
@pytest.mark.parametrize(("hw", "covered"), [("h200", False), ("gb200", True)])
def test_a_dp_attention_exchange_past_one_nvlink_domain_falls_back(capsys, monkeypatch, hw,
                                                                   covered):
    """DP16 EP16: two H200 nodes would need a wide-EP all-to-all (not read), so the
    exchange falls back; sixteen GB200s share the rack's NVLink and read the tables."""
    monkeypatch.setattr(cost_sources, "_SAID", set())
    assert main(["cost", "--model", "deepseek-v3", "--hardware", hw, "--tp", "1", "--ep", "16",
                 "--precision", "fp8", "--kv-precision", "fp8", "--batch", "4", "--phase",
                 "decode", "--context", "2048", "--mtp", "0", "--engine", "trtllm",
                 "--cost-source", "measured", "--json"]) == 0
    out = capsys.readouterr()
    row = json.loads(out.out)
    if covered:
        assert "fell_back" not in row and row["sources"]["moe_dispatch"].endswith(":nccl")
    else:
        assert row["sources"] == {"step": "roofline"}
        assert "across nodes" in row["fell_back"]["moe_dispatch"]
        assert sum("measured tables do not cover" in line for line in out.err.splitlines()) == 1
