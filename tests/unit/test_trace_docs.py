"""The native-format page's example is a valid trace and reads as the page says."""

import re

from tests.conftest import ROOT
from traces import read_sessions


def test_the_documented_example_reads_as_described(tmp_path):
    page = (ROOT / "docs" / "trace-format.md").read_text()
    example = re.search(r"```json\n(.*?)```", page, re.S)[1]
    path = tmp_path / "example.jsonl"
    path.write_text(example)
    s1, s2 = read_sessions(path)
    assert [c.cached_tokens for c in s1.calls] == [0, 192, 0, 128, 128]
    assert "cached tokens 0, 192, 0, 128, 128" in page
    assert [c.is_subagent for c in s1.calls] == [False, False, True, True, False]
    assert s1.resets == 1 and s2.calls[0].cached_tokens == 0
