"""One replay reads one kind of trace: mixing kinds is a one-line error naming them."""

import shutil

import pytest

from tests.conftest import run_cli
from traces import TraceError, read_sessions, sample_path

AZURE_ROWS = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
WEKA_FILE = sample_path() / "trace_0015.json.gz"


@pytest.fixture
def azure(tmp_path):
    path = tmp_path / "conv.csv"
    path.write_text(AZURE_ROWS)
    return path


def test_mixed_kinds_are_refused_naming_each_path_and_kind(azure):
    with pytest.raises(TraceError) as info:
        list(read_sessions([WEKA_FILE, azure], one_kind=True))
    assert str(info.value) == (f"{WEKA_FILE} (weka), {azure} (azure): format: "
                               "trace kinds mixed in one replay; give files of one kind")


def test_a_directory_holding_two_kinds_names_both(tmp_path, azure):
    shutil.copy(WEKA_FILE, tmp_path / WEKA_FILE.name)
    with pytest.raises(TraceError, match=rf"^{tmp_path} \(azure\+weka\): format: "):
        list(read_sessions([tmp_path], one_kind=True))


def test_one_kind_reads_as_before_and_mixing_is_allowed_without_it(azure):
    both = list(read_sessions([WEKA_FILE, azure]))
    assert [s.source for s in both][-1] == str(azure)
    alone = list(read_sessions([WEKA_FILE, WEKA_FILE], one_kind=True))
    assert [s.source for s in alone] == [str(WEKA_FILE)] * 2


def test_replay_of_mixed_kinds_exits_2_with_one_line_and_writes_nothing(capsys, tmp_path, azure):
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(
        ["replay", str(sample_path()), str(azure), "--out", str(out)], capsys)
    assert code == 2
    assert stdout == ""
    assert stderr == (f"tokenfactory replay: error: {sample_path()} (weka), {azure} (azure): "
                      "format: trace kinds mixed in one replay; give files of one kind\n")
    assert not out.exists()


@pytest.mark.parametrize("command", ["compare", "sweep-replay"])
def test_the_other_replaying_commands_refuse_mixed_kinds_alike(command, capsys, tmp_path, azure):
    argv = [command, str(sample_path()), str(azure)]
    if command == "sweep-replay":
        grid = tmp_path / "grid.toml"
        grid.write_text("seed = [0]\n")
        argv = [command, str(grid), "--trace", str(sample_path()), "--trace", str(azure)]
    code, _, stderr = run_cli([*argv, "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert stderr.count("\n") == 1 and "(weka)" in stderr and "(azure)" in stderr
    assert not (tmp_path / "out").exists()

