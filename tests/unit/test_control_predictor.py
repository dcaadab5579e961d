"""The controllers' model of the service: its own prior, biased on request, learnt online
from completed calls; never the trace, the plant's pricers or the workers (the shell
hands it facts: orchestrator.run.sampler)."""

import inspect
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from costmodel.model import load_model
from costmodel.phase import Phase
from orchestrator.control.predictor import PRIOR_EFFICIENCY, PredictorSettings
from orchestrator.control.predictor import Predictor as _Predictor
from orchestrator.run.quotes import PoolQuotes
from orchestrator.run.sampler import Sampler
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


def Predictor(cluster, settings=None):
    settings = settings or PredictorSettings()
    return _Predictor(PoolQuotes(cluster, settings.efficiency), settings)


class Shell:
    """The predictor as the run asks it: through the sampler's facts of a runtime."""

    def __init__(self, predictor, rt):
        self.p, self.rt = predictor, rt

    def fill_latency_s(self):
        return self.p.fill_latency_s([w.state() for w in self.rt.fill_workers.values()])

    def decode_calls_per_s(self):
        return self.p.decode_calls_per_s([w.state() for w in self.rt.decode_workers.values()])

    def observe_completion(self, req):
        self.p.observe_completion(Sampler(self.rt, self.p, 1.0).completed(req))


def done_call(rt, call_id, fill_s, itl_s, input_tokens=8192, computed=1024, output=257):
    fill = next(iter(rt.fill_workers))
    dec = next(iter(rt.decode_workers))
    req = Request(call_id, "s", input_tokens, output, fill_worker=fill, decode_worker=dec)
    req.computed_tokens = computed
    req.parts_s[LatencyPart.FILL] = fill_s
    req.parts_s[LatencyPart.DECODE] = itl_s * (output - 1)
    req.done_s = 100.0
    return req


def test_it_is_built_from_its_quotes_and_settings_alone():
    assert list(inspect.signature(_Predictor).parameters) == ["quotes", "settings"]
    from costmodel.efficiency import DEFAULT_EFFICIENCY
    assert PRIOR_EFFICIENCY != DEFAULT_EFFICIENCY  # not the plant's factors


def test_the_error_scales_every_prediction(cluster, runtime):
    base = Shell(Predictor(cluster), runtime)
    slow = Shell(Predictor(cluster, PredictorSettings(error=1.3)), runtime)
    assert slow.fill_latency_s() == pytest.approx(1.3 * base.fill_latency_s())
    assert slow.decode_calls_per_s() == pytest.approx(base.decode_calls_per_s() / 1.3)


def test_the_prior_shape_goes_with_the_first_completion(cluster, runtime):
    p = Predictor(cluster)
    assert p.input_tokens == PredictorSettings().prior_input_tokens
    Shell(p, runtime).observe_completion(done_call(runtime, 1, 0.5, 0.03, input_tokens=5000,
                                                   computed=700, output=101))
    assert (p.input_tokens, p.new_tokens, p.output_tokens) == (5000, 700, 101)


@dataclass(frozen=True)
class Plant:
    """A service whose rates are known by hand, priced by nothing the predictor uses: a
    decode step takes `step_s + per_token_s x context` whatever the batch, a fill
    `fill_s + per_new_token_s x new tokens + per_cached_token_s x cached tokens`."""

    step_s: float = 0.020
    per_token_s: float = 1e-6
    fill_s: float = 0.15
    per_new_token_s: float = 2e-4
    per_cached_token_s: float = 1e-5
    batch: int = 8  # sequences each decode worker runs

    def decode_s(self, input_tokens: int, output_tokens: int) -> float:
        """A call's time in decode: its output_tokens - 1 steps (the fill gives the
        first token), from context input + 1 on."""
        steps = output_tokens - 1
        contexts = steps * (input_tokens + 1) + steps * (steps - 1) / 2
        return steps * self.step_s + self.per_token_s * contexts

    def fill_time_s(self, new_tokens: int, cached_tokens: int) -> float:
        return (self.fill_s + self.per_new_token_s * new_tokens
                + self.per_cached_token_s * cached_tokens)


class PlantWorker:
    """What the sampler reads of a worker: its spec and state, and for decode its batch
    (the plant runs `batch` sequences, so a call completes beside batch - 1 others)."""

    def __init__(self, spec, batch: int) -> None:
        self.spec, self.target_batch, self.accepting = spec, batch, True
        self.pool = spec.pool

    def state(self):
        return self

    def sequences_running(self) -> int:
        return self.target_batch - 1


