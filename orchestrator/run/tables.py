"""The human-readable summary: one column per run."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

ROWS = (
    ("sessions started / asked for", (("load", "sessions_started"),
                                      ("load", "sessions_asked")), "{:,.0f}"),
    ("sessions per hour achieved / asked", (("load", "sessions_per_hour_achieved"),
                                            ("load", "sessions_per_hour_asked")), "{:,.1f}"),
    ("calls submitted", ("requests", "submitted"), "{:,.0f}"),
    ("calls completed", ("requests", "completed"), "{:,.0f}"),
    ("calls rejected", ("requests", "rejected"), "{:,.0f}"),
    ("calls lost", ("requests", "lost"), "{:,.0f}"),
    ("TTFT p50 / p99 (s)", (("ttft_s", "p50"), ("ttft_s", "p99")), "{:.2f}"),
    ("calls preempted", ("requests", "preempted"), "{:,.0f}"),
    ("ITL p50 / p99 (ms)", (("itl_s", "p50"), ("itl_s", "p99")), "ms"),
    ("decode wait p50 / p99 (s)", (("latency_breakdown_s", "decode_wait", "p50"),
                                   ("latency_breakdown_s", "decode_wait", "p99")), "{:.2f}"),
    ("KV transfer p50 / p99 (s)", (("latency_breakdown_s", "transfer", "p50"),
                                   ("latency_breakdown_s", "transfer", "p99")), "{:.3f}"),
    # Rates in the load window (docs/metrics.md), then over the whole run, drain included.
    ("output tokens/s: load window / run", (("throughput", "window", "output_tokens_per_s"),
                                            ("throughput", "output_tokens_per_s")), "{:,.1f}"),
    ("output tokens/s per GPU: load window", ("throughput", "window",
                                              "output_tokens_per_s_per_gpu"), "{:,.2f}"),
    ("goodput tokens/s: load window / run", (("goodput", "window", "output_tokens_per_s"),
                                             ("goodput", "output_tokens_per_s")), "{:,.1f}"),
    ("oscillation index", ("control", "oscillation_index"), "{:.3f}"),
    ("ringing period model / measured (s)", (("control", "ringing_period_s", "predicted"),
                                             ("control", "ringing_period_s", "measured")),
     "{:.1f}"),
    ("decode starvation", ("control", "decode_starvation_fraction"), "{:.3f}"),
    ("admission bound (share of periods)", ("control", "admission_bound_fraction"), "{:.3f}"),
    ("decode occupancy mean", ("control", "decode_occupancy_mean"), "{:.3f}"),
    ("occupancy peak-to-trough", ("control", "decode_occupancy_peak_to_trough"), "{:.3f}"),
    ("admission rate variation", ("control", "admission_rate_variation"), "{:.3f}"),
    ("reconfigurations (/h)", (("control", "reconfigurations"),
                               ("control", "reconfigurations_per_hour")), "{:.1f}"),
    ("decode slots", ("resources", "decode_slots"), "{:,.0f}"),
    ("peak HBM per GPU (GB)", ("resources", "peak_hbm_bytes_per_gpu"), "GB"),
    ("KV moved (GB)", ("resources", "kv_bytes_moved"), "GB"),
    ("energy per call (kJ)", ("energy", "joules_per_call"), "kJ"),
    ("simulated / wall (s)", (("sim", "simulated_s"), ("sim", "wall_s")), "{:,.1f}"),
)


def figure_at(summary: dict, path: tuple[str, ...]):
    """The figure at `path`, None where the summary has none (an older summary)."""
    value = summary
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _fmt(value, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "ms":
        return f"{value * 1e3:.1f}"
    if fmt == "GB":
        return f"{value / 1e9:,.1f}"
    if fmt == "kJ":
        return f"{value / 1e3:,.2f}"
    return fmt.format(value)


def summary_rows(summaries: dict[str, dict]) -> list[tuple[str, list[str]]]:
    """(label, one formatted cell per run) for every row of the summary."""
    rows = []
    for label, path, fmt in ROWS:
        cells = []
        for s in summaries.values():
            if isinstance(path[0], tuple):
                cells.append(" / ".join(_fmt(figure_at(s, p), fmt) for p in path))
            else:
                cells.append(_fmt(figure_at(s, path), fmt))
        rows.append((label, cells))
    return rows


def print_rows(title: str, names, rows: list[tuple[str, list[str]]],
               first: str = "figure") -> None:
    """A table of figures (rows) by run (columns `names`) on the console."""
    table = Table(title=title)
    table.add_column(first)
    for name in names:
        table.add_column(name, justify="right")
    for label, cells in rows:
        table.add_row(label, *cells)
    print_table(table)


def print_table(table: Table) -> None:
    """Print a rich table on stdout; to a file or a pipe at its natural width, so that no
    cell is cut or wrapped to fit the 80 columns rich assumes there."""
    console = Console()
    if not console.is_terminal:
        from rich.measure import Measurement

        width = Measurement.get(console, console.options.update(width=10_000), table).maximum
        console = Console(width=max(console.width, width))
    console.print(table)


def null_notes(summaries: dict[str, dict]) -> list[str]:
    """One line per run whose control figures are null, saying why (docs/metrics.md)."""
    return [f"note: {name}: oscillation index and measured ringing period not reported: "
            f"{why}" for name, s in summaries.items()
            if (why := figure_at(s, ("control", "oscillation_null_reason")))]


def unbound_note(summaries: dict[str, dict]) -> str | None:
    """A line when two or more controllers were compared and none's admission bound in any
    period: each admitted every queued call at once, so the controllers ran one run."""
    bound = [figure_at(s, ("control", "admission_bound_fraction")) for s in summaries.values()]
    if len(bound) < 2 or any(b is None or b > 0 for b in bound):
        return None
    occupancy = max(figure_at(s, ("control", "decode_occupancy_mean")) or 0.0
                    for s in summaries.values())
    return ("note: no controller's admission bound in any period (decode occupancy mean "
            f"{occupancy:.3f} at most): each admitted every queued call at once, so they "
            "differ only in what they predict; the load where they differ is the demo's "
            "(`tokenfactory demo TRACE...`, docs/demo.md)")


def summary_table(summaries: dict[str, dict], title: str = "replay summary") -> None:
    print_rows(title, summaries, summary_rows(summaries))
    for line in null_notes(summaries):
        print(line)
