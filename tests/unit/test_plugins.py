"""Loading controllers, reallocators and routers by name or import path: one-line errors."""

import sys
import textwrap

import pytest

from orchestrator.cli import main
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies.base import AdmissionPolicy, PluginError
from orchestrator.control.realloc import ReallocationPolicy
from orchestrator.control.router import RoutingPolicy
from orchestrator.plugins import load, load_policy, registered


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A user's package, importable from the current directory."""
    (tmp_path / "mypolicies.py").write_text(textwrap.dedent('''
        from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason

        class Always:
            name = "always"
            def __init__(self, config):
                pass
            def decide(self, obs, now_s):
                return AdmissionDecision(2, AdmissionReason.HOLD)

        class NoDecide:
            name = "nodecide"
            def __init__(self, config):
                pass

        class Sees(Always):
            name = "sees"
            observes = frozenset({"fill_backlog", "gpu_temperature"})

        class Exploding:
            def __init__(self, config):
                raise RuntimeError("boom")

        NOT_CALLABLE = 3
    '''))
    (tmp_path / "broken.py").write_text("1 / 0\n")
    monkeypatch.chdir(tmp_path)
    yield "mypolicies"
    sys.modules.pop("mypolicies", None)


def test_builtins_are_registered_entry_points_and_satisfy_the_interfaces():
    assert {"retire", "buffered", "predictive"} <= set(registered("controller"))
    for name in ("retire", "buffered", "predictive"):
        assert isinstance(load_policy(name, ControlConfig()), AdmissionPolicy)
    assert isinstance(load("reallocator", "hysteresis", ControlConfig()), ReallocationPolicy)
    assert isinstance(load("router", "prefix-affinity", ControlConfig()), RoutingPolicy)


def test_a_users_policy_loads_by_import_path(user_module):
    policy = load_policy(f"{user_module}:Always", ControlConfig())
    assert policy.name == "always"


def test_a_users_policy_loads_from_a_file_anywhere(tmp_path, monkeypatch):
    """`file.py:Class`, relative to the current directory or absolute; two files of one
    name in different folders are two modules."""
    for folder, name in (("a", "first"), ("b", "second")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "policy.py").write_text(textwrap.dedent(f'''
            from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason

            class Mine:
                name = "{name}"
                def __init__(self, config):
                    pass
                def decide(self, obs, now_s):
                    return AdmissionDecision(1, AdmissionReason.HOLD)
        '''))
    monkeypatch.chdir(tmp_path)
    first = load_policy("a/policy.py:Mine", ControlConfig())
    second = load_policy(f"{tmp_path / 'b' / 'policy.py'}:Mine", ControlConfig())
    assert (first.name, second.name) == ("first", "second")
    assert isinstance(first, AdmissionPolicy) and type(first) is not type(second)
    assert "policy" not in sys.modules  # no module of the bare file name was put in place


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nosuchpkg.mod:Cls", "controller 'nosuchpkg.mod:Cls': cannot import 'nosuchpkg.mod'"),
        ("mypolicies:Missing", "controller 'mypolicies:Missing': 'mypolicies' has no attribute "
                               "'Missing'"),
        ("mypolicies:NOT_CALLABLE", "int is not callable"),
        ("mypolicies:NoDecide", "NoDecide has no decide(observation, now_s) method"),
        ("mypolicies:Exploding", "constructing it raised RuntimeError: boom"),
        ("mypolicies:Sees", "controller 'mypolicies:Sees': Sees.observes names unknown "
                            "facts ['gpu_temperature']; known: ['fill_backlog', 'kv_links', "
                            "'queue_pools']"),
        ("mypolicies.py:Sees", "controller 'mypolicies.py:Sees': Sees.observes names unknown "
                               "facts ['gpu_temperature']"),
        ("nosuch.py:Cls", "controller 'nosuch.py:Cls': cannot import 'nosuch.py': no file "
                          "'nosuch.py'"),
        ("mypolicies.py:Missing", "controller 'mypolicies.py:Missing': 'mypolicies.py' has "
                                  "no attribute 'Missing'"),
        ("broken.py:Cls", "controller 'broken.py:Cls': importing 'broken.py' raised "
                          "ZeroDivisionError: division by zero"),
        ("pid", "unknown controller 'pid'; known: admit-all, binding, buffered, local, predictive, retire"),
    ],
)
def test_loading_errors_name_the_policy(user_module, spec, message):
    with pytest.raises(PluginError, match=None) as info:
        load_policy(spec, ControlConfig())
    assert message in str(info.value) and "\n" not in str(info.value)


def test_cli_reports_plugin_errors_in_one_line_and_writes_nothing(user_module, tmp_path,
                                                                 capsys):
    out = tmp_path / "run"
    code = main(["replay", "--controller", "mypolicies:NoDecide", "--out", str(out),
                 "--max-sessions", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "mypolicies:NoDecide" in err
    assert not out.exists()


def test_cli_runs_a_users_policy_and_names_it_in_the_summary(user_module, capsys):
    code = main(["replay", "--controller", "mypolicies:Always", "--max-sessions", "1",
                 "--think-scale", "0.01", "--json", "--no-progress", "--no-realloc"])
    assert code == 0
    import json

    summary = json.loads(capsys.readouterr().out)
    assert summary["controller"] == "mypolicies:Always" and summary["requests"]["lost"] == 0


def test_unknown_reallocator_and_router(capsys):
    for option, kind in (("--reallocator", "reallocator"), ("--router", "router")):
        code = main(["replay", option, "nope", "--max-sessions", "1", "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and f"unknown {kind} 'nope'" in err
