"""`tokenfactory network`: the storage traffic a KV migration pattern puts on a cluster's links.

The source essay's planning example: N active sessions, each moving its KV
(context x KV bytes per token) into a decode worker once every T seconds, is
N x bytes / T of storage traffic. Given a cluster, this command says which links
that traffic crosses (workers.network), how loaded each would be, which saturate
first, and how many sessions the tightest link sustains.
"""

from __future__ import annotations

import argparse

from orchestrator.cli._common import UserError, positive_float, positive_int, print_json
from orchestrator.run.settings import DEFAULT_CLUSTER, DEFAULT_MODEL

SOURCES = ("pfs", "dram", "peer")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "network", help="storage traffic of a KV migration pattern on a cluster's links",
        description="Load of every link when SESSIONS sessions each move their KV into a "
                    "worker of --pool once every --every seconds, from the PFS, the DRAM of "
                    "the worker's node, or another worker's HBM; which links saturate and "
                    "how many sessions the tightest one sustains.")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"model preset or JSON file (default: {DEFAULT_MODEL}); sizes KV per "
                        "token when --context-tokens is given")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER,
                   help=f"cluster preset or TOML file (default: {DEFAULT_CLUSTER})")
    p.add_argument("--sessions", type=positive_int, default=10_000, metavar="N",
                   help="active sessions (default 10,000)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--gb-per-move", type=positive_float, metavar="GB",
                      help="KV moved per session per move (default 7, the essay's 100k "
                           "tokens x 70 kB)")
    size.add_argument("--context-tokens", type=positive_int, metavar="T",
                      help="size each move as T tokens of the model's KV instead")
    p.add_argument("--every", type=positive_float, default=10.0, metavar="S",
                   help="seconds between a session's moves (default 10)")
    p.add_argument("--from", dest="source", choices=SOURCES, default="pfs",
                   help="where the KV comes from (default pfs)")
    p.add_argument("--pool", default="decode", help="the pool receiving it (default decode)")
    p.add_argument("--top", type=positive_int, default=8, metavar="K",
                   help="links to list, most loaded first (default 8)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def traffic(args: argparse.Namespace) -> dict:
    from costmodel.errors import CostModelError
    from costmodel.model import load_model
    from workers.cluster_toml import load_cluster
    from workers.network import fabric_links, migration_demands, steady_load

    try:
        model = load_model(args.model)
    except CostModelError as exc:
        raise UserError(f"--model {args.model}: {exc}") from None
    try:
        bound = load_cluster(args.cluster).bind(model)
    except CostModelError as exc:
        raise UserError(f"--cluster {args.cluster}: {exc}") from None
    if args.context_tokens is not None:
        bytes_per_move = args.context_tokens * model.kv_bytes_per_token()
    else:
        bytes_per_move = (args.gb_per_move or 7.0) * 1e9
    try:
        load = steady_load(bound, migration_demands(bound, args.sessions, bytes_per_move,
                                                    args.every, args.source, args.pool))
    except ValueError as exc:
        raise UserError(f"--pool {args.pool}: {exc}") from None
    capacity = {link.name: link.bytes_per_s for link in fabric_links(bound)}
    used = sorted(((load[n] / capacity[n], n) for n in load if load[n] > 0), reverse=True)
    tightest = used[0][0]
    demand = args.sessions * bytes_per_move / args.every
    return {
        "cluster": bound.spec.name, "source": args.source, "pool": args.pool,
        "sessions": args.sessions, "bytes_per_move": bytes_per_move, "every_s": args.every,
        "demand_bytes_per_s": demand, "demand_bits_per_s": 8 * demand,
        "sessions_sustained": int(args.sessions / tightest),
        "links": [{"link": n, "load_bytes_per_s": load[n], "capacity_bytes_per_s": capacity[n],
                   "utilisation": u} for u, n in used],
    }


def run(args: argparse.Namespace) -> int:
    report = traffic(args)
    if args.json:
        print_json(report)
        return 0
    from orchestrator.run.tables import print_rows

    print(f"{report['sessions']:,} sessions x {report['bytes_per_move'] / 1e9:.2f} GB every "
          f"{report['every_s']:g} s from {report['source']} into {report['pool']}: "
          f"{report['demand_bytes_per_s'] / 1e12:.2f} TB/s "
          f"({report['demand_bits_per_s'] / 1e12:.1f} Tb/s) on {report['cluster']}")
    rows = [(row["link"], [f"{row['load_bytes_per_s'] / 1e9:,.0f}",
                           f"{row['capacity_bytes_per_s'] / 1e9:,.0f}",
                           f"{row['utilisation']:.2f}" + (" saturated" if row["utilisation"] > 1
                                                          else "")])
            for row in report["links"][:args.top]]
    print_rows("link load (GB/s)", ["load", "capacity", "utilisation"], rows, first="link")
    print(f"the tightest link sustains {report['sessions_sustained']:,} sessions")
    return 0
