"""A plug-in's mistakes during a run are one line naming it, exit status 2, nothing written.

Each case is a user's module in the current directory, run through the command line's
`main()`; one runs as a process (`python -P`, as the console script does), to show
that nothing else reaches stderr (no asyncio traceback, no "exception never
retrieved" at exit).
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokenfactory
from orchestrator.cli import main
from orchestrator.run.plugin_checks import PolicyError, checked_route
from tokenfactory import (
    AdmissionDecision,
    AdmissionReason,
    DecisionError,
    FillCandidate,
    Move,
    ReallocDecision,
    ReallocReason,
)

ROOT = Path(__file__).resolve().parents[2]
TRACE = str(ROOT / "traces/sample/trace_0009.json.gz")  # one session: a run of ~0.2 s
RUN = [TRACE, "--max-sessions", "1", "--think-scale", "0.01", "--no-progress"]

USER_MODULE = '''
from tokenfactory import (AdmissionDecision, AdmissionReason, Move, ReallocDecision,
                          ReallocReason)


class Controller:
    name = "mine"
    decision = dict(admit=1, reason=AdmissionReason.HOLD)

    def __init__(self, config):
        pass

    def decide(self, obs, now_s):
        return AdmissionDecision(**self.decision)  # (decide)


class Negative(Controller):
    decision = dict(admit=-1, reason=AdmissionReason.HOLD)


class Fraction(Controller):
    decision = dict(admit=2.5, reason=AdmissionReason.HOLD)


class StringReason(Controller):
    decision = dict(admit=1, reason="hold")


class ZeroBatch(Controller):
    decision = dict(admit=1, reason=AdmissionReason.HOLD, decode_target_batch=0)


class NanThreshold(Controller):
    decision = dict(admit=1, reason=AdmissionReason.HOLD, reject_ttft_above_s=float("nan"))


class Typo(Controller):
    def decide(self, obs, now_s):
        backlog = len(obs.backlgo) if obs else 0  # (typo)
        return AdmissionDecision(admit=backlog, reason=AdmissionReason.HOLD)


class Dict(Controller):
    def decide(self, obs, now_s):
        return {"admit": 1}


class Reallocator:
    name = "mover"

    def __init__(self, config):
        pass

    def decide(self, obs, now_s):
        return self.decision()


class ToNowhere(Reallocator):
    def decision(self):
        return ReallocDecision(move=Move(from_pool="prefill", to_pool="nowhere"),
                               reason=ReallocReason.TO_FILL, imbalance=-0.5)


class StringMove(Reallocator):
    def decision(self):
        move = "prefill->decode"
        return ReallocDecision(move=move, reason=ReallocReason.TO_DECODE, imbalance=0.5)  # (move)


class Router:
    name = "lost"

    def __init__(self, config=None):
        pass

    def choose(self, prefix_tokens, candidates, prefix_nodes):
        return "no-such-worker"


class RaisingRouter(Router):
    def choose(self, prefix_tokens, candidates, prefix_nodes):
        return candidates[99].name  # (router)
'''


def line(marker: str) -> str:
    """Where the user's module says `# (marker)`: as the error should name it."""
    lines = USER_MODULE.lstrip("\n").splitlines()
    return f"(mistakes.py, line {next(i for i, t in enumerate(lines, 1) if f'# ({marker})' in t)})"


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """The user's module `mistakes` in the current directory (as `--controller
    mistakes:Class` finds it), and the module forgotten afterwards."""
    (tmp_path / "mistakes.py").write_text(USER_MODULE.lstrip("\n"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [*sys.path])  # the loader adds the directory to it
    yield tmp_path
    sys.modules.pop("mistakes", None)


CASES = [
    (["--controller", "mistakes:Negative"],
     "controller 'mine' made a bad decision: admit: expected an integer >= 0, got -1 "
     f"{line('decide')}"),
    (["--controller", "mistakes:Fraction"],
     "controller 'mine' made a bad decision: admit: expected an integer >= 0, got 2.5 "
     f"{line('decide')}"),
    (["--controller", "mistakes:StringReason"],
     "controller 'mine' made a bad decision: reason: expected an AdmissionReason, got 'hold' "
     f"{line('decide')}"),
    (["--controller", "mistakes:ZeroBatch"],
     "controller 'mine' made a bad decision: decode_target_batch: expected an integer >= 1, "
     f"got 0 {line('decide')}"),
    (["--controller", "mistakes:NanThreshold"],
     "controller 'mine' made a bad decision: reject_ttft_above_s: expected a number of "
     f"seconds >= 0 (or None), got nan {line('decide')}"),
    (["--controller", "mistakes:Typo"],
     "controller 'mine' raised AttributeError: 'Observation' object has no attribute "
     f"'backlgo' {line('typo')}"),
    (["--controller", "mistakes:Dict"],
     "controller 'mine' returned dict, not an AdmissionDecision"),
    (["--reallocator", "mistakes:ToNowhere", "--slow-period", "10"],
     "reallocator 'mover' made a bad decision: move.to_pool: the cluster has no pool "
     "'nowhere' (its pools: decode, midfill, prefill)"),
    (["--reallocator", "mistakes:StringMove", "--slow-period", "10"],
     "reallocator 'mover' made a bad decision: move: expected a Move or None, got "
     f"'prefill->decode' {line('move')}"),
    (["--router", "mistakes:Router"],
     "router 'lost' chose 'no-such-worker': expected the name of one of its candidates or "
     "None"),
    (["--router", "mistakes:RaisingRouter"],
     f"router 'lost' raised IndexError: list index out of range {line('router')}"),
]


@pytest.mark.parametrize(("options", "message"), CASES, ids=[c[0][1] for c in CASES])
def test_a_plug_ins_mistake_is_one_line_naming_it(user_dir, capsys, options, message):
    out = user_dir / "run"
    trace_events = user_dir / "trace.json"
    code = main(["replay", *options, *RUN, "--out", str(out),
                 "--trace-events", str(trace_events)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith("tokenfactory replay: error: ")
    assert captured.err == f"tokenfactory replay: error: {message}\n"
    assert captured.out == ""
    # Nothing written: neither --out (nor its temporary directory) nor --trace-events.
    assert sorted(p.name for p in user_dir.iterdir() if p.name != "__pycache__") == [
        "mistakes.py"]


def test_as_a_process_the_mistake_is_the_only_line_on_stderr(user_dir):
    """`python -P`: the current directory is not on sys.path, as for the console script;
    the controller is found by orchestrator.plugins."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-P", "-m", "orchestrator.cli", "replay",
                           "--controller", "mistakes:Negative", *RUN, "--out", "run"],
                          cwd=user_dir, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr == ("tokenfactory replay: error: controller 'mine' made a bad decision: "
                           f"admit: expected an integer >= 0, got -1 {line('decide')}\n")
    assert not (user_dir / "run").exists()


# -- the decisions refuse wrong shapes where they are built -----------------------------

@pytest.mark.parametrize(("fields", "message"), [
    ({"admit": -1}, "admit: expected an integer >= 0, got -1"),
    ({"admit": 2.5}, "admit: expected an integer >= 0, got 2.5"),
    ({"admit": True}, "admit: expected an integer >= 0, got True"),
    ({"admit": "3"}, "admit: expected an integer >= 0, got '3'"),
    ({"reason": "hold"}, "reason: expected an AdmissionReason, got 'hold'"),
    ({"decode_target_batch": 0}, "decode_target_batch: expected an integer >= 1, got 0"),
    ({"decode_target_batch": 4.0}, "decode_target_batch: expected an integer >= 1, got 4.0"),
    ({"background_limit": -2}, "background_limit: expected an integer >= 0, got -2"),
    ({"reject_ttft_above_s": -1.0}, "reject_ttft_above_s: expected a number of seconds >= 0"),
    ({"reject_ttft_above_s": "5"}, "reject_ttft_above_s: expected a number of seconds >= 0"),
])
def test_an_admission_decision_of_the_wrong_shape_names_the_field_and_value(fields, message):
    with pytest.raises(DecisionError) as info:
        AdmissionDecision(**{"admit": 1, "reason": AdmissionReason.HOLD, **fields})
    assert str(info.value).startswith(message)
    assert isinstance(info.value, ValueError)  # as before DecisionError existed


def test_numpy_integers_are_integers_and_are_stored_as_ints():
    d = AdmissionDecision(admit=np.int64(3), reason=AdmissionReason.HOLD,
                          decode_target_batch=np.int32(8), background_limit=np.uint8(1),
                          reject_ttft_above_s=np.float64(2.5))
    assert (d.admit, d.decode_target_batch, d.background_limit) == (3, 8, 1)
    assert type(d.admit) is int and type(d.decode_target_batch) is int
    assert d == AdmissionDecision(admit=3, reason=AdmissionReason.HOLD, decode_target_batch=8,
                                  background_limit=1, reject_ttft_above_s=2.5)
    assert AdmissionDecision(admit=0, reason=AdmissionReason.HOLD,
                             reject_ttft_above_s=float("inf")).reject_ttft_above_s > 1e300


@pytest.mark.parametrize(("build", "message"), [
    (lambda: Move(from_pool="decode", to_pool="decode"),
     "move: from_pool and to_pool are both 'decode'"),
    (lambda: Move(from_pool=3, to_pool="decode"), "move.from_pool: expected a pool's name"),
    (lambda: ReallocDecision(move=None, reason="dead_band", imbalance=0.0),
     "reason: expected a ReallocReason, got 'dead_band'"),
    (lambda: ReallocDecision(move=None, reason=ReallocReason.DEAD_BAND, imbalance=float("nan")),
     "imbalance: expected a number, got nan"),
])
def test_a_realloc_decision_of_the_wrong_shape_names_the_field(build, message):
    with pytest.raises(DecisionError, match=None) as info:
        build()
    assert str(info.value).startswith(message)


def test_a_router_must_name_an_accepting_candidate():
    open_, draining = (FillCandidate(name=n, phase="prefill", node="n0", queued_tokens=0,
                                     accepting=a) for n, a in (("p0", True), ("p1", False)))
    assert checked_route("p0", tokenfactory, [open_, draining]) == "p0"
    assert checked_route(None, tokenfactory, [open_, draining]) is None
    with pytest.raises(PolicyError, match="chose 'p1', which takes no calls now"):
        checked_route("p1", tokenfactory, [open_, draining])
    with pytest.raises(PolicyError, match="chose 'p9': expected the name of one of its"):
        checked_route("p9", tokenfactory, [open_, draining])
