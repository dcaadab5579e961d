"""The benchmark's frontier (orchestrator.bench.frontier): the Pareto points of total
tokens/s per GPU against interactivity, and the JSON object around them."""

from orchestrator.bench.frontier import FRONTIER_KEYS, bench_json, frontier, frontier_mask


def point(layout, concurrency, interactivity, total, output=None):
    return {"layout": layout, "concurrency": concurrency, "gpus": 8,
            "interactivity": interactivity, "total_tokens_per_s_per_gpu": total,
            "output_tokens_per_s_per_gpu": total / 2 if output is None else output,
            "ttft_s": {"p50": 0.1}}


POINTS = [
    point("a", 1, 100.0, 50.0),    # most interactive: on
    point("a", 8, 80.0, 300.0),    # on
    point("b", 8, 70.0, 250.0),    # dominated by a@8 (less of both)
    point("b", 64, 40.0, 900.0),   # on: most productive
    point("a", 64, 40.0, 600.0),   # same interactivity as b@64, less throughput: off
    point("c", 16, 80.0, 300.0),   # identical to a@8: identical points both stay
    point("d", 1, None, 10.0),     # nothing decoded: never on it
]


def test_the_frontier_keeps_exactly_the_undominated_points():
    mask = frontier_mask(POINTS)
    assert list(mask) == [True, True, False, True, False, True, False]


def test_frontier_points_carry_its_keys_from_most_interactive_to_most_productive():
    front = frontier(POINTS)
    assert [tuple(p) for p in front] == [FRONTIER_KEYS] * 4
    assert [(p["layout"], p["concurrency"]) for p in front] == [
        ("a", 1), ("a", 8), ("c", 16), ("b", 64)]
    inter = [p["interactivity"] for p in front]
    tput = [p["total_tokens_per_s_per_gpu"] for p in front]
    assert inter == sorted(inter, reverse=True) and tput == sorted(tput)


def test_the_json_object_is_points_then_frontier():
    obj = bench_json(POINTS)
    assert list(obj) == ["points", "frontier"]
    assert obj["points"] is POINTS and obj["frontier"] == frontier(POINTS)
    assert bench_json([]) == {"points": [], "frontier": []}
