"""`tokenfactory compare`: the same sessions and seed under several controllers, on
several clusters (`--clusters`, e.g. aggregated against disaggregated), or under several
KV placement policies (`--kv-policies offload,retain`), side by side."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from orchestrator.cli._common import UserError, add_overwrite_option, comma_names, print_json
from orchestrator.cli._replay_opts import (
    KV_POLICIES,
    add_run_options,
    add_trace_args,
    settings_from_args,
    trace_paths,
)
from orchestrator.cli._replay_run import (
    out_dir_or_fail,
    prepare_or_fail,
    replay_into,
    warn_if_trace_runs_out,
)
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import PluginError
from orchestrator.plugins import load_policy
from orchestrator.run.output import run_dir, write_json
from orchestrator.run.settings import DEFAULT_CONTROLLER, RunSettings

DEFAULT_CONTROLLERS = "retire,buffered"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="replay under several controllers or clusters and compare",
                       description="Replay the same sessions and seed under each controller, or "
                                   "with one controller on each cluster (--clusters); print "
                                   "them side by side and write an HTML report.")
    add_trace_args(p)
    p.add_argument("--controllers", default=None,
                   help=f"comma-separated controllers (default: {DEFAULT_CONTROLLERS}; with "
                        f"--clusters one controller, default: {DEFAULT_CONTROLLER})")
    p.add_argument("--clusters", default=None, metavar="A,B",
                   help="comma-separated cluster presets or TOML files: run the trace and "
                        "controller on each (replaces --cluster)")
    p.add_argument("--kv-policies", default=None, metavar="A,B",
                   help="comma-separated KV placement policies (offload, retain): run the "
                        "trace and controller under each (replaces --kv-policy)")
    add_run_options(p, controller=False)
    p.add_argument("--out", default="compare-out", metavar="DIR",
                   help="write into DIR, whole or not at all: report.html, compare.json (every "
                        "summary) and each run's files, prefixed by its label: "
                        "LABEL-summary.json, LABEL-series.csv, LABEL-decisions.jsonl, "
                        "LABEL-metrics.om.gz (--metrics) (default: compare-out; a DIR that "
                        "exists is refused unless empty, or an earlier run and --overwrite)")
    add_overwrite_option(p)
    p.set_defaults(run=run)


def _given(text: str | None, default: str) -> str:
    """The option's text, or `default` when it was not given (an empty text is given)."""
    return default if text is None else text


def parse_controllers(text: str) -> list[str]:
    names = comma_names("--controllers", text)
    for name in names:
        try:
            load_policy(name, ControlConfig())
        except PluginError as exc:
            raise UserError(f"--controllers: {exc}") from None
    if len(set(names)) != len(names):
        raise UserError(f"--controllers: {text!r} names a controller twice")
    return names


def parse_clusters(text: str, model: str) -> dict[str, str]:
    """label -> preset or file, each read and bound to `model` before anything runs.
    A label is the preset's name or the file's stem (its path if two stems clash)."""
    from costmodel.errors import CostModelError
    from costmodel.model import load_model
    from workers.cluster_toml import load_cluster

    names = comma_names("--clusters", text)
    if len(names) < 2:
        raise UserError(f"--clusters: expected two or more comma-separated clusters, got {text!r}")
    if len(set(names)) != len(names):
        raise UserError(f"--clusters: {text!r} names a cluster twice")
    try:
        spec_model = load_model(model)
    except CostModelError:
        spec_model = None  # reported with its option by the first run's preparation
    for name in names:
        try:
            spec = load_cluster(name)
        except CostModelError as exc:  # (a file's own error names it)
            raise UserError(f"--clusters: {exc}") from None
        try:
            if spec_model is not None:
                spec.bind(spec_model)
        except CostModelError as exc:
            raise UserError(f"--clusters: {name} with model {spec_model.name}: {exc}") from None
    stems = [Path(n).stem for n in names]
    unique = len(set(stems)) == len(stems)
    return {(stem if unique else name): name for stem, name in zip(stems, names, strict=True)}


