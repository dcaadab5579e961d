"""Import paths that moved still work, warn naming the new one, and give the same objects.

The table is `git log --diff-filter=R --summary` of ef2cb09 (the control core into
orchestrator/control/, the run shell into orchestrator/run/), and of the move of the
workers' walk out of the control core (orchestrator/control/snapshot.py into
orchestrator/run/sampler.py), written out here rather than read from
orchestrator._moved, so that dropping a shim fails a test.
"""

import importlib
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import tokenfactory
from orchestrator.control.config import ControlConfig
from orchestrator.plugins import load_policy

MOVED = {
    "orchestrator.config": "orchestrator.control.config",
    "orchestrator.observe": "orchestrator.control.observe",
    "orchestrator.policies": "orchestrator.control.policies",
    "orchestrator.policies.base": "orchestrator.control.policies.base",
    "orchestrator.policies.buffered": "orchestrator.control.policies.buffered",
    "orchestrator.policies.predictive": "orchestrator.control.policies.predictive",
    "orchestrator.policies.retire": "orchestrator.control.policies.retire",
    "orchestrator.realloc": "orchestrator.control.realloc",
    "orchestrator.router": "orchestrator.control.router",
    "orchestrator.snapshot": "orchestrator.run.sampler",
    "orchestrator.control.snapshot": "orchestrator.run.sampler",
    "orchestrator.stability": "orchestrator.control.stability",
    "orchestrator.demo": "orchestrator.run.demo",
    "orchestrator.metrics": "orchestrator.run.metrics",
    "orchestrator.metrics_listener": "orchestrator.run.metrics_listener",
    "orchestrator.openmetrics": "orchestrator.run.openmetrics",
    "orchestrator.output": "orchestrator.run.output",
    "orchestrator.reconfig": "orchestrator.run.reconfig",
    "orchestrator.replay": "orchestrator.run.replay",
    "orchestrator.report": "orchestrator.run.report",
    "orchestrator.result": "orchestrator.run.result",
    "orchestrator.series": "orchestrator.run.series",
    "orchestrator.sessions": "orchestrator.run.sessions",
    "orchestrator.summary": "orchestrator.run.summary",
    "orchestrator.tables": "orchestrator.run.tables",
    "orchestrator.trace_events": "orchestrator.run.trace_events",
}
# orchestrator/run.py became the package orchestrator/run/; what it defined (git show
# ef2cb09^:orchestrator/run.py) is in orchestrator.run.settings.
RUN_PY_NAMES = ("DEFAULT_MODEL", "DEFAULT_CLUSTER", "DEFAULT_CONTROLLER", "RunSettings",
                "Prepared", "prepare", "run_replay", "progress_bar")
# The plug-in names docs/plugins.md gave before the move, by their old paths.
DOCUMENTED_BEFORE = {
    "orchestrator.observe": ("Observation", "PoolObservation"),
    "orchestrator.config": ("ControlConfig",),
    "orchestrator.policies.base": ("AdmissionPolicy", "AdmissionDecision", "AdmissionReason"),
    "orchestrator.realloc": ("ReallocationPolicy", "ReallocDecision"),
    "orchestrator.router": ("RoutingPolicy",),
}
USER_FILE = "user_controller.py"  # where the importing code claims to live


