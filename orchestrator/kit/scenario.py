"""A stability scenario: small, serialisable, replayable with one command.

A `Scenario` says what traffic arrives (open-loop single calls at given times, each
with its own output length if given, and closed-loop synthetic agent sessions, alone
or mixed in), how the cluster is perturbed (a pool losing workers, slower storage, a
longer observation lag, a biased predictor), which controller runs, and the seed. `run_scenario` replays it in virtual time; `save`/`load` write it as JSON so a
failing example can be replayed with `tokenfactory replay --from-counterexample FILE`.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.predictor import PredictorSettings
from orchestrator.plugins import load_policy
from orchestrator.run.replay import Orchestrator, ReplayResult
from traces.model import Call, Session
from traces.replay import LoadOptions
from workers.clock import VirtualClock
from workers.cluster_toml import cluster_from_dict, load_cluster

FORMAT_VERSION = 1
MAX_AGENT_DRAWS = 100_000  # sessions generated at most to find those within agent_max_tokens

# A small cluster that replays fast: one H200 node of prefill and midfill, one of decode.
KIT_CLUSTER = {
    "name": "kit-small",
    "pfs": {"capacity_gb": 100_000, "read_gb_per_s": 200, "write_gb_per_s": 100},
    "racks": [{"name": "r0", "cache_gb": 500, "cache_gb_per_s": 100}],
    "nodes": [
        {"name": "n0", "rack": "r0", "hardware": "h200", "gpus": 8, "dram_gb": 2000,
         "dram_gb_per_s": 200},
        {"name": "n1", "rack": "r0", "hardware": "h200", "gpus": 8, "dram_gb": 2000,
         "dram_gb_per_s": 200},
    ],
    "pools": [
        {"name": "prefill", "phase": "prefill", "nodes": ["n0"], "gpus": 4, "tp": 4,
         "precision": "bf16"},
        {"name": "midfill", "phase": "midfill", "nodes": ["n0"], "gpus": 4, "tp": 4,
         "precision": "bf16"},
        {"name": "decode", "phase": "decode", "nodes": ["n1"], "gpus": 8, "tp": 4,
         "precision": "bf16", "target_batch": 4},
    ],
}
KIT_MODEL = "llama-3.1-70b"


@dataclass(frozen=True)
class Scenario:
    controller: str = "buffered"  # a registered name or module:Class
    arrivals_s: tuple[float, ...] = ()  # open-loop single calls
    input_tokens: int = 2048
    output_tokens: int = 64
    output_tokens_each: tuple[int, ...] = ()  # per open-loop call; empty: output_tokens
    agent_sessions: int = 0  # closed-loop synthetic agent sessions (traces.synth)
    agent_calls: int = 8  # calls per agent session (the first ones)
    agent_seed: int = 0
    think_scale: float = 0.05
    sessions_per_hour: float = 3600.0  # agent session starts, unless agent_starts_s
    agent_starts_s: tuple[float, ...] = ()  # one start per agent session, among the arrivals
    # Skip generated agent sessions with a call longer than this (input plus output
    # tokens; 0: keep every one). The overload strategy sets the model's context window.
    agent_max_tokens: int = 0
    lose_workers: tuple[tuple[float, str, int], ...] = ()  # (time_s, pool, workers) drained
    storage_slowdown: float = 1.0  # host memory and file system bandwidth divided by this
    observation_lag_s: float = 2.0
    predictor_error: float = 1.0  # the orchestrator's model of step times, biased by this
    realloc: bool = False
    hysteresis: bool = True
    seed: int = 0
    deadline_s: float = 1800.0  # calls still in flight then count as not completed
    cluster: str = ""  # a preset or TOML path; empty: the kit's small cluster
    model: str = KIT_MODEL
    extra: dict = field(default_factory=dict)  # ControlConfig fields to override

    def control(self) -> ControlConfig:
        return ControlConfig(observation_lag_s=self.observation_lag_s,
                             batch_change_interval_s=max(10.0, self.observation_lag_s + 1.0),
                             realloc_enabled=self.realloc, hysteresis=self.hysteresis,
                             **self.extra)

    def __post_init__(self) -> None:
        if self.output_tokens_each and len(self.output_tokens_each) != len(self.arrivals_s):
            raise ValueError(f"output_tokens_each: {len(self.output_tokens_each)} lengths for "
                             f"{len(self.arrivals_s)} arrivals")
        if self.agent_starts_s and len(self.agent_starts_s) != self.agent_sessions:
            raise ValueError(f"agent_starts_s: {len(self.agent_starts_s)} starts for "
                             f"{self.agent_sessions} agent sessions")
        if self.agent_sessions and self.arrivals_s and not self.agent_starts_s:
            raise ValueError("agent sessions mixed with arrivals need agent_starts_s")
        PredictorSettings(error=self.predictor_error)  # raises ValueError naming it

    def sessions(self) -> list[Session]:
        """Agent sessions and open-loop calls, in start order."""
        out = []
        if self.agent_sessions:
            import numpy as np

            from traces.synth import generate

            rng = np.random.default_rng(self.agent_seed)
            if self.agent_max_tokens:
                fits = (s for s in generate(MAX_AGENT_DRAWS, rng)
                        if max(c.input_tokens + c.output_tokens for c in s.calls[:self.agent_calls])
                        <= self.agent_max_tokens)
                agents = list(itertools.islice(fits, self.agent_sessions))
            else:
                agents = list(generate(self.agent_sessions, rng))
            starts = self.agent_starts_s or (None,) * self.agent_sessions
            out = [replace(s, calls=s.calls[:self.agent_calls], start_s=start)
                   for s, start in zip(agents, starts, strict=True)]
        per = self.input_tokens // 64
        # Block ids apart from the agent sessions' (traces.synth counts from 1 up to 2**40).
        base = 1 << 41 if self.agent_sessions else 0
        outputs = self.output_tokens_each or (self.output_tokens,) * len(self.arrivals_s)
        for i, (t, output) in enumerate(zip(self.arrivals_s, outputs, strict=True)):
            blocks = tuple(range(base + (i << 20), base + (i << 20) + per))
            call = Call(f"c{i}", 0, self.input_tokens, 0, self.input_tokens, int(output),
                        0.0, False, False, 64, blocks, arrival_s=float(t))
            out.append(Session(f"c{i}", "scenario", float(t), (call,)))
        if self.agent_starts_s:
            out.sort(key=lambda s: s.start_s)
        return out

    def load(self) -> LoadOptions:
        if self.agent_sessions:
            rate = None if self.agent_starts_s else self.sessions_per_hour
            return LoadOptions(sessions_per_hour=rate, think_scale=self.think_scale)
        return LoadOptions()

    def cluster_dict(self) -> dict:
        data = copy.deepcopy(KIT_CLUSTER)
        if self.storage_slowdown != 1.0:
            for node in data["nodes"]:
                node["dram_gb_per_s"] /= self.storage_slowdown
            for key in ("read_gb_per_s", "write_gb_per_s"):
                data["pfs"][key] /= self.storage_slowdown
        return data

    def brief(self) -> str:
        """A few words on what the scenario holds (a failure's message names its file
        rather than printing every arrival)."""
        parts = []
        if self.arrivals_s:
            outputs = self.output_tokens_each or (self.output_tokens,)
            lo, hi = min(outputs), max(outputs)
            parts.append(f"{len(self.arrivals_s)} open-loop calls over "
                         f"{self.arrivals_s[-1] - self.arrivals_s[0]:.0f} s, outputs "
                         f"{lo if lo == hi else f'{lo}-{hi}'} tokens")
        if self.agent_sessions:
            parts.append(f"{self.agent_sessions} agent session(s) of {self.agent_calls} calls")
        if self.lose_workers:
            parts.append(", ".join(f"{n} {pool} worker(s) lost at {t:.0f} s"
                                   for t, pool, n in self.lose_workers))
        parts.append(f"lag {self.observation_lag_s:g} s")
        return "; ".join(parts)

    def _repr_pretty_(self, p, cycle) -> None:
        # Hypothesis (and IPython) print a drawn scenario this way: briefly, not every
        # arrival time.
        p.text(f"Scenario({self.controller!r}: {self.brief()})")

    def save(self, path: Path) -> Path:
        """As JSON, a field a line (lists on one line: the file stays small)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"tokenfactory_counterexample": FORMAT_VERSION, **asdict(self)}
        lines = [f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}"
                 for k, v in data.items()]
        path.write_text("{\n" + ",\n".join(lines) + "\n}\n")
        return path

    @classmethod
    def load_file(cls, path: Path) -> Scenario:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or data.pop("tokenfactory_counterexample",
                                                  None) != FORMAT_VERSION:
            raise ValueError(f"{path}: not a tokenfactory counterexample (version "
                             f"{FORMAT_VERSION})")
        values = {k: tuple(tuple(x) if isinstance(x, list) else x for x in v)
                  if isinstance(v, list) else v for k, v in data.items()}
        for f in fields(cls):
            if f.name in values:
                _check_value(f.name, f.type, values[f.name])
        return cls(**values)


