"""Reading aiconfigurator-core's measured tables: coverage, exact points, gaps as values."""

import numpy as np
import pytest

# Reading the tables takes 1-3 s per system (see docs/measured-tables.md).
pytestmark = pytest.mark.slow
pytest.importorskip("aiconfigurator_core")
pq = pytest.importorskip("pyarrow.parquet")

from costmodel.measured import available, ops  # noqa: E402
from costmodel.measured.catalog import Engine, coverage, load_system, table_path  # noqa: E402
from costmodel.measured.tables import GQA_FAMILIES, MS, load_tables  # noqa: E402

SYSTEM, VERSION = "h100_sxm", "1.3.0rc20"


@pytest.fixture(scope="module")
def tables():
    return load_tables(SYSTEM, Engine.TRTLLM, VERSION, GQA_FAMILIES | {"moe"})


def _raw(family, file):
    path, _ = table_path(SYSTEM, family, "trtllm", VERSION, file)
    return pq.read_table(path).to_pandas()


def test_extra_is_reported_available():
    assert available()


def test_coverage_lists_the_hopper_and_blackwell_trtllm_gemm_tables():
    have = {(s, e) for s, fam, e, _, f in coverage() if f == "gemm_perf.parquet"}
    for system in ("h100_sxm", "h200_sxm", "b200_sxm", "gb200", "b300_sxm", "gb300"):
        assert (system, "trtllm") in have


def test_gemm_sites_hold_sorted_m_curves(tables):
    curves = tables.gemm["fp8"]
    assert len(curves.site_n) == len(curves.site_k) == len(curves.curve_x) > 100
    for x, y in zip(curves.curve_x, curves.curve_y, strict=True):
        assert x.shape == y.shape and np.all(np.diff(x) > 0) and np.all(y > 0)


def test_gemm_at_a_table_point_is_the_table_value():
    raw = _raw("gemm", "gemm_perf.parquet")
    row = raw[(raw.gemm_dtype == "fp8") & (raw.n == 8192) & (raw.k == 8192) & (raw.m == 4096)].iloc[0]
    t = load_tables(SYSTEM, Engine.TRTLLM, VERSION, frozenset({"gemm"}))
    assert ops.gemm(t, 4096, 8192, 8192, "fp8")[0] == pytest.approx(row.latency * MS, rel=1e-12)


def test_context_attention_at_a_table_point_is_the_table_value(tables):
    raw = _raw("attention", "context_attention_perf.parquet")
    sel = raw[(raw.attn_dtype == "fp8") & (raw.kv_cache_dtype == "fp8") & (raw.num_heads == 16)
              & (raw.num_key_value_heads == 2) & (raw.head_dim == 128) & (raw.window_size == 0)
              & (raw.batch_size == 2) & (raw.isl == 4096)]
    got = ops.context_attention(tables, 2, 4096, 16, 2, 128, "fp8", "fp8")
    assert got[0] == pytest.approx(sel.iloc[0].latency * MS, rel=1e-12)


def test_moe_and_allreduce_at_table_points_are_the_table_values(tables):
    raw = _raw("moe", "moe_perf.parquet")
    row = raw[(raw.moe_dtype == "fp8_block") & (raw.distribution == "power_law_1.01")
              & (raw.topk == 8) & (raw.num_experts == 256) & (raw.hidden_size == 7168)
              & (raw.inter_size == 2048) & (raw.moe_tp_size == 1) & (raw.moe_ep_size == 8)
              & (raw.num_tokens == 1024)].iloc[0]
    got = ops.moe(tables, 1024, 7168, 2048, 8, 256, 1, 8, "fp8_block")
    assert got[0] == pytest.approx(row.latency * MS, rel=1e-12)
    ar = _raw("comm", "custom_allreduce_perf.parquet")
    arow = ar[(ar.num_gpus == 4) & (ar.message_size == 1048576)].iloc[0]
    assert ops.custom_allreduce(tables, 1048576, 4)[0] == pytest.approx(arow.latency * MS, rel=1e-12)


