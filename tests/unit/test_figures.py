"""Figures worth looking at (issue 35, item 6): one colour-blind-safe colour per
controller in every plot, labels inside the image, log axes with enough labels, the
sweep-replay results printed and reported, every essay finding the sweep says "no" to
explained."""

from __future__ import annotations

import io
import struct

import pytest

from costmodel import plotstyle
from costmodel.plotstyle import CONTROLLER_COLOURS, OKABE_ITO, PALETTE, Colours


def png_size(data: bytes) -> tuple[int, int]:
    return struct.unpack(">II", data[16:24])


def test_each_builtin_controller_has_its_own_palette_colour():
    import tomllib
    from pathlib import Path

    # The tree's entry points (pyproject.toml), not the installed package's: an install
    # made before a built-in was added does not list it.
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    entry_points = project["project"]["entry-points"]["tokenfactory.controllers"]
    builtin = {name for name, value in entry_points.items()
               if value.startswith("orchestrator.")}
    assert builtin and set(CONTROLLER_COLOURS) == builtin
    colours = list(CONTROLLER_COLOURS.values())
    assert len(set(colours)) == len(colours) and set(colours) <= set(PALETTE)


def test_another_name_never_takes_a_builtin_controllers_colour():
    colours = Colours(["retire", "mine:Pi", "buffered", "yours:Pid", "local"])
    assert colours.colour("retire") == CONTROLLER_COLOURS["retire"]
    assert colours.colour("local") == CONTROLLER_COLOURS["local"]
    users = [colours.colour("mine:Pi"), colours.colour("yours:Pid")]
    assert len(set(users)) == 2 and not set(users) & set(CONTROLLER_COLOURS.values())
    assert set(users) <= set(OKABE_ITO)
    # A controller keeps its colour whatever else a figure shows.
    assert Colours(["mine:Pi", "retire"]).colour("retire") == colours.colour("retire")
    many = Colours([f"c{i}" for i in range(9)])
    assert len({many.style(f"c{i}") for i in range(9)}) == 9  # dashed once colours run out


def test_save_keeps_a_label_outside_the_axes_inside_the_image():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([1, 2], [1, 2], label="a label far longer than the figure is wide, kept whole")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    plain, tight = io.BytesIO(), io.BytesIO()
    fig.savefig(plain, dpi=100, format="png")
    plotstyle.save(fig, tight, dpi=100, format="png")
    plt.close(fig)
    assert png_size(plain.getvalue())[0] == 400  # cut at the figure's edge
    assert png_size(tight.getvalue())[0] > 600  # grown to hold the legend


@pytest.mark.parametrize(("lo", "hi", "least", "most"), [
    (9_000, 15_000, 3, 8),  # under a decade: matplotlib alone labels one value or none
    (40, 12_000, 3, 8),
    (1e-3, 1e6, 3, 8),
])
def test_a_log_axis_gets_enough_labels_and_not_too_many(lo, hi, least, most):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    plotstyle.log_ticks(ax.yaxis)
    ticks = [t for t in ax.get_yticks() if lo <= t <= hi]
    labels = [ax.yaxis.get_major_formatter()(t) for t in ticks]
    plt.close(fig)
    assert least <= len(ticks) <= most and all(labels)
    assert all(len(label) <= 5 for label in labels)  # 12k, 0.001, 1M: narrow


def test_the_report_draws_each_run_in_its_controllers_colour():
    from orchestrator.run.report import plot_figure
    from orchestrator.run.settings import RunSettings, prepare, run_replay
    from traces import sample_path
    from traces.replay import LoadOptions

    settings = RunSettings(load=LoadOptions(max_sessions=1, think_scale=0.01))
    result, _ = run_replay(prepare([sample_path()], "auto", settings), settings)
    fig = plot_figure({"retire": result, "examples.pi_admission:PIAdmission": result,
                       "local": result})
    lines = {line.get_label(): line.get_color() for line in fig.axes[0].get_lines()}
    import matplotlib.pyplot as plt

    plt.close(fig)
    assert lines["retire"] == CONTROLLER_COLOURS["retire"]
    assert lines["local"] == CONTROLLER_COLOURS["local"]
    assert lines["examples.pi_admission:PIAdmission"] not in CONTROLLER_COLOURS.values()


def test_every_finding_the_sweep_says_no_to_is_explained(capsys):
    from costmodel.worked_example import (
        check_findings,
        print_worked_example,
        run_worked_example,
    )

    result = run_worked_example()
    findings = check_findings(result)
    assert any(not f.holds for f in findings)
    for f in findings:
        assert bool(f.why) == (not f.holds), f
    print_worked_example(result=result)
    text = " ".join(capsys.readouterr().out.split())
    assert text.count("why not, ") == sum(not f.holds for f in findings)
    energy = next(f for f in findings if f.claim.startswith("energy per query"))
    if not energy.holds:  # the figures behind the verdict: J/token x tokens per query
        assert "J/token x" in energy.why and "tokens =" in energy.why
