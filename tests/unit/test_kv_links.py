"""KV copies on the cluster's links in the replay's shell (`workers.kv_links`): on the
run's virtual clock, sharing links max-min fairly, ends moving as others start and end."""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.model import load_model
from storage.plans import Purpose, Source, Step, StepKind, TransferPlan
from storage.tiers import Location, Tier
from workers.clock import VirtualClock
from workers.cluster_toml import load_cluster
from workers.kv_links import KvLinks, path_kind

GB = 1e9


@pytest.fixture(scope="module")
def x2():
    """Two GB200 NVL72 racks: decode workers in rack n0, fill workers in rack n1."""
    return load_cluster("gb200-nvl72x2").bind(load_model("kimi-k3-like"))


def hbm(name):
    return Location(Tier.HBM, name)


def plan(src, dst, size, now_s=0.0, blobs=(1,)):
    step = Step(StepKind.COPY, tuple(blobs), dst, (Source(src, int(size)),), int(size))
    return TransferPlan(Purpose.FETCH, dst, now_s, 0, steps=(step,))


def run_copies(bound, starts):
    """`starts`: (start time, src, dst, bytes, blob ids); returns each copy's end."""
    links = KvLinks(bound)

    async def main():
        loop = asyncio.get_running_loop()
        ends = {}
        for i, (at_s, src, dst, size, blobs) in enumerate(starts):
            await asyncio.sleep(at_s - loop.time())
            t = links.copy(plan(src, dst, size, loop.time(), blobs), loop.time())
            t.add_done_callback(lambda end_s, i=i: ends.__setitem__(i, end_s))
        while links.in_flight():
            await asyncio.sleep(0.001)
        return ends

    return links, VirtualClock().run(main())


def nic_s(bound, worker, size):
    w = next(w for w in bound.workers if w.name == worker)
    return size / (w.hardware.scale_out_bytes_per_s * w.layout.instance_gpus)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_n_copies_on_one_nic_each_take_n_times_as_long_as_one(x2, n):
    """Two 7 GB copies from a fill worker into one decode worker share its NIC: each takes
    twice as long as one alone."""
    starts = [(0.0, hbm("prefill-0"), hbm("decode-0"), 7 * GB, (i,)) for i in range(n)]
    _, ends = run_copies(x2, starts)
    alone_s = nic_s(x2, "prefill-0", 7 * GB)
    assert sorted(ends) == list(range(n))
    assert all(t == pytest.approx(n * alone_s, rel=1e-6) for t in ends.values())


def test_a_copy_over_nvlink_is_faster_than_over_the_nics_by_the_presets_ratio(x2):
    """NVLink5 (900 GB/s per GPU) inside a rack against a 400 Gb/s NIC per GPU between."""
    links, ends = run_copies(x2, [(0.0, hbm("decode-0"), hbm("decode-1"), 7 * GB, (1,)),
                                  (0.0, hbm("prefill-0"), hbm("decode-0"), 7 * GB, (2,))])
    d0 = next(w for w in x2.workers if w.name == "decode-0")
    assert ends[0] == pytest.approx(7 * GB / (d0.hardware.scale_up_bytes_per_s
                                             * d0.layout.instance_gpus), rel=1e-6)
    assert ends[1] == pytest.approx(nic_s(x2, "prefill-0", 7 * GB), rel=1e-6)
    assert ends[1] > 10 * ends[0]
    assert links.bytes_by_path == {"hbm_hbm_nvlink": 7 * GB, "hbm_hbm_nic": 7 * GB}


def test_a_copy_ends_later_when_another_joins_its_link_halfway():
    bound = load_cluster("gb200-nvl72x2").bind(load_model("kimi-k3-like"))
    alone_s = nic_s(bound, "prefill-0", 7 * GB)
    _, ends = run_copies(bound, [(0.0, hbm("prefill-0"), hbm("decode-0"), 7 * GB, (1,)),
                                 (alone_s / 2, hbm("prefill-0"), hbm("decode-0"), 7 * GB, (2,))])
    # Half done alone, the other half at half the rate: 1.5 x; the second then has a
    # quarter left, alone again.
    assert ends[0] == pytest.approx(1.5 * alone_s, rel=1e-6)
    assert ends[1] == pytest.approx(2.0 * alone_s, rel=1e-6)