def test_between_points_interpolates_between_the_neighbours(tables):
    lo, hi = ops.gemm(tables, [4096, 8192], 8192, 8192, "fp8")
    mid = ops.gemm(tables, 6144, 8192, 8192, "fp8")[0]
    assert min(lo, hi) <= mid <= max(lo, hi)


def test_large_gemms_and_prefill_grow_with_work(tables):
    # Raw tables are not monotone in m at small or unaligned m (tile effects and
    # noise: down to 0.3x between successive points); compute-bound work is.
    m = 2.0 ** np.arange(12, 16)
    for n, k in ((2560, 8192), (8192, 8192), (14336, 8192), (8192, 7168)):
        t = ops.gemm(tables, m, n, k, "fp8")
        assert np.all(np.diff(t) > 0)
    attn = ops.context_attention(tables, 1, [1024, 2048, 4096, 8192, 16384], 16, 2, 128, "fp8", "fp8")
    assert np.all(np.diff(attn) > 0)


def test_vectorised_query_equals_scalar_queries(tables):
    batch = np.array([1, 3, 17, 64, 200])
    vec = ops.generation_attention(tables, batch, 3000, 16, 2, 128, "fp8")
    one = [ops.generation_attention(tables, b, 3000, 16, 2, 128, "fp8")[0] for b in batch]
    assert vec == pytest.approx(one, rel=1e-12)


def test_missing_coverage_is_a_value_not_an_exception(tables):
    assert isinstance(ops.gemm(tables, 16, 8192, 8192, "nvfp4"), ops.NotCovered)
    gap = ops.moe(tables, 64, 7168, 2048, 8, 257, 1, 8, "fp8_block")
    assert isinstance(gap, ops.NotCovered) and "experts=257" in str(gap)
    assert isinstance(ops.nccl(tables, "all_gather", 1e6, 8, dtype="fp4"), ops.NotCovered)


def test_a_group_past_the_measured_ones_is_scaled_as_the_package_does(tables):
    """aiconfigurator-core caps an all-reduce group at the GPUs per node its system file
    gives and scales past it by (n-1)/n * m/(m-1) * link bandwidth ratio: an H100 TP16
    all-reduce is the 8-GPU curve crossing a 50 GB/s NIC instead of 450 GB/s NVLink."""
    at8 = ops.custom_allreduce(tables, 1e6, 8)[0]
    assert ops.custom_allreduce(tables, 1e6, 16)[0] == pytest.approx(
        at8 * 15 / 16 * 8 / 7 * 450e9 / 50e9, rel=1e-12)


def test_a_gb200_rack_reads_the_tray_curves_scaled_over_nvlink():
    """The package's GB200 system file gives 4 GPUs a node (a tray) and 72 a rack, at
    900 GB/s either way: 8 GPUs read the 4-GPU curve times 7/8 * 4/3; 144 GPUs (two
    racks) cross 100 GB/s InfiniBand."""
    gb = load_tables("gb200", Engine.TRTLLM, VERSION, frozenset({"custom_allreduce", "nccl"}))
    assert gb.system.gpus_per_node == 4 and gb.system.gpus_per_rack == 72
    for query in (lambda n: ops.custom_allreduce(gb, 1e6, n),
                  lambda n: ops.nccl(gb, "all_gather", 1e6, n)):
        at4 = query(4)[0]
        assert query(8)[0] == pytest.approx(at4 * 7 / 8 * 4 / 3, rel=1e-12)
        assert query(144)[0] == pytest.approx(at4 * 143 / 144 * 4 / 3 * 900e9 / 100e9, rel=1e-12)


def test_unknown_system_and_family_are_refused():
    with pytest.raises(ValueError, match="no system"):
        load_system("h999")
    with pytest.raises(ValueError, match="unknown table families"):
        load_tables(SYSTEM, Engine.TRTLLM, VERSION, frozenset({"gemmm"}))