def parse_kv_policies(text: str) -> list[str]:
    names = comma_names("--kv-policies", text)
    if len(names) < 2:
        raise UserError(f"--kv-policies: expected two or more comma-separated policies, "
                        f"got {text!r}")
    for name in names:
        if name not in KV_POLICIES:
            raise UserError(f"--kv-policies: unknown policy {name!r}; choose from "
                            f"{', '.join(KV_POLICIES)}")
    if len(set(names)) != len(names):
        raise UserError(f"--kv-policies: {text!r} names a policy twice")
    return names


def _run_all(args: argparse.Namespace, runs: dict[str, RunSettings], title: str,
             notes: str = "", claims_of: Callable[[dict], Sequence] | None = None) -> dict:
    """Replay each labelled setting on the same sessions; write the report when asked
    (with `claims_of(summaries)` judged there, when given: `write_report`'s claims)."""
    out = out_dir_or_fail(args.out, args.overwrite)
    by_cluster: dict[str, object] = {}  # the sessions are read once per cluster
    for settings in runs.values():
        if settings.cluster not in by_cluster:
            by_cluster[settings.cluster] = prepare_or_fail(trace_paths(args), args.format,
                                                           settings)
    prepared = {label: by_cluster[s.cluster] for label, s in runs.items()}
    first = next(iter(runs))  # the same sessions and load options in every run
    warn_if_trace_runs_out(prepared[first], runs[first])
    results, summaries = {}, {}
    with run_dir(out, args.overwrite) if out is not None else nullcontext(None) as directory:
        for label, settings in runs.items():
            results[label], summaries[label] = replay_into(prepared[label], settings, directory,
                                                           args, prefix=f"{label}-")
        if directory is not None:
            from orchestrator.run.report import write_report

            write_json(directory / "compare.json", {"runs": summaries})
            claims = claims_of(summaries) if claims_of is not None else ()
            write_report(directory / "report.html", results, summaries, title, notes, claims)
    return summaries


def compare(args: argparse.Namespace, names: list[str], title: str, notes: str = "",
            claims_of: Callable[[dict], Sequence] | None = None) -> dict:
    """The same sessions and seed under each controller in `names`."""
    base = settings_from_args(args, controller=names[0])
    return _run_all(args, {name: replace(base, controller=name) for name in names}, title,
                    notes, claims_of)


def compare_clusters(args: argparse.Namespace, clusters: dict[str, str], controller: str,
                     title: str) -> dict:
    """The same sessions, seed and controller on each cluster in `clusters`."""
    base = settings_from_args(args, controller=controller)
    return _run_all(args, {label: replace(base, cluster=path)
                           for label, path in clusters.items()}, title)


def compare_kv_policies(args: argparse.Namespace, policies: list[str], controller: str,
                        title: str) -> dict:
    """The same sessions, seed, cluster and controller under each KV placement policy."""
    base = settings_from_args(args, controller=controller)
    return _run_all(args, {name: replace(base, kv_policy=name) for name in policies}, title)


# The side-by-side of clusters: (label, summary paths, format); ITL is the summary's
# `itl_s` where it has one, else `tpot_s`.
CLUSTER_ROWS = (
    ("calls completed", (("requests", "completed"),), "{:,.0f}"),
    ("GPUs", (("resources", "gpus"),), "{:,.0f}"),
    ("goodput tokens/s, load window", (("goodput", "window", "output_tokens_per_s"),),
     "{:,.1f}"),
    ("TTFT p50 / p99 (s)", (("ttft_s", "p50"), ("ttft_s", "p99")), "{:.2f}"),
    ("ITL p50 / p99 (ms)", (("itl_s", "p50"), ("itl_s", "p99")), "ms"),
    ("output tokens/s per GPU, load window", (("throughput", "window",
                                               "output_tokens_per_s_per_gpu"),), "{:,.2f}"),
    ("energy per call (kJ)", (("energy", "joules_per_call"),), "kJ"),
)
# And, for KV placement policies, where prefixes were found and what moved.
KV_ROWS = (
    ("peak HBM per GPU (GB)", (("resources", "peak_hbm_bytes_per_gpu"),), "GB"),
    ("prefix tokens from HBM", (("cache", "hbm_hit_share"),), "{:.1%}"),
    ("KV copies per input token", (("kv", "copies_per_input_token"),), "{:.2f}"),
    ("KV bytes moved (TB)", (("kv", "total_bytes_moved"),), "TB"),
)