def test_a_copy_reading_blobs_still_landing_at_its_source_ends_after_them(x2):
    """A DRAM copy being offloaded is read on to another worker before it has landed:
    the read is done only when the offload is."""
    dram = Location(Tier.DRAM, "n1")
    _, ends = run_copies(x2, [(0.0, hbm("prefill-0"), dram, 70 * GB, (5,)),
                              (0.0, dram, hbm("decode-0"), 1 * GB, (5,))])
    assert ends[1] == pytest.approx(ends[0])
    assert ends[1] > nic_s(x2, "decode-0", 1 * GB)


def test_a_later_copy_of_a_blob_to_the_same_place_is_the_one_a_read_waits_for(x2):
    """Two copies of blob 5 land in one DRAM, a long one then a short one: a read of it
    waits for the short (latest) one only, and once that has landed, for neither; a read
    of blob 6, which only the long one writes, waits for the long one."""
    dram = Location(Tier.DRAM, "n1")
    long_copy = (0.0, hbm("prefill-0"), dram, 700 * GB, (5, 6))
    short_copy = (0.0, hbm("prefill-1"), dram, 1 * GB, (5,))
    _, ends = run_copies(x2, [long_copy, short_copy,
                              (0.0, dram, hbm("decode-0"), 1 * GB, (5,))])
    assert ends[1] <= ends[2] < ends[0] / 2
    read_s = ends[0] / 2  # the short copy has landed, the long one has not
    _, ends = run_copies(x2, [long_copy, short_copy,
                              (read_s, dram, hbm("decode-0"), 1 * GB, (5,))])
    assert ends[2] < ends[0]
    _, ends = run_copies(x2, [long_copy, short_copy,
                              (read_s, dram, hbm("decode-0"), 1 * GB, (6,))])
    assert ends[2] == pytest.approx(ends[0])


def test_utilisation_is_the_bytes_carried_over_capacity_mean_and_p99_over_windows(x2):
    links, ends = run_copies(x2, [(0.0, hbm("prefill-0"), hbm("decode-0"), 800 * GB, (1,))])
    busy_s = ends[0]  # 1 s at 800 GB/s (16 GPUs x 50 GB/s)
    util = links.utilisation(10.0)
    assert util["nic-out:prefill-0"]["mean"] == pytest.approx(busy_s / 10.0, rel=1e-6)
    assert util["nic-in:decode-0"]["mean"] == pytest.approx(busy_s / 10.0 * 16 / 36, rel=1e-6)
    assert util["nic-out:prefill-0"]["p99"] == pytest.approx(0.91)  # 1 busy window of 10
    assert links.utilisation(busy_s)["nic-out:prefill-0"]["p99"] == pytest.approx(1.0)
    assert "nvlink-in:decode-0" not in util  # links that carried nothing are left out


def test_path_kinds_name_tiers_and_the_scale_up_or_out_network():
    assert path_kind(hbm("a"), hbm("b"), ("nvlink-out:a", "nvlink-in:b")) == "hbm_hbm_nvlink"
    assert path_kind(hbm("a"), Location(Tier.DRAM, "n0"), ("host-out:a",)) == "hbm_dram"
    assert path_kind(Location(Tier.RACK, "r0"), hbm("a"), ("rack-read:r0",)) == "rack_hbm"


def test_the_cluster_file_says_how_kv_moves():
    from tests.factories import small_cluster
    from workers.cluster import ClusterError, KvSpec

    assert small_cluster().kv == KvSpec("direct", 2)
    assert small_cluster(kv={"handoff": "host", "promote_min_sessions": 0}).kv == KvSpec(
        "host", 0)
    with pytest.raises(ClusterError, match=r"small.toml: kv.handoff: expected one of direct, "
                                           r"host, got 'dram'"):
        small_cluster(kv={"handoff": "dram"})
    with pytest.raises(ClusterError, match=r"kv.promote_min_sessions: expected an integer"):
        small_cluster(kv={"promote_min_sessions": 1.5})
    with pytest.raises(ClusterError, match=r"kv.fast: unknown field"):
        small_cluster(kv={"fast": True})


