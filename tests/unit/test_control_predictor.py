"""The controllers' model of the service: its own prior, biased on request, learnt online
from completed calls; never the trace or the plant's pricers."""

import inspect

import pytest

from costmodel.model import load_model
from orchestrator.control.predictor import PRIOR_EFFICIENCY, Predictor, PredictorSettings
from tests.factories import small_cluster
from workers.request import LatencyPart, Request
from workers.runtime import ClusterRuntime

LLAMA = load_model("llama-3.1-70b")


@pytest.fixture(scope="module")
def cluster():
    return small_cluster().bind(LLAMA)


@pytest.fixture(scope="module")
def runtime(cluster):
    return ClusterRuntime(cluster, 64)


def done_call(rt, call_id, fill_s, itl_s, input_tokens=8192, computed=1024, output=257):
    fill = next(iter(rt.fill_workers))
    dec = next(iter(rt.decode_workers))
    req = Request(call_id, "s", input_tokens, output, fill_worker=fill, decode_worker=dec)
    req.computed_tokens = computed
    req.parts_s[LatencyPart.FILL] = fill_s
    req.parts_s[LatencyPart.DECODE] = itl_s * (output - 1)
    req.done_s = 100.0
    return req


def test_it_is_built_from_the_cluster_and_its_settings_alone():
    assert list(inspect.signature(Predictor).parameters) == ["cluster", "settings"]
    from costmodel.efficiency import DEFAULT_EFFICIENCY
    assert PRIOR_EFFICIENCY != DEFAULT_EFFICIENCY  # not the plant's factors


def test_the_error_scales_every_prediction(cluster, runtime):
    base = Predictor(cluster)
    slow = Predictor(cluster, PredictorSettings(error=1.3))
    assert slow.fill_latency_s(runtime) == pytest.approx(1.3 * base.fill_latency_s(runtime))
    assert slow.decode_calls_per_s(runtime) == pytest.approx(
        base.decode_calls_per_s(runtime) / 1.3)


def test_the_prior_shape_goes_with_the_first_completion(cluster, runtime):
    p = Predictor(cluster)
    assert p.input_tokens == PredictorSettings().prior_input_tokens
    p.observe_completion(done_call(runtime, 1, 0.5, 0.03, input_tokens=5000, computed=700,
                                   output=101), runtime)
    assert (p.input_tokens, p.new_tokens, p.output_tokens) == (5000, 700, 101)


@pytest.mark.parametrize("error", [0.7, 1.3])
def test_learning_removes_a_biased_model(cluster, runtime, error):
    """Calls that take exactly what an unbiased model says: the biased model's predictions
    converge to the unbiased ones."""
    truth = Predictor(cluster)
    biased = Predictor(cluster, PredictorSettings(error=error, learn=0.05))
    fill_s = truth._model_fill_s(next(iter(runtime.fill_workers.values())).spec.pool,
                                 next(iter(runtime.fill_workers.values())).spec.phase,
                                 1024, 8192 - 1024)
    dec = next(iter(runtime.decode_workers.values()))
    itl_s = truth._model_tpot_s(dec.spec.pool, dec.state().running + 1, 8192 + 257 / 2)
    before = abs(biased.fill_latency_s(runtime) / truth.fill_latency_s(runtime) - 1)
    for i in range(300):
        req = done_call(runtime, i, fill_s, itl_s)
        biased.observe_completion(req, runtime)
        truth.observe_completion(req, runtime)
    assert biased.fill_correction == pytest.approx(1 / error, rel=1e-3)
    assert biased.decode_correction == pytest.approx(1 / error, rel=1e-3)
    after = abs(biased.fill_latency_s(runtime) / truth.fill_latency_s(runtime) - 1)
    assert after < 1e-3 < before
    assert biased.decode_calls_per_s(runtime) == pytest.approx(truth.decode_calls_per_s(runtime),
                                                               rel=1e-3)


def test_without_learning_the_prior_and_the_bias_stay(cluster, runtime):
    p = Predictor(cluster, PredictorSettings(error=1.3, learn=0.0))
    first = p.fill_latency_s(runtime)
    for i in range(20):
        p.observe_completion(done_call(runtime, i, 5.0, 0.2), runtime)
    assert p.fill_correction == p.decode_correction == 1.0
    assert p.fill_latency_s(runtime) == first


@pytest.mark.parametrize("changes, message", [
    ({"error": 0.0}, "predictor error"), ({"error": float("nan")}, "predictor error"),
    ({"learn": 1.5}, "learning weight"),
])
def test_bad_settings_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        PredictorSettings(**changes)
