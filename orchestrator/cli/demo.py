"""`tokenfactory demo`: the embedded default run."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the embedded default on the bundled sample")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from costmodel.worked_example import print_worked_example

    print_worked_example()
    return 0