def test_the_links_per_preset_in_docs_network_md_are_the_presets():
    from pathlib import Path

    from workers.cluster_toml import cluster_names
    from workers.network import fabric_links, same_domain

    text = (Path(__file__).resolve().parents[2] / "docs" / "network.md").read_text()
    rows = {r[0].strip("` "): [c.strip() for c in r[1:]]
            for r in (line.split("|")[1:-1] for line in text.splitlines())
            if r and r[0].strip("` ") in cluster_names() and r[0].strip().startswith("`")}
    # The four shipped presets at least (a preset added later may not be listed yet).
    assert {"gb200-nvl72x1", "gb200-nvl72x2", "b200x8", "b300x8"} <= set(rows)
    model = load_model("kimi-k3-like")
    for name, (workers, nodes, links, racks, handoff) in rows.items():
        bound = load_cluster(name).bind(model)
        assert int(workers) == len(bound.workers)
        assert int(nodes) == len(bound.spec.nodes)
        assert int(links) == len(fabric_links(bound))
        assert racks == ", ".join(r.name for r in bound.spec.racks if r.cache_bytes)
        fill = next(w for w in bound.workers if w.pool == "prefill")
        decode = next(w for w in bound.workers if w.pool == "decode")
        assert handoff.startswith("NVLink" if same_domain(bound, fill, decode) else "NICs")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 1e12)), max_size=60))
def test_utilisation_windows_hold_what_a_dict_of_windows_would(adds):
    # Windows come in time order: each add is to the last window or a later one.
    from workers.link_use import LinkUse

    kept, as_dict, window = LinkUse(), {}, 0
    for step, moved in adds:
        window += step
        kept.add(window, moved)
        as_dict[window] = as_dict.get(window, 0.0) + moved
    index, carried = kept.windows()
    assert list(index) == list(as_dict)
    assert [x.hex() for x in carried] == [x.hex() for x in as_dict.values()]


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 3000), st.data())
def test_the_p99_from_the_busy_windows_is_numpys_over_all_windows(n, data):
    """`sparse_percentile` gives `np.percentile` of the whole array of windows, idle
    windows 0, to the last bit."""
    import numpy as np

    from workers.link_use import sparse_percentile

    busy = data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    values = data.draw(st.lists(
        st.one_of(st.just(0.0), st.floats(1e-300, 1e3), st.sampled_from([0.25, 0.5, 1.0])),
        min_size=len(busy), max_size=len(busy)))
    q = data.draw(st.sampled_from([99, 50, 0, 100, 99.9, 1]))
    whole = np.zeros(n)
    whole[busy] = values
    got = sparse_percentile(np.array(values, dtype=np.float64), n, q)
    assert got.hex() == float(np.percentile(whole, q)).hex()


def test_the_links_timer_is_armed_again_on_its_own_loop_only(x2):
    """The links re-arm the timer that fired last (the same handle) on the loop it fired
    on; links used again on a new loop arm a timer of that loop and finish there (at the
    fabric's own time, which never goes back)."""
    links = KvLinks(x2)

    async def copies(n):
        loop = asyncio.get_running_loop()
        ends, handles = [], set()
        for i in range(n):
            t = links.copy(plan(hbm("prefill-0"), hbm("decode-0"), 7 * GB, loop.time(), (i,)),
                           loop.time())
            t.add_done_callback(ends.append)
            handles.add(id(links._timer))
            while links.in_flight():
                await asyncio.sleep(0.001)
        return ends, handles

    ends, handles = VirtualClock().run(copies(3))
    alone_s = nic_s(x2, "prefill-0", 7 * GB)
    assert len(ends) == 3 and ends[0] == pytest.approx(alone_s, rel=1e-6)
    assert len(handles) == 1  # one handle, armed three times
    again, _ = VirtualClock().run(copies(1))  # a new loop, its clock at 0
    assert len(again) == 1 and again[0] > ends[-1]
