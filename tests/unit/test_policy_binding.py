"""`binding`: buffered's decode loop beside a fill loop on the fill backlog in tokens and a
bound on the busiest KV link (orchestrator.control.policies.binding), and the facts the
sampler gives it (orchestrator.run.sampler). Figures worked by hand in the comments."""

import math
from dataclasses import fields
from itertools import pairwise

import pytest

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation, PoolObservation
from orchestrator.control.policies.base import (
    FILL_BACKLOG,
    KV_LINKS,
    QUEUE_POOLS,
    AdmissionReason,
    PluginError,
    loop_model_of,
    observed_facts,
)
from orchestrator.control.policies.binding import LINK_TARGET, BindingAdmission
from orchestrator.control.policies.buffered import BufferedAdmission
from orchestrator.run.replay import Orchestrator
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock


def obs(t=0.0, backlog_tokens=0, tokens_total=0, busy_s_total=0.0, link=0.0, per_call=10_000.0,
        rate=2.0, admitted=0, queued=0, others=()):
    pool = PoolObservation(name="prefill", phase="prefill", workers=2, queue_depth=queued,
                           running=1, slots=0, busy_fraction=1.0, backlog_tokens=backlog_tokens,
                           tokens_total=tokens_total, busy_s_total=busy_s_total)
    return Observation(time_s=t, admission_queue=50, admission_queue_interactive=50,
                       fill_queue=0, fill_running=0, ready_depth=0, decode_loading=0,
                       decode_running=0, decode_slots=10, admitted_total=admitted,
                       retired_total=0, completed_total=0, rejected_total=0,
                       predicted_decode_calls_per_s=rate, predicted_fill_latency_s=1.0,
                       pools=(pool, *others), kv_link_utilisation=link,
                       predicted_fill_tokens_per_call=per_call)


def test_new_fields_are_last_with_defaults():
    names = [f.name for f in fields(Observation)]
    assert names[-3:] == ["decode_draining", "kv_link_utilisation",
                          "predicted_fill_tokens_per_call"]
    assert [f.name for f in fields(PoolObservation)][-3:] == [
        "backlog_tokens", "tokens_total", "busy_s_total"]
    bare = Observation(0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.0, 1.0)
    assert (bare.kv_link_utilisation, bare.predicted_fill_tokens_per_call,
            bare.fill_backlog_tokens) == (0.0, 0.0, 0)
    pool = PoolObservation("p", "prefill", 1, 0, 0, 0, 0.0)
    assert (pool.backlog_tokens, pool.tokens_total, pool.busy_s_total) == (0, 0, 0.0)
    assert obs(backlog_tokens=7).fill_backlog_tokens == 7


def test_without_a_measured_fill_rate_it_decides_as_buffered():
    """No fill counters moving and no link near its bandwidth: buffered's decisions."""
    config = ControlConfig(observation_lag_s=5.0)
    binding, buffered = BindingAdmission(config), BufferedAdmission(config)
    for k in range(30):
        o = obs(t=float(k), backlog_tokens=1_000_000)
        a, b = binding.decide(o, k + 5.0), buffered.decide(o, k + 5.0)
        assert (a.admit, a.reason, a.background_limit) == (b.admit, b.reason, b.background_limit)
    assert binding.pools["prefill"].tokens_per_s() is None


def run(policy, seconds, tokens_per_s, busy_per_s, backlog, queued=0, others=lambda k: ()):
    d = None
    for k in range(seconds + 1):
        o = obs(t=float(k), backlog_tokens=backlog, tokens_total=tokens_per_s * k,
                busy_s_total=busy_per_s * k, admitted=2 * k, queued=queued, others=others(k))
        d = policy.decide(o, k + 5.0)
    return d


