"""The compiled core (native/): the guard's choice of source or compiled module, and the
same results compiled and as Python."""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import native
from benchmarks.check_identical import _first_diffs, _run_child, runs
from benchmarks.replay_runner import spec

ROOT = Path(__file__).resolve().parents[2]
# The compiled modules' file suffix on this interpreter (".cpython-311-x86_64-linux-gnu.so").
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _module(root: Path, name: str, compiled: bool = True) -> Path:
    """root/storage/<name>.py with a .pxd and (optionally) a 'compiled' file beside it,
    older or newer as the test sets their times."""
    folder = root / "storage"
    folder.mkdir(exist_ok=True)
    source = folder / f"{name}.py"
    source.write_text("x = 1\n")
    source.with_suffix(".pxd").write_text("")
    if compiled:
        (folder / f"{name}{SUFFIX}").write_bytes(b"")
    return source


def _age(path: Path, seconds: float) -> None:
    t = path.stat().st_mtime - seconds
    os.utime(path, (t, t))


def _so(source: Path) -> Path:
    return source.with_name(source.stem + SUFFIX)


class TestWhyPython:
    def test_fresh_compiled_copies_are_used(self, tmp_path):
        a, b = _module(tmp_path, "a"), _module(tmp_path, "b")
        for s in (a, b):
            _age(s, 10)
            _age(s.with_suffix(".pxd"), 10)
        assert native.declared(tmp_path) == [a, b]
        assert native.why_python([a, b], pure=False) is None

    def test_nothing_compiled_needs_no_guard(self, tmp_path):
        a = _module(tmp_path, "a", compiled=False)
        assert native.why_python([a], pure=False) is None

    def test_a_source_newer_than_its_copy_sends_all_to_python(self, tmp_path):
        a, b = _module(tmp_path, "a"), _module(tmp_path, "b")
        for s in (a, b):
            _age(s.with_suffix(".pxd"), 10)
        _age(a, 10)
        _age(_so(b), 20)  # b.py changed after b was compiled
        assert "older than b.py" in native.why_python([a, b], pure=False)

    def test_a_changed_pxd_counts(self, tmp_path):
        a = _module(tmp_path, "a")
        _age(a, 10)
        _age(_so(a), 5)  # the .pxd (just written) is newer than the copy
        assert "or its .pxd" in native.why_python([a], pure=False)

    def test_one_copy_missing_sends_all_to_python(self, tmp_path):
        a, b = _module(tmp_path, "a"), _module(tmp_path, "b", compiled=False)
        for s in (a, b):
            _age(s, 10)
            _age(s.with_suffix(".pxd"), 10)
        assert native.why_python([a, b], pure=False) == "b.py has no compiled copy"

    def test_pure_asks_for_python(self, tmp_path):
        a = _module(tmp_path, "a")
        assert native.why_python([a], pure=True) == "TOKENFACTORY_PURE is set"


def test_pure_requested_reads_the_environment():
    assert native.pure_requested({"TOKENFACTORY_PURE": "1"})
    assert not native.pure_requested({"TOKENFACTORY_PURE": "0"})
    assert not native.pure_requested({})


def _compiler() -> bool:
    return (shutil.which(sysconfig.get_config_var("CC").split()[0] or "cc") is not None
            and Path(sysconfig.get_paths()["include"], "Python.h").exists())


def _status(env: dict[str, str]) -> dict:
    code = "import json, native; print(json.dumps(native.status()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env=env, check=True)
    return json.loads(out.stdout)


def _envs() -> tuple[dict[str, str], dict[str, str]]:
    compiled = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    return compiled, {**compiled, native.PURE_ENV: "1"}


def _compiled_or_skip(env: dict[str, str]) -> None:
    """Skip where nothing could be compiled; fail where a compiler is there and the
    declared modules still run as Python (a failed or stale build)."""
    status = _status(env)
    assert status, "no module declares a .pxd"
    if not _compiler() and not any(v == "compiled" for v in status.values()):
        pytest.skip("no C compiler or Python headers here: the install is pure Python")
    assert all(v == "compiled" for v in status.values()), status


def test_the_guard_reads_every_module_as_python_when_asked():
    pure = _envs()[1]
    assert all(v == "python: TOKENFACTORY_PURE is set" for v in _status(pure).values())


def _same_both_ways(run: dict) -> None:
    compiled, pure = _envs()
    _compiled_or_skip(compiled)
    a = _run_child(run, compiled)["results"]
    b = _run_child(run, pure)["results"]
    assert a["calls"], "the run served no call"
    assert _first_diffs(a, b) == []


def test_compiled_and_python_give_the_same_replay():
    """Ten development sessions under `buffered`: every result, value for value."""
    from benchmarks.replay_runner import DEV_TRACES
    _same_both_ways(spec([DEV_TRACES], "weka", controller="buffered",
                         sessions_per_hour=240.0, max_sessions=10))


@pytest.mark.slow(seconds=30)
@pytest.mark.parametrize("name", ["dev113-buffered", "azure4000-retire"])
def test_compiled_and_python_give_the_same_replay_at_scale(name, tmp_path):
    _same_both_ways(runs(tmp_path)[name])  # (tmp_path: where the 16-rack plan would go)