_NUMBER_TYPES = {"int": (int,), "float": (int, float), "tuple[int, ...]": (int,),
                 "tuple[float, ...]": (int, float)}


def _check_value(name: str, annotation: str, value: object) -> None:
    """A hand-edited counterexample's field of the wrong kind is refused by name: numbers
    (alone or in a flat tuple) are finite and >= 0, strings and flags of their own type."""
    if annotation in ("str", "bool", "dict"):
        kind = {"str": str, "bool": bool, "dict": dict}[annotation]
        if not isinstance(value, kind):
            raise ValueError(f"{name}: expected a {annotation}, got {value!r}")
        return
    if annotation not in _NUMBER_TYPES:
        return
    items = value if annotation.startswith("tuple") else (value,)
    if not isinstance(items, tuple):
        raise ValueError(f"{name}: expected a list of numbers, got {value!r}")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, _NUMBER_TYPES[annotation]) \
                or not math.isfinite(item) or item < 0:
            kind = "an integer" if "int" in annotation else "a number"
            raise ValueError(f"{name}: expected {kind} >= 0, got {item!r}")


class _WorkerLoss:
    """Listener that drains workers of a pool at given times (capacity lost, work kept)."""

    def __init__(self, losses: tuple[tuple[float, str, int], ...]):
        self.pending = sorted(losses)

    def on_sample(self, orch, obs, now_s: float) -> None:
        while self.pending and self.pending[0][0] <= now_s:
            _, pool, count = self.pending.pop(0)
            workers = [w for w in (*orch.runtime.fill_workers.values(),
                                   *orch.runtime.decode_workers.values())
                       if w.spec.pool == pool and w.accepting]
            for w in workers[1:][:count]:  # a pool keeps at least one worker
                w.accepting = False


def run_scenario(scenario: Scenario, policy=None, listeners=()) -> ReplayResult:
    """Replay `scenario`; `policy` (an AdmissionPolicy object) overrides its controller;
    `listeners`: observers of the run (`Orchestrator`'s hooks), added to its own."""
    model = load_model(scenario.model)
    spec = (load_cluster(scenario.cluster) if scenario.cluster
            else cluster_from_dict(scenario.cluster_dict(), "kit-small"))
    bound = spec.bind(model)
    control = scenario.control()
    target = next(p.batch.target_batch for p in spec.pools if p.phase.name == "DECODE")
    chosen = policy if policy is not None else load_policy(scenario.controller, control, target)
    own = [_WorkerLoss(scenario.lose_workers)] if scenario.lose_workers else []
    orch = Orchestrator(bound, scenario.sessions(), chosen, control, scenario.load(),
                        scenario.seed, listeners=[*own, *listeners], deadline_s=scenario.deadline_s,
                        predictor=PredictorSettings(error=scenario.predictor_error))
    result = VirtualClock().run(orch.run())
    result.scenario = scenario
    return result
