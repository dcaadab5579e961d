"""Grid files: parsing, the checks made before anything runs, point ids, the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.sweeps.grid import GridError, parse_grid, point_id
from orchestrator.sweeps.point import build_tasks
from orchestrator.sweeps.store import flatten, table_rows


def grid(text: str, base: Path = Path(".")):
    return parse_grid(text, "g.toml", base)


def test_every_combination_in_file_order():
    g = grid('controller = ["retire", "buffered"]\nseed = [0, 1, 2]\n')
    points = g.points()
    assert len(g) == 6 == len(points)
    assert points[0] == {"controller": "retire", "seed": 0}
    assert points[-1] == {"controller": "buffered", "seed": 2}


def test_scalars_tables_and_pool_overrides_are_read():
    g = grid('seed = 3\nbacklog_gain = [0.2, 0.5]\n[pool.decode]\ntp = [4, 8]\n')
    assert g.keys == ("seed", "backlog_gain", "pool.decode.tp")
    assert len(g) == 4
    assert grid('"pool.decode.gpus" = [16]\n').keys == ("pool.decode.gpus",)


def test_numbers_are_normalised_so_equal_grids_hash_equal():
    a = grid('sessions_per_hour = [100]\nseed = [0]\n')
    b = grid('seed = [0]\nsessions_per_hour = [100.0]\n')
    assert a.digest() == b.digest()
    assert point_id({"seed": 0, "x": 1}) == point_id({"x": 1, "seed": 0})


@pytest.mark.parametrize("text, words", [
    ("", "empty grid"),
    ("seed = []", "empty list"),
    ("sede = [0]", "unknown key 'sede'; known: model, cluster"),
    ("pool.decode.colour = [1]", "unknown key 'pool.decode.colour'"),
    ("seed = [-1]", "key 'seed': bad value -1"),
    ("seed = [0.5]", "key 'seed': bad value 0.5: expected an integer"),
    ("think_scale = ['fast']", "key 'think_scale': bad value 'fast'"),
    ("no_realloc = [1]", "key 'no_realloc': bad value 1: expected true or false"),
    ("sessions_per_hour = [0]", "expected a number > 0"),
    ("shared_prefix_tokens = [-1]", "key 'shared_prefix_tokens': bad value -1"),
    ("seed = [1, 1]", "appears twice"),
    ("seed = [", "invalid TOML"),
])
def test_bad_grids_are_refused_with_the_key_and_value(text, words):
    with pytest.raises(GridError) as info:
        grid(text)
    assert words in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text, words", [
    ('controller = ["retire", "nope"]', "key 'controller': bad value 'nope': unknown controller"),
    ('cluster = ["nope"]', "key 'cluster': bad value 'nope': unknown cluster"),
    ('model = ["nope"]', "key 'model': bad value 'nope'"),
    ('cluster = ["b200x8"]\n"pool.nope.gpus" = [16]', "has no pool 'nope'"),
    ('cluster = ["b200x8"]\n"pool.decode.gpus" = [24]', "pool.decode.gpus=24"),
    ("fast_period = [10.0]", "fast loop"),
    ('router = ["nope"]', "key 'router': bad value 'nope'"),
    ('reallocator = ["nope"]', "key 'reallocator': bad value 'nope'"),
    ('mtp = [1]\n"pool.decode.mtp" = [2]', "keys 'mtp' and 'pool.NAME.mtp' both set"),
])
def test_points_that_cannot_be_built_are_refused_before_running(text, words):
    with pytest.raises(GridError) as info:
        build_tasks(grid(text))
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_pool_overrides_derive_a_cluster():
    tasks = build_tasks(grid('cluster = ["b200x8"]\n"pool.decode.tp" = [4, 8]\n'))
    assert [t.cluster.pool("decode").layout.tp for t in tasks] == [4, 8]
    assert tasks[0].point_id != tasks[1].point_id


def test_cluster_paths_are_relative_to_the_grid_file(tmp_path):
    from workers.cluster_toml import DATA_DIR

    (tmp_path / "mine.toml").write_text((DATA_DIR / "b200x8.toml").read_text())
    tasks = build_tasks(parse_grid('cluster = ["mine.toml"]', "g.toml", tmp_path))
    assert tasks[0].cluster.name == "b200x8"


def test_table_rows_flatten_summaries_and_keep_grid_order():
    g = grid('controller = ["retire", "buffered"]\n')
    recs = {}
    for values, p99 in zip(reversed(g.points()), (2.0, 1.0), strict=True):
        pid = point_id(values)
        recs[pid] = {"point_id": pid, "summary": {"controller": values["controller"],
                                                   "ttft_s": {"p99": p99}}, "error": None}
    columns, rows = table_rows(g, recs)
    assert columns == ["controller", "point_id", "summary.controller", "ttft_s.p99", "error"]
    assert [r["controller"] for r in rows] == ["retire", "buffered"]
    assert flatten({"a": {"b": {"c": 1}}, "d": 2}) == {"a.b.c": 1, "d": 2}


def test_cli_bad_grid_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "g.toml"
    path.write_text("sede = [0]\n")
    assert main(["sweep-replay", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key 'sede'" in err
    assert not (tmp_path / "o").exists()
    assert main(["sweep-replay", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_predictor_keys_reach_the_settings():
    tasks = build_tasks(grid("predictor_error = [0.7, 1.3]\npredictor_learning = [0]\n"))
    assert [t.settings.predictor.error for t in tasks] == [0.7, 1.3]
    assert {t.settings.predictor.learn for t in tasks} == {0.0}
    with pytest.raises(GridError, match="'predictor_learning': bad value 2"):
        grid("predictor_learning = [2]")


def test_a_load_is_session_starts_relative_to_the_clusters_planned_capacity():
    from orchestrator.run.capacity import planned_capacity
    from traces import read_sessions, sample_path

    sessions = tuple(read_sessions([sample_path()], "auto"))
    text = 'cluster = "gb200-nvl72x1"\nduration = 600\nload = [0.5, 2.0]\n'
    tasks = build_tasks(grid(text), sessions)
    cap = planned_capacity(tasks[0].model, tasks[0].cluster, sessions)
    rates = [t.settings.load.sessions_per_hour for t in tasks]
    assert rates == pytest.approx([0.5 * cap.sessions_per_hour, 2.0 * cap.sessions_per_hour])
    # Enough copies of the sessions that the start process does not run dry in the window.
    for t in tasks:
        started = t.settings.load.sessions_per_hour * 600 / 3600
        assert t.settings.load.repeat * len(sessions) > started
    with pytest.raises(GridError, match="'load' needs 'duration'"):
        build_tasks(grid("load = [1.0]"), sessions)
    with pytest.raises(GridError, match="give one"):
        build_tasks(grid("duration = 60\nload = [1.0]\nsessions_per_hour = [60]"), sessions)


def test_the_kv_policy_reaches_the_settings():
    tasks = build_tasks(grid('kv_policy = ["offload", "retain"]\n'))
    assert [t.settings.kv_policy for t in tasks] == ["offload", "retain"]
    with pytest.raises(GridError, match="'kv_policy': bad value 'keep'"):
        grid('kv_policy = ["keep"]')


def test_router_reallocator_shared_prefix_and_mtp_reach_the_point():
    by_path = "orchestrator.control.router:PrefixAffinityRouter"
    text = (f'router = ["prefix-affinity", "{by_path}"]\nreallocator = ["hysteresis"]\n'
            "shared_prefix_tokens = [0]\nmtp = [0, 2]\n")
    tasks = build_tasks(grid(text))
    assert [(t.settings.router, t.cluster.pool("decode").layout.mtp) for t in tasks] == [
        ("prefix-affinity", 0), ("prefix-affinity", 2), (by_path, 0), (by_path, 2)]
    assert {t.settings.reallocator for t in tasks} == {"hysteresis"}
    assert {t.settings.load.shared_prefix_tokens for t in tasks} == {0}
    # The fill pools do not draft.
    assert {p.layout.mtp for t in tasks for p in t.cluster.pools
            if p.name != "decode"} == {0}
