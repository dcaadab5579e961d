"""A worker's pricer is one interface (workers.cost_source.CostSource): the roofline's
StepPricer implements it, and the workers and the run's quotes ask nothing else of
their pricer."""

from __future__ import annotations

import ast
from pathlib import Path

from costmodel.hardware import load_hardware
from costmodel.layout import Layout
from costmodel.model import load_model
from workers.cost_source import CostSource
from workers.pricing import StepPricer

ROOT = Path(__file__).resolve().parents[2]
USERS = ("workers/fill.py", "workers/decode.py", "workers/mixed.py", "workers/decode_kv.py",
         "workers/kv_io.py", "orchestrator/run/quotes.py")


def interface() -> set[str]:
    names = set(CostSource.__annotations__)
    names |= {n for n, v in vars(CostSource).items() if callable(v) and not n.startswith("_")}
    return names


def pricer_reads(source: str) -> set[str]:
    """Attributes read on anything named `pricer` (`pricer.x`, `self.pricer.x`) or on
    the quotes' pricers (`self._pricers[pool].x`)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if isinstance(base, ast.Subscript):
            base = base.value
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
        if name in ("pricer", "_pricers"):
            found.add(node.attr)
    return found


def test_the_roofline_pricer_is_a_cost_source():
    pricer = StepPricer(load_model("llama-3.1-70b"), load_hardware("h100"), Layout(tp=8))
    assert isinstance(pricer, CostSource)
    missing = [n for n in interface() if not hasattr(pricer, n)]
    assert missing == []


def test_the_reader_sees_a_pricers_attributes():
    assert pricer_reads("self.pricer.fill_s(1)\npricer.eff.x\nself._pricers[p].kv_bytes") == {
        "fill_s", "eff", "kv_bytes"}


def test_workers_ask_their_pricer_only_what_the_interface_names():
    used = set()
    for path in USERS:
        used |= pricer_reads((ROOT / path).read_text())
    assert used, "no pricer use found: the reader is out of date"
    assert used <= interface(), sorted(used - interface())