def plant_runtime(cluster, plant: Plant) -> SimpleNamespace:
    decode = [w for w in cluster.workers if w.phase is Phase.DECODE]
    fills = [w for w in cluster.workers if w.phase is not Phase.DECODE]
    return SimpleNamespace(fill_workers={w.name: PlantWorker(w, 1) for w in fills},
                           decode_workers={w.name: PlantWorker(w, plant.batch) for w in decode})


def plant_calls(rt, plant: Plant, shape, n):
    """`n` completed calls of one `shape` (input, new, output tokens), each taking what the
    plant takes; with the plant's service rate (calls a second over the decode workers at
    the plant's batch) and mean fill time over those calls."""
    fill = next(w for w in rt.fill_workers.values() if w.spec.phase is Phase.PREFILL)
    dec = next(iter(rt.decode_workers.values()))
    calls, decode_s, fill_s = [], [], []
    for i in range(n):
        input_tokens, new_tokens, output_tokens = shape
        req = Request(i, "s", input_tokens, output_tokens, fill_worker=fill.spec.name,
                      decode_worker=dec.spec.name)
        req.computed_tokens = new_tokens
        req.parts_s[LatencyPart.FILL] = plant.fill_time_s(new_tokens, input_tokens - new_tokens)
        req.parts_s[LatencyPart.DECODE] = plant.decode_s(input_tokens, output_tokens)
        req.done_s = 100.0
        calls.append(req)
        decode_s.append(req.parts_s[LatencyPart.DECODE])
        fill_s.append(req.parts_s[LatencyPart.FILL])
    rate = len(rt.decode_workers) * plant.batch * len(decode_s) / sum(decode_s)
    return calls, rate, sum(fill_s) / len(fill_s)


@pytest.mark.parametrize("error", [0.5, 2.0])
def test_learning_converges_to_the_plants_service_rate(cluster, error):
    """Calls of one shape from a plant priced by hand: from either bias, the predicted
    decode rate converges to the plant's within 0.5% and the fill to the plant's within
    0.1%. The 0.5% is the predictor's one known approximation: it divides a call's decode
    time by its output tokens where decode makes output - 1 (1/257 = 0.39% here)."""
    plant = Plant()
    rt = plant_runtime(cluster, plant)
    calls, rate, fill_s = plant_calls(rt, plant, (8192, 1024, 257), 300)
    p = Shell(Predictor(cluster, PredictorSettings(error=error, learn=0.05)), rt)
    assert abs(p.decode_calls_per_s() / rate - 1) > 0.05  # it starts well off
    assert abs(p.fill_latency_s() / fill_s - 1) > 0.05
    for req in calls:
        p.observe_completion(req)
    assert p.decode_calls_per_s() == pytest.approx(rate, rel=5e-3)
    assert p.fill_latency_s() == pytest.approx(fill_s, rel=1e-3)


def test_without_learning_the_prior_and_the_bias_stay(cluster, runtime):
    p = Predictor(cluster, PredictorSettings(error=1.3, learn=0.0))
    shell = Shell(p, runtime)
    first = shell.fill_latency_s()
    for i in range(20):
        shell.observe_completion(done_call(runtime, i, 5.0, 0.2))
    assert p.fill_correction == p.decode_correction == 1.0
    assert shell.fill_latency_s() == first


@pytest.mark.parametrize("changes, message", [
    ({"error": 0.0}, "predictor error"), ({"error": float("nan")}, "predictor error"),
    ({"learn": 1.5}, "learning weight"),
])
def test_bad_settings_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        PredictorSettings(**changes)


class _Quotes:
    """Step prices by hand: a fill 0.5 s per 1,000 new tokens, a decode step 20 ms at
    any batch and context."""

    def fill_s(self, pool, new_tokens, cached_tokens):
        return 0.5 * new_tokens / 1000

    def decode_step_s(self, pool, sequences, context_tokens):
        return 0.020


def test_its_rates_are_the_quotes_over_the_workers_facts_it_is_handed():
    """No runtime: the predictor reads the facts given (pools, batch targets) and prices
    the typical call through its quotes."""
    settings = PredictorSettings(prior_new_tokens=2000.0, prior_output_tokens=100.0)
    p = _Predictor(_Quotes(), settings)
    decode = [SimpleNamespace(pool="d", accepting=True, target_batch=8),
              SimpleNamespace(pool="d", accepting=False, target_batch=8)]  # not serving
    assert p.decode_calls_per_s(decode) == pytest.approx(8 / (0.020 * 100))
    fills = [SimpleNamespace(pool="p", accepting=True, target_batch=1)]
    assert p.fill_latency_s(fills) == pytest.approx(1.0)
    assert p.fill_latency_s([]) == 0.0 and p.decode_calls_per_s([]) == 0.0
