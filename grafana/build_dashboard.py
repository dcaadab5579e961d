"""Build the tokenfactory Grafana dashboard from code (Grafana Foundation SDK).

    python grafana/build_dashboard.py          # writes grafana/dashboards/tokenfactory.json

Every panel query is written here against the metric names the emulator
exports (`orchestrator/run/metrics.py`); `tests/unit/test_metrics_dashboard.py`
fails if a query names a metric that is not exported, and the slow
Prometheus test checks that every query returns data. Run filters use `=~`
so `$run`, `$left` and `$right` may be regular expressions (All = `.*`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.builders import timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "dashboards" / "tokenfactory.json"
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="prometheus")
UID = "tokenfactory"
RUN = 'run=~"$run"'
RATE = "$__rate_interval"
METRIC_NAME = re.compile(r"\b(tokenfactory_[a-z0-9_]+|vllm:[a-z0-9_:]+)")


def _quantiles(metric: str, sel: str, by: str = "run") -> list[tuple[str, str]]:
    return [(f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{{{sel}}}[{RATE}])))",
             f"{{{{{by}}}}} p{round(q * 100)}") for q in (0.5, 0.9, 0.99)]


def _rate(metric: str, sel: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{{{sel}}}[{RATE}]))"


def _tokens_per_gpu(sel: str) -> str:
    return (f"{_rate('tokenfactory_output_tokens_total', sel, 'run')} / "
            f"sum by (run) (tokenfactory_pool_gpus{{{sel}}})")


# (row, [(title, unit, [(expr, legend), ...]), ...])
ROWS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]]]]]] = [
    ("Pools: occupancy and backlog", [
        ("Occupancy per pool", "percentunit",
         [(f"tokenfactory_pool_occupancy_ratio{{{RUN}}}", "{{run}} {{pool}}")]),
        ("Backlog per pool (queued at workers)", "short",
         [(f"tokenfactory_pool_queue_requests{{{RUN}}}", "{{run}} {{pool}}")]),
        ("Admission queue, ready buffer, backlog", "short",
         [(f"tokenfactory_admission_queue_requests{{{RUN}}}", "{{run}} admission queue"),
          (f"tokenfactory_ready_buffer_requests{{{RUN}}}", "{{run}} ready buffer"),
          (f"tokenfactory_backlog_requests{{{RUN}}}", "{{run}} backlog")]),
        ("Batch size per pool", "short",
         [(f"tokenfactory_pool_running_requests{{{RUN}}}", "{{run}} {{pool}} running"),
          (f"tokenfactory_pool_slots_requests{{{RUN}}}", "{{run}} {{pool}} slots")]),
        ("Decode starvation and oscillation index", "short",
         [(_rate("tokenfactory_decode_starved_seconds_total", RUN, "run"),
           "{{run}} starved fraction"),
          (f"tokenfactory_oscillation_index{{{RUN}}}", "{{run}} oscillation index")]),
    ]),
    ("Admission", [
        ("Admission rate", "reqps",
         [(_rate("tokenfactory_admitted_requests_total", RUN, "run"), "{{run}} admitted"),
          (_rate("tokenfactory_requests_completed_total", RUN, "run"), "{{run}} completed"),
          (_rate("tokenfactory_requests_rejected_total", RUN, "run"), "{{run}} rejected")]),
        ("Admission decisions by reason", "short",
         [(_rate("tokenfactory_admission_decisions_total", RUN, "run, reason"),
           "{{run}} {{reason}}")]),
    ]),
    ("Latency", [
        ("TTFT quantiles", "s", _quantiles("tokenfactory_request_ttft_seconds", RUN)),
        ("TPOT quantiles", "s", _quantiles("tokenfactory_request_tpot_seconds", RUN)),
        ("End-to-end latency quantiles", "s",
         _quantiles("tokenfactory_request_e2e_seconds", RUN)),
    ]),
    ("Throughput and energy", [
        ("Output tokens/s per GPU", "short", [(_tokens_per_gpu(RUN), "{{run}}")]),
        ("Tokens/s", "short",
         [(_rate("tokenfactory_output_tokens_total", RUN, "run"), "{{run}} output"),
          (_rate("tokenfactory_input_tokens_total", RUN, "run"), "{{run}} input")]),
        ("Simulated power", "watt",
         [(_rate("tokenfactory_energy_joules_total", RUN, "run"), "{{run}}")]),
    ]),
    ("KV cache and memory", [
        ("KV traffic per tier pair", "Bps",
         [(_rate("tokenfactory_kv_moved_bytes_total", RUN, "run, src_tier, dst_tier"),
           "{{run}} {{src_tier}} -> {{dst_tier}}")]),
        ("KV lookups per tier", "short",
         [(_rate("tokenfactory_kv_lookup_tokens_total", RUN, "run, tier, result"),
           "{{run}} {{tier}} {{result}}")]),
        ("KV resident per tier", "bytes",
         [(f"tokenfactory_kv_resident_bytes{{{RUN}}}", "{{run}} {{tier}}")]),
        # Every lookup starts at HBM, so HBM's hits plus misses are the tokens looked up.
        ("KV tier hit rate (share of prefix lookups each tier served)", "percentunit",
         [(_rate("tokenfactory_kv_lookup_tokens_total", RUN + ', result="hit"', "run, tier")
           + " / on (run) group_left "
           + _rate("tokenfactory_kv_lookup_tokens_total", RUN + ', tier="hbm"', "run"),
           "{{run}} {{tier}}"),
          (_rate("tokenfactory_kv_local_hit_tokens_total", RUN, "run")
           + " / on (run) "
           + _rate("tokenfactory_kv_lookup_tokens_total", RUN + ', tier="hbm"', "run"),
           "{{run}} own HBM (nothing moved)")]),
        ("KV link utilisation (busiest 10 links)", "percentunit",
         [(f"topk(10, max by (run, link) (tokenfactory_kv_link_utilisation_ratio{{{RUN}}}))",
           "{{run}} {{link}}")]),
        ("KV bytes per copy path", "Bps",
         [(_rate("tokenfactory_kv_path_bytes_total", RUN, "run, path"), "{{run}} {{path}}")]),
        ("Resident HBM per GPU, per worker", "bytes",
         [(f"tokenfactory_worker_hbm_per_gpu_bytes{{{RUN}}}", "{{run}} {{worker}}")]),
    ]),
    ("Reconfiguration", [
        ("Workers per pool", "short",
         [(f"tokenfactory_pool_workers{{{RUN}}}", "{{run}} {{pool}}")]),
        ("Reconfigurations", "short",
         [(f"sum by (run, from_pool, to_pool) (increase("
           f"tokenfactory_reconfigurations_total{{{RUN}}}[{RATE}]))",
           "{{run}} {{from_pool}} -> {{to_pool}}")]),
    ]),
]


def _side_by_side() -> list[tuple[str, str, list[tuple[str, str]]]]:
    panels = []
    for side in ("left", "right"):
        sel = f'controller=~"${side}"'
        panels += [
            (f"${side}: decode occupancy", "percentunit",
             [(f'tokenfactory_pool_occupancy_ratio{{{sel}, phase="decode"}}',
               "{{run}} {{pool}}")]),
            (f"${side}: admission rate", "reqps",
             [(_rate("tokenfactory_admitted_requests_total", sel, "run"), "{{run}}")]),
            (f"${side}: TTFT quantiles", "s",
             _quantiles("tokenfactory_request_ttft_seconds", sel)),
        ]
    # Interleave so each metric's two panels sit next to each other.
    half = len(panels) // 2
    return [p for pair in zip(panels[:half], panels[half:], strict=True) for p in pair]


def _panel(title: str, unit: str, targets: list[tuple[str, str]], width: int):
    panel = (timeseries.Panel().title(title).unit(unit).datasource(DATASOURCE)
             .span(width).height(8))
    for ref, (expr, legend) in zip("ABCDEFGH", targets, strict=False):
        panel = panel.with_target(prom.Dataquery().expr(expr).legend_format(legend)
                                  .ref_id(ref).range())
    return panel


def _variable(name: str, label: str, query: str, default: str | None):
    var = (db.QueryVariable(name).label(label).datasource(DATASOURCE).query(query)
           .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).include_all(True)
           .all_value(".*"))
    if default is None:
        return var.multi(True).current(dm.VariableOption(selected=True, text="All",
                                                         value="$__all"))
    return var.current(dm.VariableOption(selected=True, text=default, value=default))


def build() -> dict:
    runs = "label_values(tokenfactory_requests_submitted_total, run)"
    controllers = "label_values(tokenfactory_requests_submitted_total, controller)"
    dash = (db.Dashboard("tokenfactory").uid(UID).tags(["tokenfactory"]).refresh("10s")
            .time("now-1h", "now").timezone("browser").editable()
            .with_variable(_variable("run", "run", runs, None))
            .with_variable(_variable("left", "left controller", controllers, "retire"))
            .with_variable(_variable("right", "right controller", controllers, "buffered")))
    for row, panels in [*ROWS, ("Two controllers side by side", _side_by_side())]:
        dash = dash.with_row(db.Row(row))
        width = 12 if row.startswith("Two") or len(panels) % 2 == 0 else 8
        for title, unit, targets in panels:
            dash = dash.with_panel(_panel(title, unit, targets, width))
    return json.loads(json.dumps(dash.build(), cls=JSONEncoder))


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, expression) of every target of every panel."""
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def metric_names(expr: str) -> set[str]:
    return set(METRIC_NAME.findall(expr))


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUTPUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(build(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
