"""Small builders for tests: a cluster description in a few lines."""

from __future__ import annotations

from orchestrator.kit.scenario import KIT_CLUSTER
from workers.cluster_toml import cluster_from_dict

# The stability kit's small cluster: Llama-3.1-70B on two H200 nodes.
SMALL = KIT_CLUSTER


def small_cluster(**changes):
    data = {**SMALL, **changes}
    return cluster_from_dict(data, "small.toml")


def single_call_sessions(arrivals_s, input_tokens=2048, output_tokens=64, block_size=64):
    """Open-loop traffic: one single-call session per arrival time, no shared prefixes."""
    from traces.model import Call, Session

    sessions = []
    for i, t in enumerate(arrivals_s):
        blocks = tuple(range(i << 20, (i << 20) + input_tokens // block_size))
        call = Call(session_id=f"s{i}", index=0, input_tokens=input_tokens, cached_tokens=0,
                    new_tokens=input_tokens, output_tokens=output_tokens, think_s=0.0,
                    is_subagent=False, reset_before=False, block_size=block_size,
                    block_ids=blocks, arrival_s=float(t))
        sessions.append(Session(f"s{i}", "test", float(t), (call,)))
    return sessions


def short_agent_sessions(n_sessions, calls_per_session, seed=0, context_tokens=131_072):
    """Synthetic agent sessions (traces.synth), cut to their first calls, drawn until
    `n_sessions` whose calls fit a `context_tokens` window (the test models' smallest but
    qwen3's) are found: calls beyond the model's window are refused or cut in a replay."""
    import dataclasses

    import numpy as np

    from traces.synth import generate

    out = []
    for s in generate(4 * n_sessions + 8, np.random.default_rng(seed)):
        calls = s.calls[:calls_per_session]
        if all(c.input_tokens + c.output_tokens <= context_tokens for c in calls):
            out.append(dataclasses.replace(s, calls=calls))
    assert len(out) >= n_sessions, "too few synthetic sessions fit the context window"
    return out[:n_sessions]