def _import_as_a_user(statement: str, forget: tuple[str, ...]) -> tuple[dict, list]:
    """Run `statement` as the first line of a user's file, with the shims in `forget`
    imported afresh (so that they warn); the namespace and the warnings it raised."""
    for name in forget:
        sys.modules.pop(name, None)
    namespace: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(statement, USER_FILE, "exec"), namespace)
    return namespace, [w for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.fixture
def fresh_shims(monkeypatch):
    """Restores sys.modules' shim entries after the test pops them."""
    for old in MOVED:
        if old in sys.modules:
            monkeypatch.setitem(sys.modules, old, sys.modules[old])
    yield


@pytest.mark.parametrize(("old", "new"), MOVED.items(), ids=list(MOVED))
def test_an_old_path_warns_naming_the_new_one_and_gives_the_same_objects(fresh_shims, old,
                                                                          new):
    parents = tuple(p for p in MOVED if old.startswith(p + "."))
    namespace, caught = _import_as_a_user(f"import {old} as module", (old, *parents))
    ours = [w for w in caught if str(w.message).startswith(f"{old} moved to {new}:")]
    assert len(ours) == 1, [str(w.message) for w in caught]
    # stacklevel: the warning points at the user's import line, not at the shim.
    assert all((w.filename, w.lineno) == (USER_FILE, 1) for w in caught)
    module, target = namespace["module"], importlib.import_module(new)
    public = [n for n in vars(target) if not n.startswith("_")]
    assert public
    for name in public:
        assert getattr(module, name) is getattr(target, name), name
    assert set(public) <= set(dir(module))
    star: dict = {}
    exec(f"from {old} import *", star)  # what the new module's star import would give
    for name in getattr(target, "__all__", public):
        assert star[name] is getattr(target, name), name


@pytest.mark.parametrize(("old", "names"), DOCUMENTED_BEFORE.items(),
                         ids=list(DOCUMENTED_BEFORE))
def test_the_plug_in_names_documented_before_the_move_are_todays(fresh_shims, old, names):
    parents = tuple(p for p in MOVED if old.startswith(p + "."))
    namespace, caught = _import_as_a_user(f"from {old} import {', '.join(names)}",
                                          (old, *parents))
    assert caught and any("tokenfactory" in str(w.message) for w in caught)
    for name in names:
        assert namespace[name] is getattr(tokenfactory, name)


@pytest.mark.parametrize("name", RUN_PY_NAMES)
def test_what_orchestrator_run_py_defined_is_served_by_the_package(name):
    namespace, caught = _import_as_a_user(f"from orchestrator.run import {name}", ())
    assert caught and all(str(w.message) == f"orchestrator.run.{name} moved to "
                          f"orchestrator.run.settings.{name}: the old path is deprecated"
                          for w in caught)
    assert all((w.filename, w.lineno) == (USER_FILE, 1) for w in caught)
    settings = importlib.import_module("orchestrator.run.settings")
    assert namespace[name] is getattr(settings, name)


def test_the_package_still_refuses_names_it_never_had():
    import orchestrator.run

    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        orchestrator.run.nothing_here  # noqa: B018


def test_a_name_that_moved_on_again_is_still_served(fresh_shims):
    """orchestrator.replay had PolicyError; it now lives in orchestrator.run.plugin_checks."""
    namespace, _ = _import_as_a_user("from orchestrator.replay import PolicyError",
                                     ("orchestrator.replay",))
    from orchestrator.run.plugin_checks import PolicyError

    assert namespace["PolicyError"] is PolicyError


def test_a_deprecated_import_in_a_users_controller_is_shown_though_python_hides_them(
        tmp_path, monkeypatch):
    """Python shows a DeprecationWarning only when __main__ raises it; a controller's
    old import path is the user's to fix, so loading it shows theirs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [*sys.path])  # the loader adds the directory to it
    (tmp_path / "oldpaths.py").write_text(textwrap.dedent('''
        from orchestrator.policies.base import AdmissionDecision, AdmissionReason

        class Old:
            name = "old"
            def __init__(self, config):
                pass
            def decide(self, obs, now_s):
                return AdmissionDecision(0, AdmissionReason.HOLD)
    '''))
    for name in ("orchestrator.policies", "orchestrator.policies.base", "oldpaths"):
        sys.modules.pop(name, None)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("ignore", DeprecationWarning)  # Python's default here
            load_policy("oldpaths:Old", ControlConfig())
    finally:
        sys.modules.pop("oldpaths", None)
    shown = [(Path(w.filename).name, w.lineno, str(w.message)) for w in caught]
    assert ("oldpaths.py", 2, "orchestrator.policies.base moved to "
            "orchestrator.control.policies.base: the old path is deprecated; plug-ins import "
            "these names from tokenfactory") in shown


# costmodel/plan.py's public names before the GPU search and the shared values moved out
# (into costmodel/plan_search.py below it, costmodel/plan_values.py and
# costmodel/plan_arrangements.py below both), written out here for the same reason.
PLAN_MOVED = {
    **{name: "costmodel.plan_values" for name in (
        "ARRANGEMENTS", "AUTO", "CHECK_PERCENTILE", "DEFAULT_GRID", "DEFAULT_MEMORY_FRACTION",
        "MIXED", "THREE_POOL", "TWO_POOL", "Plan", "PlanError", "PoolPlan", "Targets",
        "WorkloadStats")},
    "MAX_SIZES_PER_POOL": "costmodel.plan_arrangements",
    "MAX_SEARCH_GPUS": "costmodel.plan_search",
    "Search": "costmodel.plan_search",
    "plan_for_rate": "costmodel.plan_search",
}


@pytest.mark.parametrize(("name", "new"), PLAN_MOVED.items(), ids=list(PLAN_MOVED))
def test_a_name_that_left_costmodel_plan_warns_and_is_the_same_object(name, new):
    namespace, caught = _import_as_a_user(f"from costmodel.plan import {name}", ())
    assert [str(w.message) for w in caught] == [
        f"costmodel.plan.{name} moved to {new}.{name}: the old path is deprecated"]
    assert all((w.filename, w.lineno) == (USER_FILE, 1) for w in caught)
    assert namespace[name] is getattr(importlib.import_module(new), name)


def test_costmodel_plan_keeps_plan_cluster_and_refuses_names_it_never_had():
    import costmodel.plan

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert callable(costmodel.plan.plan_cluster)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        costmodel.plan.nothing_here  # noqa: B018


def test_the_midfill_threshold_left_the_router_warns_and_is_the_same_value():
    namespace, caught = _import_as_a_user(
        "from orchestrator.control.router import MIDFILL_MIN_PREFIX_TOKENS", ())
    assert [str(w.message) for w in caught] == [
        "orchestrator.control.router.MIDFILL_MIN_PREFIX_TOKENS moved to "
        "costmodel.fill_phase.MIDFILL_MIN_PREFIX_TOKENS: the old path is deprecated"]
    assert all((w.filename, w.lineno) == (USER_FILE, 1) for w in caught)
    from costmodel.fill_phase import MIDFILL_MIN_PREFIX_TOKENS

    assert namespace["MIDFILL_MIN_PREFIX_TOKENS"] == MIDFILL_MIN_PREFIX_TOKENS