def test_a_saturated_fill_pool_caps_its_own_calls_at_its_rate_over_its_tokens_per_call():
    # Each second the pool's two workers compute 20,000 tokens in 2 busy seconds (10,000
    # a busy second each, 20,000 for the pool); 99 calls queued and 1 running there hold
    # 1,000,000 tokens: 10,000 a call. After 40 s the smoothed busy share is 1 - e^-4 >
    # 0.9. Its target: 20,000 x 8 s + 2 x 2 x 10,000 = 200,000 tokens; its loop asks
    # 20,000 + 0.5 x (200,000 - 1,000,000) / 5 < 0: none of its calls, while decode's
    # loop admits the others.
    policy = BindingAdmission(ControlConfig(observation_lag_s=5.0))
    buffered = BufferedAdmission(ControlConfig(observation_lag_s=5.0))
    d = run(policy, 40, 20_000, 2.0, 1_000_000, queued=99)
    b = run(buffered, 40, 20_000, 2.0, 1_000_000, queued=99)
    loop = policy.pools["prefill"]
    assert loop.tokens_per_s() == pytest.approx(20_000.0)
    assert loop.per_call == pytest.approx(10_000.0)
    assert loop.busy_share == pytest.approx(1 - math.exp(-4.0))
    assert policy.target_fill_tokens(20_000.0, 10_000.0, 2) == 200_000.0
    assert d.pool_limits == {"prefill": 0}
    assert d.admit == b.admit > 0 and d.reason is AdmissionReason.FILL_BACKLOG


def test_a_fill_pools_cap_is_its_loops_calls_a_period_with_the_fraction_carried():
    # The same pool with 1 queued and 1 running call over 20,000 tokens held (10,000 a
    # call): its loop asks 20,000 + 0.5 x (200,000 - 20,000) / 5 = 38,000 tokens/s, 3.8 of
    # its calls a second; each period's cap is the whole part of the credit earned.
    config = ControlConfig(observation_lag_s=5.0)
    assert (config.backlog_gain, config.backlog_ewma_s, config.ready_buffer_s) == (0.5, 5.0, 8.0)
    policy = BindingAdmission(config)
    run(policy, 40, 20_000, 2.0, 20_000, queued=1)
    step = 3.8 * policy.period_s
    for k in range(41, 46):
        credit = policy._fill_credit["prefill"]
        d = policy.decide(obs(t=float(k), backlog_tokens=20_000, tokens_total=20_000 * k,
                              busy_s_total=2.0 * k, queued=1), k + 5.0)
        assert d.pool_limits["prefill"] == int(credit + step)
        assert policy._fill_credit["prefill"] == pytest.approx(credit + step
                                                               - d.pool_limits["prefill"])


def test_a_pool_that_does_not_bind_takes_no_cap_beside_one_that_does():
    """A midfill pool half busy beside the saturated prefill pool: only prefill's calls
    are capped; the midfill pool's go as decode's loop admits them (before 7dcbb5f+ one
    rate held both)."""
    def midfill(k):
        return (PoolObservation(name="midfill", phase="midfill", workers=2, queue_depth=0,
                                running=1, slots=0, busy_fraction=0.5, backlog_tokens=5_000,
                                tokens_total=10_000 * k, busy_s_total=1.0 * k),)

    policy = BindingAdmission(ControlConfig(observation_lag_s=5.0))
    d = run(policy, 40, 20_000, 2.0, 1_000_000, queued=99, others=midfill)
    assert set(d.pool_limits) == {"prefill"}
    assert d.admit > 0 and d.pool_limits["prefill"] == 0


def test_the_fill_loop_does_not_bind_while_the_pool_idles_part_of_the_time():
    # Half busy (1 busy second a second over 2 workers), the same backlog: no fill bound,
    # buffered's decisions throughout.
    config = ControlConfig(observation_lag_s=5.0)
    policy, buffered = BindingAdmission(config), BufferedAdmission(config)
    for k in range(41):
        o = obs(t=float(k), backlog_tokens=1_000_000, tokens_total=10_000 * k,
                busy_s_total=1.0 * k, admitted=2 * k)
        d, b = policy.decide(o, k + 5.0), buffered.decide(o, k + 5.0)
        assert (d.admit, d.reason) == (b.admit, b.reason)
    assert policy.pools["prefill"].busy_share == pytest.approx(0.5 * (1 - math.exp(-4.0)))


