"""Links shared max-min fairly by the copies in flight on them."""

import math

import pytest

from storage.links import Fabric, Link

GB = 1e9
NIC_400G = 400e9 / 8  # one 400 Gb/s NIC, bytes per second


def finish_times(fabric: Fabric, until_s: float = 1e9) -> dict[int, float]:
    return dict(fabric.advance(until_s))


def test_one_copy_takes_its_size_over_the_bandwidth():
    fabric = Fabric([Link("nic", NIC_400G)])
    fid = fabric.start(0.0, ["nic"], 7 * GB)
    assert finish_times(fabric) == {fid: pytest.approx(7 * GB / NIC_400G)}


@pytest.mark.parametrize("n", [2, 3, 8])
def test_n_equal_copies_on_one_link_each_take_n_times_as_long(n):
    fabric = Fabric([Link("nic", NIC_400G)])
    ids = [fabric.start(0.0, ["nic"], 7 * GB) for _ in range(n)]
    done = finish_times(fabric)
    alone_s = 7 * GB / NIC_400G
    assert sorted(done) == ids
    assert all(t == pytest.approx(n * alone_s) for t in done.values())


def test_a_flow_bottlenecked_elsewhere_leaves_the_rest_of_the_link_to_others():
    fabric = Fabric([Link("nvlink", 100.0), Link("host", 10.0)])
    slow = fabric.start(0.0, ["nvlink", "host"], 100.0)
    fast = fabric.start(0.0, ["nvlink"], 900.0)
    assert fabric.rate(slow) == pytest.approx(10.0)
    assert fabric.rate(fast) == pytest.approx(90.0)
    done = finish_times(fabric)
    assert done[slow] == pytest.approx(10.0)
    assert done[fast] == pytest.approx(10.0)


def test_a_late_flow_shares_from_when_it_starts_and_frees_the_link_when_done():
    fabric = Fabric([Link("nic", 10.0)])
    first = fabric.start(0.0, ["nic"], 100.0)
    second = fabric.start(5.0, ["nic"], 50.0)  # first has 50 bytes left at 5 s
    assert fabric.remaining_bytes(first) == pytest.approx(50.0)
    done = finish_times(fabric, until_s=16.0)
    assert done == {first: pytest.approx(15.0), second: pytest.approx(15.0)}
    third = fabric.start(20.0, ["nic"], 10.0)
    assert finish_times(fabric) == {third: pytest.approx(21.0)}


def test_finishing_frees_bandwidth_for_the_others_in_order():
    fabric = Fabric([Link("nic", 10.0)])
    short = fabric.start(0.0, ["nic"], 10.0)
    long = fabric.start(0.0, ["nic"], 30.0)
    assert fabric.next_finish_s() == pytest.approx(2.0)
    done = fabric.advance(100.0)
    assert [fid for fid, _ in done] == [short, long]
    # 2 s at 5 B/s each, then the long one alone at 10 B/s for its last 20 bytes
    assert dict(done)[long] == pytest.approx(4.0)


def test_carried_bytes_measure_utilisation():
    fabric = Fabric([Link("a", 10.0), Link("b", 20.0)])
    fabric.start(0.0, ["a", "b"], 50.0)
    fabric.advance(2.0)
    assert fabric.carried_bytes("a") == pytest.approx(20.0)
    assert fabric.load_bytes_per_s("a") == pytest.approx(10.0)
    fabric.advance(100.0)
    assert fabric.carried_bytes("b") == pytest.approx(50.0)
    assert fabric.load_bytes_per_s("b") == 0.0


def test_flows_that_finished_before_a_start_are_still_reported():
    fabric = Fabric([Link("nic", 10.0)])
    first = fabric.start(0.0, ["nic"], 10.0)
    second = fabric.start(5.0, ["nic"], 10.0)
    assert fabric.next_finish_s() == 5.0
    assert fabric.advance(5.0) == [(first, pytest.approx(1.0))]
    assert fabric.advance(6.0) == [(second, pytest.approx(6.0))]


def test_bad_input_names_what_is_wrong():
    with pytest.raises(ValueError, match="'nic'.*listed twice"):
        Fabric([Link("nic", 1.0), Link("nic", 2.0)])
    with pytest.raises(ValueError, match="bytes_per_s"):
        Link("nic", 0.0)
    with pytest.raises(ValueError, match="bytes_per_s"):
        Link("nic", math.inf)
    fabric = Fabric([Link("nic", 1.0)])
    with pytest.raises(KeyError, match="pcie"):
        fabric.start(0.0, ["pcie"], 1.0)
    with pytest.raises(ValueError, match="size_bytes"):
        fabric.start(0.0, ["nic"], -1.0)
    fabric.advance(3.0)
    with pytest.raises(ValueError, match="time went back"):
        fabric.advance(2.0)
