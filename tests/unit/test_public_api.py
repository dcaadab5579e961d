"""The plug-in API, `tokenfactory`: its names are pinned, and they are the implementations.

Removing a name, or adding one, fails `test_the_public_names_are_pinned`: a name leaves
the API only through a release in which it warns (DESIGN.md, docs/plugins.md), and one
joins it on purpose, with this list.
"""

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import tokenfactory

ROOT = Path(__file__).resolve().parents[2]

# name -> the module that implements it (where `tokenfactory` re-exports it from).
PUBLIC = {
    "AdmissionDecision": "orchestrator.control.policies.base",
    "AdmissionPolicy": "orchestrator.control.policies.base",
    "AdmissionReason": "orchestrator.control.policies.base",
    "ControlConfig": "orchestrator.control.config",
    "DecisionError": "orchestrator.control.policies.base",
    "FillCandidate": "orchestrator.control.router",
    "LoopModel": "orchestrator.control.stability",
    "Move": "orchestrator.control.realloc",
    "Observation": "orchestrator.control.observe",
    "PoolObservation": "orchestrator.control.observe",
    "ReallocDecision": "orchestrator.control.realloc",
    "ReallocReason": "orchestrator.control.realloc",
    "ReallocationPolicy": "orchestrator.control.realloc",
    "RoutingPolicy": "orchestrator.control.router",
    "is_midfill": "costmodel.fill_phase",
}
KIT_MODULES = ("checks", "properties", "scenario", "scopes", "strategies")
# What docs/plugins.md shows of the kit: each must stay reachable under tokenfactory.kit.
KIT_NAMES = {
    "properties": ("bounded_buffers", "no_loss", "no_flapping", "oscillation_below",
                   "starvation_below"),
    "checks": ("StabilityViolation", "PropertyFailed", "bounded_buffers", "no_loss",
               "no_reconfiguration_in_dead_band", "no_faster_than_dwell",
               "oscillation_below", "starvation_below"),
    "scenario": ("Scenario", "run_scenario", "KIT_CLUSTER"),
    "scopes": ("OverloadScope", "scoped_scenarios"),
    "strategies": ("scenarios", "overload_scenarios", "open_loop_arrivals", "output_lengths",
                   "agent_load", "perturbations", "without_lulls", "capacity_calls_per_s",
                   "longest_cold_fill_tokens"),
}


def test_the_public_names_are_pinned():
    assert sorted(tokenfactory.__all__) == sorted(PUBLIC)
    assert len(set(tokenfactory.__all__)) == len(tokenfactory.__all__)
    namespace: dict = {}
    exec("from tokenfactory import *", namespace)
    assert set(PUBLIC) <= set(namespace)


def test_each_public_name_is_its_implementation_not_a_copy():
    for name, module in PUBLIC.items():
        implementation = getattr(importlib.import_module(module), name)
        assert getattr(tokenfactory, name) is implementation, name


def test_the_kit_modules_are_the_kits_own():
    import tokenfactory.kit.properties as by_path

    assert by_path is importlib.import_module("orchestrator.kit.properties")
    for module in KIT_MODULES:
        ours = importlib.import_module(f"tokenfactory.kit.{module}")
        assert ours is importlib.import_module(f"orchestrator.kit.{module}")
        assert getattr(tokenfactory.kit, module) is ours
        missing = [n for n in KIT_NAMES[module] if not hasattr(ours, n)]
        assert not missing, f"tokenfactory.kit.{module} lacks {missing}"


def test_import_tokenfactory_needs_no_dev_dependency():
    """`pip install tokenfactory` has no Hypothesis: the interfaces import without it;
    the kit, which needs it, says so when named."""
    code = ("import sys; sys.modules['hypothesis'] = None\n"  # None: importing it fails
            "import tokenfactory\n"
            "assert tokenfactory.AdmissionDecision and tokenfactory.Observation\n"
            "try:\n"
            "    import tokenfactory.kit\n"
            "except ImportError as exc:\n"
            "    print('kit:', exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "kit:" in done.stdout and "hypothesis" in done.stdout


def _imported_modules(source: str) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_the_example_and_the_docs_plug_in_code_use_only_tokenfactory():
    sources = {"examples/pi_admission.py": (ROOT / "examples/pi_admission.py").read_text()}
    for doc in ("docs/plugins.md", "README.md"):
        blocks = re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S)
        sources.update({f"{doc} block {i}": block for i, block in enumerate(blocks)})
    assert len(sources) >= 3  # the example, the import line and the kit's test file
    for where, source in sources.items():
        internal = {m for m in _imported_modules(source) if m.split(".")[0] == "orchestrator"}
        assert not internal, f"{where} imports {sorted(internal)}: use tokenfactory"
    assert "tokenfactory" in _imported_modules(sources["examples/pi_admission.py"])


MY_CONTROLLER = '''
from tokenfactory import AdmissionDecision, AdmissionReason, ControlConfig, Observation


class Mine:
    """Admits one call a period once it sees the cluster."""

    name = "mine"

    def __init__(self, config: ControlConfig) -> None:
        self.period_s = config.fast_period_s

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        if obs is None:
            return AdmissionDecision(admit=0, reason=AdmissionReason.NO_OBSERVATION)
        return AdmissionDecision(admit=1, reason=AdmissionReason.RESERVED)
'''


def test_a_controller_in_the_current_directory_is_found_by_module_and_class(tmp_path):
    """As a user runs it: my_ctrl.py in an empty folder, `tokenfactory replay --controller
    my_ctrl:Mine` there. `python -P` leaves the current directory off sys.path, as the
    console script does; only orchestrator.plugins puts it there."""
    (tmp_path / "my_ctrl.py").write_text(MY_CONTROLLER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-P", "-m", "orchestrator.cli", "replay",
         str(ROOT / "traces/sample/trace_0009.json.gz"), "--controller", "my_ctrl:Mine",
         "--max-sessions", "1", "--think-scale", "0.01", "--no-realloc", "--no-progress",
         "--json", "--out", "run"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no DeprecationWarning: it uses tokenfactory only
    summary = json.loads(done.stdout)
    assert summary["controller"] == "my_ctrl:Mine" and summary["requests"]["lost"] == 0
    assert summary["requests"]["completed"] > 0
    # The decisions were its own: its name, and the reasons only it gives.
    decisions = [json.loads(line) for line in
                 (tmp_path / "run" / "decisions.jsonl").read_text().splitlines()]
    assert {d["controller"] for d in decisions} == {"mine"}
    assert {d["reason"] for d in decisions} == {"no_observation", "reserved"}