def test_a_worker_gone_gives_no_reading():
    policy = BindingAdmission(ControlConfig())
    policy.decide(obs(t=0.0, tokens_total=50_000, busy_s_total=10.0), 0.0)
    policy.decide(obs(t=1.0, tokens_total=60_000, busy_s_total=11.0), 1.0)
    policy.decide(obs(t=2.0, tokens_total=10_000, busy_s_total=2.0), 2.0)  # counters fell
    assert policy.pools["prefill"].done == 10_000.0  # the second reading only


def test_a_saturated_link_holds_admission_to_its_recent_rate_scaled_down():
    policy = BindingAdmission(ControlConfig(observation_lag_s=5.0))
    for k in range(20):  # decode's loop alone: buffered's admissions
        policy.decide(obs(t=float(k)), k + 5.0)
    recent = policy._admit_rate
    assert recent > 0
    assert policy.link_rate(obs(link=0.5)) == float("inf")
    assert policy.link_rate(obs(link=1.0)) == pytest.approx(recent * LINK_TARGET)
    d = policy.decide(obs(t=20.0, link=1.0), 25.0)
    assert d.reason is AdmissionReason.KV_LINK


def test_binding_declares_buffereds_loop():
    config = ControlConfig(observation_lag_s=5.0)
    assert loop_model_of(BindingAdmission(config), config) == loop_model_of(
        BufferedAdmission(config), config)


def _samples(policy: object, control: ControlConfig) -> list:
    samples = []

    class Heard:
        def on_sample(self, orch, o, now_s):
            samples.append(o)

    llama = load_model("llama-3.1-70b")
    orch = Orchestrator(small_cluster().bind(llama), short_agent_sessions(3, 3, seed=2),
                        policy, control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), 1,
                        listeners=[Heard()])
    VirtualClock().run(orch.run())
    return samples


def test_the_sampler_counts_the_fill_workers_tokens_busy_time_and_backlog():
    """A short run: the fill pools' counters never fall (no worker leaves), the backlog
    is 0 when nothing is queued or filling, the link figure is a share."""
    control = ControlConfig(realloc_enabled=False)
    samples = _samples(BindingAdmission(control), control)
    assert samples
    fills = [[p for p in o.pools if p.phase != "decode"] for o in samples]
    totals = [(sum(p.tokens_total for p in f), sum(p.busy_s_total for p in f)) for f in fills]
    assert all(a <= b for a, b in pairwise(totals))
    assert totals[-1][0] > 0 and totals[-1][1] > 0
    assert all(p.backlog_tokens == p.tokens_total == p.busy_s_total == 0
               for o in samples for p in o.pools if p.phase == "decode")
    assert all(o.fill_backlog_tokens == 0 for o in samples
               if o.fill_queue == 0 and o.fill_running == 0)
    assert any(o.fill_backlog_tokens > 0 for o in samples)
    assert all(0.0 <= o.kv_link_utilisation <= 1.0 + 1e-9 for o in samples)
    assert all(o.predicted_fill_tokens_per_call > 0 for o in samples)


def test_the_walked_facts_are_gathered_only_for_a_policy_that_observes_them():
    """`binding` names the fill backlog and the links in `observes`; `buffered` names
    neither, so its samples read 0 for both (the walks are not made), the rest alike."""
    control = ControlConfig(realloc_enabled=False)
    assert observed_facts(BindingAdmission(control)) == {FILL_BACKLOG, KV_LINKS, QUEUE_POOLS}
    assert observed_facts(BufferedAdmission(control)) == frozenset()
    plain = _samples(BufferedAdmission(control), control)
    assert plain and all(o.fill_backlog_tokens == 0 and o.kv_link_utilisation == 0.0
                         for o in plain)
    assert any(o.fill_queue > 0 for o in plain)  # there was a backlog it did not walk


def test_observes_naming_an_unknown_fact_is_refused_in_one_line():
    class Odd:
        name = "odd"
        observes = frozenset({"fill_backlog", "gpu_temperature"})

    with pytest.raises(PluginError, match=r"odd: Odd.observes names unknown facts "
                                          r"\['gpu_temperature'\]"):
        observed_facts(Odd())