def _figure(summary: dict, *path: str):
    from orchestrator.run.tables import figure_at

    if path[0] == "itl_s" and "itl_s" not in summary:
        path = ("tpot_s", *path[1:])
    if path == ("kv", "total_bytes_moved"):
        path = ("kv", "bytes_moved", "total")
    value = figure_at(summary, path)
    return None if value is None else float(value)


_SCALES = {"ms": 1e-3, "kJ": 1e3, "GB": 1e9, "TB": 1e12}


def cluster_rows(summaries: dict[str, dict], table=CLUSTER_ROWS) -> list[tuple[str, list[str]]]:
    rows = []
    for label, paths, fmt in table:
        cells = []
        for s in summaries.values():
            parts = []
            for path in paths:
                v = _figure(s, *path)
                parts.append("-" if v is None else
                             f"{v / _SCALES[fmt]:,.{1 if fmt == 'ms' else 2}f}"
                             if fmt in _SCALES else fmt.format(v))
            cells.append(" / ".join(parts))
        rows.append((label, cells))
    return rows


def print_cluster_table(summaries: dict[str, dict], title: str, table=CLUSTER_ROWS) -> None:
    from orchestrator.run.tables import print_rows

    print_rows(title, summaries, cluster_rows(summaries, table))


def run(args: argparse.Namespace) -> int:
    if args.kv_policies is not None:
        if args.clusters is not None:
            raise UserError("--kv-policies and --clusters: compare one of them at a time")
        controllers = parse_controllers(_given(args.controllers, DEFAULT_CONTROLLER))
        if len(controllers) != 1:
            raise UserError(f"--controllers: with --kv-policies, name one controller, got "
                            f"{args.controllers!r}")
        policies = parse_kv_policies(args.kv_policies)
        title = f"tokenfactory compare ({controllers[0]}): " + " vs ".join(policies)
        summaries = compare_kv_policies(args, policies, controllers[0], title)
    elif args.clusters is not None:
        controllers = parse_controllers(_given(args.controllers, DEFAULT_CONTROLLER))
        if len(controllers) != 1:
            raise UserError(f"--controllers: with --clusters, name one controller, got "
                            f"{args.controllers!r}")
        clusters = parse_clusters(args.clusters, args.model)
        title = f"tokenfactory compare ({controllers[0]}): " + " vs ".join(clusters)
        summaries = compare_clusters(args, clusters, controllers[0], title)
    else:
        names = parse_controllers(_given(args.controllers, DEFAULT_CONTROLLERS))
        title = "tokenfactory compare: " + " vs ".join(names)
        summaries = compare(args, names, title)
    from orchestrator.cli._replay_run import exit_status

    code = max((exit_status(s) for s in summaries.values()), default=0)
    if args.json:
        print_json({"runs": summaries})
        return code
    if args.kv_policies is not None:
        print_cluster_table(summaries, title="compare KV placement policies",
                            table=CLUSTER_ROWS + KV_ROWS)
    elif args.clusters is not None:
        print_cluster_table(summaries, title="compare clusters")
    else:
        from orchestrator.run.tables import summary_table, unbound_note

        summary_table(summaries, title="compare")
        if (note := unbound_note(summaries)) is not None:
            print(note)
    if args.out:
        print(f"report: {args.out}/report.html")
    return code
