"""Max-min fair sharing of links: the defining conditions hold at every event."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.links import Fabric, Link

LINKS = ("nvlink", "nic", "host", "rack", "pfs")

flows = st.lists(
    st.tuples(
        st.floats(0.0, 10.0),  # start
        st.lists(st.sampled_from(LINKS), min_size=1, max_size=3, unique=True),
        st.floats(0.0, 1e3),  # bytes
    ),
    min_size=1, max_size=12,
)
bandwidths = st.lists(st.floats(1.0, 1e3), min_size=len(LINKS), max_size=len(LINKS))


def assert_max_min_fair(fabric: Fabric, ids: list[int]) -> None:
    """Feasible, and every flow has a saturated link on which no flow is faster: the
    characterisation of the max-min fair allocation."""
    live = [fid for fid in ids if fid in fabric._flows]
    for link in fabric.links():
        assert fabric.load_bytes_per_s(link.name) <= link.bytes_per_s * (1 + 1e-9)
    for fid in live:
        rate = fabric.rate(fid)
        assert rate > 0.0
        bottleneck = False
        for name in fabric._flows[fid].path:
            saturated = fabric.load_bytes_per_s(name) >= fabric.link(name).bytes_per_s * (1 - 1e-9)
            fastest = all(fabric.rate(o) <= rate * (1 + 1e-9) for o in live
                          if name in fabric._flows[o].path)
            bottleneck |= saturated and fastest
        assert bottleneck, f"flow {fid} at {rate} has no bottleneck link"


@settings(max_examples=150, deadline=None)
@given(flows, bandwidths)
def test_rates_are_max_min_fair_and_every_byte_crosses_its_links(spec, bws):
    fabric = Fabric(Link(name, bw) for name, bw in zip(LINKS, bws, strict=True))
    ids, sizes, paths, starts, done = [], {}, {}, {}, {}
    for start_s, path, size in sorted(spec, key=lambda f: f[0]):
        done.update(fabric.advance(start_s))
        fid = fabric.start(start_s, path, size)
        ids.append(fid)
        sizes[fid], paths[fid], starts[fid] = size, path, start_s
        assert_max_min_fair(fabric, ids)
    while fabric.in_flight():
        done.update(fabric.advance(fabric.next_finish_s()))
        assert_max_min_fair(fabric, ids)
    assert sorted(done) == ids
    for fid in ids:  # no flow beats its path's slowest link alone
        alone_s = sizes[fid] / min(bws[LINKS.index(n)] for n in paths[fid])
        assert done[fid] >= starts[fid] + alone_s * (1 - 1e-9) - 1e-12
    for name in LINKS:
        crossed = sum(sizes[fid] for fid in ids if name in paths[fid])
        assert fabric.carried_bytes(name) == pytest.approx(crossed, rel=1e-9, abs=1e-6)


@settings(max_examples=150, deadline=None)
@given(flows, bandwidths, st.lists(st.booleans(), min_size=30, max_size=30))
def test_moved_links_carry_what_every_link_reads(spec, bws, looks):
    """A reader that keeps every link's bytes and takes `carried_bytes_moved` now and
    then reads, to the last bit, what `carried_bytes` gives for every link."""
    fabric = Fabric(Link(name, bw) for name, bw in zip(LINKS, bws, strict=True))
    kept: dict[str, float] = {}
    looks = iter(looks)

    def look() -> None:
        if next(looks, True):
            kept.update(fabric.carried_bytes_moved())
            for name in LINKS:
                assert kept.get(name, 0) == fabric.carried_bytes(name)

    for start_s, path, size in sorted(spec, key=lambda f: f[0]):
        fabric.advance(start_s)
        look()
        fabric.start(start_s, path, size)
        look()
    while fabric.in_flight():
        fabric.advance((fabric.now_s + fabric.next_finish_s()) / 2)
        look()
        if fabric.in_flight():
            fabric.advance(fabric.next_finish_s())
            look()
    kept.update(fabric.carried_bytes_moved())
    for name in LINKS:
        assert kept.get(name, 0) == fabric.carried_bytes(name)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(1.0, 1e3), min_size=1, max_size=10), st.floats(1.0, 1e3))
def test_one_link_is_work_conserving(sizes, bw):
    """Copies all present from the start on one link: the last finishes when the link
    has carried them all at full bandwidth, whatever the sharing."""
    fabric = Fabric([Link("nic", bw)])
    for size in sizes:
        fabric.start(0.0, ["nic"], size)
    done = fabric.advance(1e12)
    assert max(t for _, t in done) == pytest.approx(sum(sizes) / bw, rel=1e-9)


def progressive_filling(paths: dict[int, tuple[str, ...]], bws: dict[str, float]
                        ) -> dict[int, float]:
    """Max-min fair rates by plain progressive filling over every flow and link: the
    link offering the smallest equal share (first name on a tie) fixes its flows."""
    unfixed: dict[str, list[int]] = {}
    for fid, path in paths.items():
        for name in path:
            unfixed.setdefault(name, []).append(fid)
    spare = {name: bws[name] for name in unfixed}
    rates: dict[int, float] = {}
    while unfixed:
        _, name = min((spare[n] / len(fids), n) for n, fids in unfixed.items())
        share = max(0.0, spare[name] / len(unfixed[name]))
        for fid in unfixed.pop(name):
            rates[fid] = share
            for other in paths[fid]:
                spare[other] -= share
                if other in unfixed:
                    unfixed[other].remove(fid)
                    if not unfixed[other]:
                        del unfixed[other]
    return rates


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(LINKS), min_size=1, max_size=3, unique=True),
                          st.floats(1.0, 1e3)), min_size=1, max_size=8),
       st.lists(st.sampled_from([10.0, 20.0, 40.0, 80.0, 100.0, 3.0 ** 0.5]),
                min_size=len(LINKS), max_size=len(LINKS)))
def test_rates_are_those_of_plain_progressive_filling_to_the_last_bit(spec, bws):
    """The fabric's shortcuts (flows that share no link, a single shared link) give
    the very floats plain progressive filling gives, at every start and finish (equal
    bandwidths make ties)."""
    bw = dict(zip(LINKS, bws, strict=True))
    fabric = Fabric(Link(name, b) for name, b in bw.items())
    paths = {}
    for path, size in spec:
        paths[fabric.start(0.0, path, size)] = tuple(path)
        live = {fid: p for fid, p in paths.items() if fid in fabric._flows}
        assert {fid: fabric.rate(fid) for fid in live} == progressive_filling(live, bw)
    while fabric.in_flight():
        fabric.advance(fabric.next_finish_s())
        live = {fid: p for fid, p in paths.items() if fid in fabric._flows}
        assert {fid: fabric.rate(fid) for fid in live} == progressive_filling(live, bw)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(LINKS), min_size=1, max_size=3, unique=True),
                          st.floats(1.0, 1e3)), min_size=1, max_size=6),
       st.lists(st.sampled_from([10.0, 20.0, 40.0, 3.0 ** 0.5]),
                min_size=len(LINKS), max_size=len(LINKS)))
def test_refilling_the_changed_piece_gives_what_filling_every_path_gives(spec, bws):
    """The same copies run three times over, each round starting while the last one's
    flows may still be in flight: a re-share fills only the piece of the paths the
    change touches (connected through shared links), the others keep their rates; at
    every start and finish the rates are plain progressive filling's over every flow to
    the last bit, and the loads the sum of the rates of the flows on each link (each
    path's rate times its flows, to a rounding: the fabric works per path, not per
    flow), in the order the paths in flight first cross them."""
    bw = dict(zip(LINKS, bws, strict=True))
    fabric = Fabric(Link(name, b) for name, b in bw.items())
    paths = {}

    def check() -> None:
        live = {fid: p for fid, p in paths.items() if fid in fabric._flows}
        assert {fid: fabric.rate(fid) for fid in live} == progressive_filling(live, bw)
        loads: dict[str, float] = {}
        order = {key: i for i, key in enumerate(fabric._groups)}  # the groups' order
        for fid in sorted(live, key=lambda f: order[fabric._flows[f].route[3]]):
            for name in dict.fromkeys(live[fid]):
                loads[name] = loads.get(name, 0.0) + fabric.rate(fid)
        assert list(fabric.loads) == list(loads)
        for name, load in loads.items():
            assert fabric.loads[name] == pytest.approx(load, rel=1e-12)

    for _ in range(3):
        for path, size in spec:
            paths[fabric.start(fabric.now_s, path, size)] = tuple(path)
            check()
        for _ in range(len(spec) // 2):  # some of them finish before the next round
            if fabric.in_flight():
                fabric.advance(fabric.next_finish_s())
                check()
    while fabric.in_flight():
        fabric.advance(fabric.next_finish_s())
        check()
