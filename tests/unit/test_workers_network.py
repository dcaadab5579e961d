"""A cluster's links, the paths KV copies take, and the essay's network planning example."""

import json

import pytest

from costmodel.model import load_model
from orchestrator.cli import main
from storage.links import Fabric
from storage.tiers import Location, Tier
from tests.conftest import run_cli
from workers.cluster_toml import load_cluster
from workers.network import copy_path, fabric_links, migration_demands, steady_load

GB = 1e9


@pytest.fixture(scope="module")
def x2():
    """Two GB200 NVL72 racks: decode workers in rack n0, fill workers in rack n1."""
    return load_cluster("gb200-nvl72x2").bind(load_model("kimi-k3-like"))


def hbm(name):
    return Location(Tier.HBM, name)


def test_inside_one_nvl72_copies_cross_nvlink_and_between_racks_the_nics(x2):
    assert copy_path(x2, hbm("decode-0"), hbm("decode-1")) == ("nvlink-out:decode-0",
                                                               "nvlink-in:decode-1")
    assert copy_path(x2, hbm("prefill-0"), hbm("decode-0")) == ("nic-out:prefill-0",
                                                                "nic-in:decode-0")
    assert copy_path(x2, hbm("decode-0"), Location(Tier.DRAM, "n0")) == ("host-out:decode-0",
                                                                         "dram:n0")
    assert copy_path(x2, Location(Tier.DRAM, "n1"), hbm("decode-0")) == (
        "dram:n1", "node-nic-out:n1", "nic-in:decode-0")
    assert copy_path(x2, Location(Tier.PFS, "pfs"), hbm("decode-0")) == ("pfs-read",
                                                                         "nic-in:decode-0")


def test_hgx_servers_are_separate_domains():
    b200 = load_cluster("b200x8").bind(load_model("kimi-k3-like"))
    by_node = {}
    for w in b200.workers:
        by_node.setdefault(w.node, []).append(w.name)
    names = [w.name for w in b200.workers]
    apart = next((a, b) for a in names for b in names
                 if a != b and not any(a in ws and b in ws for ws in by_node.values()))
    path = copy_path(b200, hbm(apart[0]), hbm(apart[1]))
    assert path[0].startswith("nic-out:") and path[1].startswith("nic-in:")


def test_a_7_gb_copy_takes_its_size_over_the_narrowest_port_of_its_path(x2):
    """NVLink5 900 GB/s per GPU per direction against a 400 Gb/s NIC per GPU (the
    gb200 preset): the same 7 GB from a 16-GPU prefill worker to decode, and between
    the two 36-GPU decode workers of one rack."""
    fabric = Fabric(fabric_links(x2))
    over_nic = fabric.start(0.0, copy_path(x2, hbm("prefill-0"), hbm("decode-0")), 7 * GB)
    over_nvlink = fabric.start(0.0, copy_path(x2, hbm("decode-0"), hbm("decode-1")), 7 * GB)
    done = dict(fabric.advance(1.0))
    assert done[over_nic] == pytest.approx(7 * GB / (16 * 400e9 / 8))  # 8.75 ms
    assert done[over_nvlink] == pytest.approx(7 * GB / (36 * 900e9))  # 0.22 ms
    assert done[over_nic] / done[over_nvlink] == pytest.approx(40.5)


def test_two_copies_on_one_nic_take_twice_as_long(x2):
    fabric = Fabric(fabric_links(x2))
    path = copy_path(x2, hbm("prefill-0"), hbm("decode-0"))
    a = fabric.start(0.0, path, 7 * GB)
    b = fabric.start(0.0, path, 7 * GB)
    done = dict(fabric.advance(1.0))
    assert done[a] == done[b] == pytest.approx(2 * 7 * GB / (16 * 400e9 / 8))


def test_the_essays_planning_example_is_56_tbit_per_s_and_saturates_the_pfs(x2):
    demands = list(migration_demands(x2, 10_000, 7 * GB, 10.0, "pfs"))
    assert sum(rate for _, _, rate in demands) == pytest.approx(7e12)
    load = steady_load(x2, demands)
    capacity = {link.name: link.bytes_per_s for link in fabric_links(x2)}
    assert load["pfs-read"] == pytest.approx(7e12)
    assert load["pfs-read"] / capacity["pfs-read"] == pytest.approx(17.5)
    # each decode worker (36 GPUs x 50 GB/s of NIC) would need 3.5 TB/s in
    assert load["nic-in:decode-0"] / capacity["nic-in:decode-0"] == pytest.approx(3500 / 1800)
    assert load["nvlink-in:decode-0"] == 0.0


def test_network_command_reports_the_demand_and_the_tightest_link(capsys):
    assert main(["network", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["demand_bits_per_s"] == pytest.approx(56e12)
    assert report["links"][0]["link"] == "pfs-read"
    assert report["sessions_sustained"] == 571
    assert main(["network", "--from", "dram", "--cluster", "gb200-nvl72x1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["links"][0]["utilisation"] < 1.0  # Grace's C2C links carry it


@pytest.mark.parametrize("argv, message", [
    (["--pool", "nope"], "--pool nope: cluster 'gb200-nvl72x2' has no pool 'nope'"),
    (["--cluster", "nowhere"], "--cluster nowhere: unknown cluster 'nowhere'"),
    (["--every", "0"], "argument --every: expected a positive number, got '0'"),
    (["--from", "tape"], "argument --from: invalid choice: 'tape'"),
])
def test_bad_options_are_one_line(argv, message, capsys):
    code, out, err = run_cli(["network", *argv], capsys)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1


def test_the_table_in_docs_network_md_is_what_the_command_prints(capsys):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "network.md").read_text()
    rows = [line.split("|")[1:-1] for line in text.splitlines()
            if line.startswith("| gb200") or line.startswith("| b200")]
    assert len(rows) == 9
    for cluster, source, link, util, _, sustained in (map(str.strip, r) for r in rows):
        assert main(["network", "--cluster", cluster, "--from", source, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["links"][0]["link"] == link
        assert f"{report['links'][0]['utilisation']:.2f}" == util
        assert f"{report['sessions_sustained']:,}" == sustained
