"""The line a cluster file's error names is the line where the field is written."""

import tomllib
from pathlib import Path

import pytest

from costmodel.toml_lines import field_line, field_lines, field_path
from workers.cluster import ClusterError
from workers.cluster_toml import DATA_DIR, load_cluster

ROOT = Path(__file__).resolve().parents[2]

TEXT = '''\
# a comment with name = "not a key"
name = "x"   # trailing # comment
description = """two
lines = 3
"""
[pfs]
read_gb_per_s = 400

[[pools]]
name = "a"
nodes = [
  "n0",  # [ inside a comment
  "n1",
]
gpus = 4

[[pools]]
name = "b"
"quoted" = 1
[pools.batch]
size = 2
'''


@pytest.mark.parametrize(("field", "line"), [
    ("name", 2), ("description", 3), ("pfs", 6), ("pfs.read_gb_per_s", 7),
    ("pools[0]", 9), ("pools[0].nodes", 11), ("pools[0].gpus", 15), ("pools[1].name", 18),
    ("pools[1].quoted", 19), ("pools[1].batch.size", 21),
    # Not written: the nearest table holding it, or nothing.
    ("pools[1].tp", 17), ("pfs.capacity_gb", 6), ("lines", None), ("kv.handoff", None),
])
def test_field_line_follows_tables_arrays_and_multiline_values(field, line):
    assert field_line(TEXT, field) == line


def test_a_name_that_is_not_a_field_gives_no_line():
    assert field_path("pools[0].gpus") == ("pools", 0, "gpus")
    assert field_path("pool prefill") is None
    assert field_line(TEXT, "pool prefill") is None


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, (*path, key))
    elif isinstance(value, list) and value and all(isinstance(t, dict) for t in value):
        for i, table in enumerate(value):
            yield from _leaves(table, (*path, i))
    else:
        yield path


@pytest.mark.parametrize("path", sorted(DATA_DIR.glob("*.toml"))
                         + sorted((ROOT / "examples" / "clusters").glob("*.toml")),
                         ids=lambda p: p.name)
def test_every_field_of_the_shipped_cluster_files_is_found_on_its_own_line(path):
    text = path.read_text()
    lines = text.splitlines()
    found = field_lines(text)
    for leaf in _leaves(tomllib.loads(text)):
        assert leaf in found, leaf
        assert lines[found[leaf] - 1].lstrip().startswith(f"{leaf[-1]} "), (leaf, found[leaf])


def test_a_cluster_file_error_names_file_line_and_field(tmp_path):
    text = (ROOT / "examples" / "clusters" / "gb200-nvl72-disagg.toml").read_text()
    bad = tmp_path / "c.toml"
    bad.write_text(text.replace("tp = 8", "tpp = 8"))
    line = text.splitlines().index("tp = 8") + 1
    with pytest.raises(ClusterError, match=rf"^{bad}:{line}: pools\[2\].tpp: unknown field"):
        load_cluster(str(bad))
    bad.write_text(text.replace("read_gb_per_s = 400", "read_gb_per_s = -4"))
    line = text.splitlines().index("read_gb_per_s = 400") + 1
    with pytest.raises(ClusterError, match=rf"^{bad}:{line}: pfs.read_gb_per_s: expected > 0"):
        load_cluster(str(bad))
