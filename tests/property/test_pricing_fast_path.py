"""The workers' scalar pricing (workers/fast_pricing.py, workers/step_tail.py) gives the
vectorised core's doubles bit for bit: steps of every phase, fills, decode runs (short
ones in a Python loop, long ones as arrays), MTP step times and heterogeneous batch
steps, over models, hardware, layouts, precisions, efficiencies, batch sizes and
contexts."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.efficiency import Efficiency, OverlapMode
from costmodel.hardware import load_hardware
from costmodel.layout import Layout
from costmodel.model import load_model, model_names
from costmodel.phase import Phase, step_times
from costmodel.precision import Precision
from workers.pricing import SCALAR_RUN_STEPS, SCALAR_STEPS, StepPricer
from workers.step_tail import StepTail

MODELS = {n: load_model(n) for n in model_names()}
HARDWARE = {n: load_hardware(n) for n in ("h100", "h200", "b200", "gb200", "gb300", "mi355x")}
EFFICIENCIES = (Efficiency(), Efficiency(overlap=OverlapMode.SERIAL),
                Efficiency(compute=0.55, hbm=0.7, overlap_fraction=0.3, step_overhead_s=0.0))

pricers = st.builds(
    lambda m, hw, pp, tp, ep, w, kv, mtp, eff: StepPricer(
        MODELS[m], HARDWARE[hw], Layout(pp=pp, tp=tp, ep=ep, weights=w, kv=kv, mtp=mtp), eff),
    st.sampled_from(sorted(MODELS)), st.sampled_from(sorted(HARDWARE)),
    st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2, 8, 16, 36, 72]), st.sampled_from(list(Precision)),
    st.sampled_from([Precision.BF16, Precision.FP8]), st.integers(0, 4),
    st.sampled_from(EFFICIENCIES))
contexts = st.one_of(st.integers(0, 300_000).map(float),
                     st.floats(0.0, 300_000.0, allow_nan=False))
FAST = settings(max_examples=12)
MANY = settings(max_examples=400)


def check_steps_of_every_phase(pricer, phase, batch, new_tokens, context):
    cfg = pricer._configs(phase, batch, new_tokens, context)
    step, tpot = step_times(pricer.model, pricer._table, cfg, pricer.eff)
    tail = StepTail(pricer._pricing, phase, batch, float(new_tokens))
    got = tail.step_s(context)
    assert got == step[0]
    assert tail.tpot_s(got) == tpot[0]


def check_fill(pricer, phase, sequences, new_tokens, cached_tokens):
    args = (phase, sequences, new_tokens, cached_tokens)
    assert pricer._fill_uncached(*args) == pricer.fill_core_s(*args)
    # Unmemoised (the predictor's own memo keeps it): the memoised call's latency.
    assert pricer.fill_once_s(*args) == pricer.fill_s(*args)[0]


def check_decode_runs(pricer, sequences, context, steps):
    got = pricer.decode_steps_s(sequences, context, steps)
    assert np.array_equal(got, pricer.decode_steps_core_s(sequences, context, steps))
    start_s = 1234.5678 + context / 7
    ends = pricer.decode_run_ends_s(start_s, sequences, context, steps)
    assert list(map(float, ends)) == (start_s + got.cumsum()).tolist()
    mean_contexts = context + 1.5 * np.arange(steps)
    assert np.array_equal(pricer.decode_step_times_s(sequences, mean_contexts),
                          pricer.decode_step_times_core_s(sequences, mean_contexts))


def check_batch_step(pricer, requests):
    new, cached, decoding = (tuple(col) for col in zip(*requests, strict=True))
    expected = pricer.batch_core_s(new, cached, decoding)
    assert pricer._batch_uncached(new, cached, decoding) == expected  # Python loop
    arrays = pricer._batch_tail.step_arrays_s(np.array(new, dtype=np.float64),
                                              np.array(cached, dtype=np.float64),
                                              np.array(decoding))
    assert (arrays, arrays / pricer.layout.pp) == expected
    assert pricer.fill_step_s(list(new), list(cached), list(decoding)) == expected
    # A mixed worker's step: its chunks, then its decodes.
    chunks = [(t, c) for t, c, d in requests if not d]
    decodes = [c for _, c, d in requests if d]
    ordered = [(t, c, False) for t, c in chunks] + [(1, c, True) for c in decodes]
    new, cached, decoding = (tuple(col) for col in zip(*ordered, strict=True))
    assert pricer.mixed_step_s([t for t, _ in chunks], [c for _, c in chunks],
                               decodes) == pricer.batch_core_s(new, cached, decoding)


steps_args = dict(pricer=pricers, phase=st.sampled_from(list(Phase)),
                  batch=st.one_of(st.integers(1, 1024).map(float), st.floats(0.25, 512.0)),
                  new_tokens=st.integers(1, 65_536), context=contexts)
fill_args = dict(pricer=pricers, phase=st.sampled_from(list(Phase)),
                 sequences=st.integers(1, 4096), new_tokens=st.integers(1, 131_072),
                 cached_tokens=st.integers(0, 300_000))
runs_args = dict(pricer=pricers, sequences=st.integers(1, 2048), context=contexts,
                 steps=st.sampled_from([1, 2, SCALAR_STEPS, SCALAR_STEPS + 1,
                                         SCALAR_RUN_STEPS, SCALAR_RUN_STEPS + 1, 200]))
batch_args = dict(pricer=pricers, requests=st.lists(
    st.tuples(st.integers(1, 32_768), st.integers(0, 250_000), st.booleans()),
    min_size=1, max_size=40))


@FAST
@given(**steps_args)
def test_a_step_of_any_phase_prices_as_the_core(pricer, phase, batch, new_tokens, context):
    check_steps_of_every_phase(pricer, phase, batch, new_tokens, context)


@FAST
@given(**fill_args)
def test_a_fill_prices_as_the_core(pricer, phase, sequences, new_tokens, cached_tokens):
    check_fill(pricer, phase, sequences, new_tokens, cached_tokens)


@FAST
@given(**runs_args)
def test_decode_runs_price_as_the_core(pricer, sequences, context, steps):
    check_decode_runs(pricer, sequences, context, steps)


@FAST
@given(**batch_args)
def test_a_batch_step_prices_as_the_core(pricer, requests):
    check_batch_step(pricer, requests)


def test_a_long_batch_uses_numpy_pairwise_blocks():
    # 300 requests: two recursive halves of 144 and 156 (blocks of 8 accumulators).
    pricer = StepPricer(MODELS["kimi-k3-like"], HARDWARE["gb200"], Layout(tp=1, ep=36, mtp=1))
    rng = np.random.default_rng(3)
    requests = [(int(rng.integers(1, 9000)), int(rng.integers(0, 200_000)), bool(d))
                for d in rng.random(300) < 0.6]
    check_batch_step(pricer, requests)


def test_the_power_is_raised_as_the_core_raises_it():
    # numpy raises a scalar's power with libm's pow and an array's with its vectorised
    # power; they differ in the last bit here. The pricer's own configurations are 0-d
    # (scalar), a batch step's are one-element arrays: each path must follow its own.
    pricer = StepPricer(MODELS["kimi-linear-48b"], HARDWARE["b200"],
                        Layout(tp=4, ep=2, weights=Precision.FP8))
    check_fill(pricer, Phase.DECODE, 33, 76_619, 98_332)
    check_batch_step(pricer, [(10, 1000, False)] * 2)


def test_a_dense_one_stage_tails_short_runs_price_as_the_core():
    # A dense model on one stage, one token a step, with an overlap: terms that are
    # exactly zero (no expert, no sliding layer, no state) and factors of one (pp).
    pricer = StepPricer(MODELS["llama-3.1-70b"], HARDWARE["h100"], Layout(tp=4))
    for sequences, context in ((17, 2345.6), (1, 0.0), (64, 120_000.0), (128, 7.25)):
        for steps in (1, 2, 5, SCALAR_STEPS, SCALAR_RUN_STEPS):
            check_decode_runs(pricer, sequences, context, steps)


@pytest.mark.parametrize("model, hardware, layout, sequences, context, steps, memory, net", [
    # A small batch: memory-bound at every step (the compute side is not worked out).
    ("llama-3.1-70b", "h100", Layout(tp=8, ep=8), 1, 1000.0, 200, True, False),
    # Longer than the table of step numbers a run's contexts are sliced from.
    ("llama-3.1-70b", "h100", Layout(tp=8, ep=8), 1, 1000.0, 5000, True, False),
    # A big batch from an empty context: compute-bound, then memory-bound within the run
    # (and compute-bound through a short run).
    ("llama-3.1-70b", "h100", Layout(tp=8, ep=8), 1024, 0.0, 2000, False, False),
    # The all-to-all slower than the stage's kernels: min(t_cm, network_s) is t_cm.
    ("deepseek-v3", "mi355x", Layout(tp=1, ep=72), 4096, 0.0, 200, True, True),
])
def test_long_runs_price_as_the_core_on_each_side_of_the_roofline(
        model, hardware, layout, sequences, context, steps, memory, net):
    pricer = StepPricer(MODELS[model], HARDWARE[hardware], layout)
    tail = pricer._tail(Phase.DECODE, sequences, 1)
    attn = tail.main.attn
    # The case is the one named: which side of the roofline, and of the overlap's min.
    assert attn.monotone
    assert (attn.compute_s(context + steps - 1) < attn.memory_s(context)) is memory
    assert (tail.main.network_s > attn.time_s(context) + sum(tail.main.after)) is net
    check_decode_runs(pricer, sequences, context, steps)  # as arrays
    check_decode_runs(pricer, sequences, context, SCALAR_RUN_STEPS)  # in the Python loop


@pytest.mark.slow
@MANY
@given(**steps_args)
def test_many_steps_of_any_phase(pricer, phase, batch, new_tokens, context):
    check_steps_of_every_phase(pricer, phase, batch, new_tokens, context)


@pytest.mark.slow
@MANY
@given(**fill_args)
def test_many_fills(pricer, phase, sequences, new_tokens, cached_tokens):
    check_fill(pricer, phase, sequences, new_tokens, cached_tokens)


@pytest.mark.slow
@MANY
@given(**runs_args)
def test_many_decode_runs(pricer, sequences, context, steps):
    check_decode_runs(pricer, sequences, context, steps)


@pytest.mark.slow
@MANY
@given(**batch_args)
def test_many_batch_steps(pricer, requests):
    check_batch_step(pricer, requests)
