import numpy as np
import pytest

from costmodel.errors import LayoutError
from costmodel.hardware import HardwareTable, load_hardware
from costmodel.layout import Layout, check_layout
from costmodel.model import load_model
from costmodel.phase import Configs, Phase, phase_cost
from costmodel.precision import Precision
from costmodel.sweep import Grid, Workload, build_configs, run_sweep, valid_mask, write_csv

HW = ("gb200", "b200", "h100")


@pytest.fixture(scope="module")
def table():
    return HardwareTable(tuple(load_hardware(h) for h in HW))


@pytest.mark.parametrize("model_name", ["kimi-k3-like", "deepseek-v3", "llama-3.1-70b"])
def test_valid_mask_agrees_with_check_layout(table, model_name):
    model = load_model(model_name)
    rng = np.random.default_rng(7)
    n = 300
    pp = rng.choice([1, 2, 3, 4, 8, 16, 64, 128], n)
    tp = rng.choice([1, 2, 3, 4, 8, 16, 128], n)
    ep = rng.choice([1, 2, 3, 4, 8, 32, 64, 256, 1024], n)
    prec = rng.integers(0, 3, n)
    hw = rng.integers(0, len(HW), n)
    cfg = Configs.make(phase=0, batch=1, new_tokens=1, context=0, pp=pp, tp=tp, ep=ep,
                       precision=prec, hardware=hw)
    mask = valid_mask(model, table, cfg)
    expected = []
    for i in range(n):
        layout = Layout(pp=int(pp[i]), tp=int(tp[i]), ep=int(ep[i]), weights=Precision(prec[i]))
        try:
            check_layout(model, table.specs[hw[i]], layout)
            expected.append(True)
        except LayoutError:
            expected.append(False)
    assert mask.tolist() == expected
    assert 0 < mask.sum() < n  # the grid exercises both outcomes


def test_build_configs_respects_gpu_window():
    w = (Workload("d", Phase.DECODE, 1, 1024, 10), Workload("p", Phase.PREFILL, 512, 0, 512))
    grid = Grid(min_gpus=16, max_gpus=32)
    cfg, owner = build_configs(w, 2, grid)
    gpus = cfg.pp * np.maximum(cfg.tp, cfg.ep)
    assert gpus.min() >= 16 and gpus.max() <= 32
    assert set(np.unique(owner)) == {0, 1}
    assert np.all(cfg.phase[owner == 0] == Phase.DECODE)
    assert cfg.batch[owner == 0].max() == max(grid.decode_batch)
    assert cfg.batch[owner == 1].max() == max(grid.fill_batch)


def test_sweep_rows_match_single_phase_cost(table):
    model = load_model("kimi-k3-like")
    w = (Workload("decode-8k", Phase.DECODE, 1, 8192, 1000),)
    result = run_sweep(model, table, w, Grid(pp=(1, 2), ep=(8, 16, 32)))
    c = result.columns
    i = len(result) // 2
    one = Configs.make(phase=int(Phase.DECODE), batch=c["batch"][i], new_tokens=1, context=8192,
                       pp=c["pp"][i], tp=c["tp"][i], ep=c["ep"][i], precision=int(Precision.FP4),
                       hardware=c["hardware"][i], kv_precision=int(Precision.FP8))
    cost = phase_cost(model, table, one)
    assert c["ttft_or_tpot_s"][i] == cost.tpot_s[0]
    assert c["energy_per_query_j"][i] == cost.energy_per_token_j[0] * 1000
    # Frontier points fit and are not dominated within their group.
    f = c["on_frontier"]
    assert f.any() and np.all(c["fits"][f])


def test_blocked_phase_cost_is_bit_identical(table, monkeypatch):
    import costmodel.phase as phase

    model = load_model("kimi-k3-like")
    rng = np.random.default_rng(1)
    n = 1000
    cfg = Configs.make(phase=rng.integers(0, 3, n), batch=rng.integers(1, 64, n),
                       new_tokens=rng.integers(1, 9000, n), context=rng.integers(0, 2**17, n),
                       pp=rng.choice([1, 2, 4], n), tp=rng.choice([1, 2, 8], n),
                       ep=rng.choice([8, 64], n), precision=2, hardware=rng.integers(0, 3, n))
    whole = phase_cost(model, table, cfg)
    monkeypatch.setattr(phase, "BLOCK_CONFIGS", 97)
    blocked = phase_cost(model, table, cfg)
    for name in vars(whole):
        assert np.array_equal(getattr(whole, name), getattr(blocked, name)), name


def test_write_csv_round_trips(table, tmp_path):
    import csv

    model = load_model("kimi-k3-like")
    w = (Workload("prefill-8k", Phase.PREFILL, 8192, 0, 8192),)
    result = run_sweep(model, table, w, Grid(pp=(2, 4), tp=(4,), ep=(8, 16)))
    path = tmp_path / "s.csv"
    n = write_csv(result, path)
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == n == len(result)
    assert rows[0]["workload"] == "prefill-8k" and rows[0]["phase"] == "prefill"
    assert float(rows[0]["tokens_per_s_per_gpu"]) == result.columns["tokens_per_s_per_gpu"][0]
