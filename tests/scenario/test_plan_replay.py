"""A cluster planned on the bundled sample is one that replay runs, every call done."""

import json

import pytest

from orchestrator.cli import main
from traces import sample_path


def plan_and_replay(trace, load, tmp_path, capsys, hardware="gb200", gpus="72"):
    cluster = tmp_path / "planned.toml"
    assert main(["plan", "--model", "kimi-k3-like", "--hardware", hardware, "--gpus", gpus,
                 "--trace", str(trace), "--out", str(cluster), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert main(["replay", str(trace), "--cluster", str(cluster), *load, "--no-progress",
                 "--json"]) == 0
    return plan, json.loads(capsys.readouterr().out)


def test_a_cluster_planned_on_one_session_replays_it_whole(tmp_path, capsys):
    plan, summary = plan_and_replay(sample_path() / "trace_0471.json.gz",
                                    ["--think-scale", "0.01"], tmp_path, capsys)
    requests = summary["requests"]
    assert requests["submitted"] == plan["trace"]["calls"]
    assert requests["completed"] == requests["submitted"]
    assert requests["lost"] == 0 and requests["rejected"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("hardware, gpus", [("gb200", "72"), ("b200", "64")])
def test_replay_runs_the_cluster_planned_on_the_sample_and_completes_every_call(
        hardware, gpus, tmp_path, capsys):
    plan, summary = plan_and_replay(sample_path(), ["--max-sessions", "4", "--think-scale",
                                                    "0.01"], tmp_path, capsys, hardware, gpus)
    requests = summary["requests"]
    assert requests["submitted"] > 0
    assert requests["completed"] == requests["submitted"]
    assert requests["lost"] == 0 and requests["rejected"] == 0
    assert summary["resources"]["gpus"] == plan["gpus_used"] <= int(gpus)
