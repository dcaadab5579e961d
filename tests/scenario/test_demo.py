"""`tokenfactory demo`, as the README's first command runs it."""

import json

import pytest

from orchestrator.cli import main


@pytest.mark.slow
def test_demo_shows_the_difference_and_writes_its_report(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--json", "--no-progress"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    r, b = runs["retire"]["control"], runs["buffered"]["control"]
    assert r["oscillation_index"] >= 3 * b["oscillation_index"]
    assert b["decode_starvation_fraction"] < r["decode_starvation_fraction"]
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "oscillation index" in html
    for name in ("retire", "buffered"):
        assert (out / f"{name}-summary.json").exists() and (out / f"{name}-series.csv").exists()
