"""Read one system x engine x version's measured tables into numpy arrays, once.

Every latency is converted from the files' milliseconds to seconds here and
nowhere else. Duplicate rows keep the first one in file order (as the package
does). GEMM and decode-attention rows below their speed of light are raised to
it at load, as the package does before interpolating.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from costmodel.measured import sol
from costmodel.measured.catalog import Engine, SystemSpec, load_system, table_path
from costmodel.measured.interp import Grid3, SiteCurves

MS = 1e-3  # the files' latency unit, in seconds


def _read(path, columns: list[str]) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq  # a dependency of aiconfigurator-core

    table = pq.read_table(path)
    have = set(table.column_names)
    return {c: (table.column(c).to_numpy(zero_copy_only=False) if c in have else None) for c in columns}


def _codes(*keys: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """One int64 code per row for the key tuple, and each column's sorted values."""
    code = np.zeros(len(keys[0]), dtype=np.int64)
    levels = []
    for k in keys:
        values, inverse = np.unique(np.asarray(k), return_inverse=True)
        code = code * len(values) + inverse
        levels.append(values)
    return code, levels


def _plain(v):
    """A numpy scalar as the Python value it holds (keys compare as int or str)."""
    return v.item() if isinstance(v, np.generic) else v


def _first_rows(*keys: np.ndarray) -> np.ndarray:
    """Indices of the first row of each distinct key tuple, in file order."""
    _, first = np.unique(_codes(*keys)[0], return_index=True)
    return np.sort(first)


def _groups(*keys: np.ndarray):
    """Yield (key tuple, row indices in file order) for each distinct key."""
    code, _ = _codes(*keys)
    uniq, counts = np.unique(code, return_counts=True)
    order = np.argsort(code, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    for i in range(len(uniq)):
        rows = order[bounds[i]:bounds[i + 1]]
        yield tuple(_plain(np.asarray(k)[rows[0]]) for k in keys), rows


def _grid(a0, a1, a2, lat, sqrt_axis) -> Grid3:
    axes = tuple(np.unique(a).astype(float) for a in (a0, a1, a2))
    values = np.full(tuple(len(a) for a in axes), np.nan)
    pos = [np.searchsorted(ax, a) for ax, a in zip(axes, (a0, a1, a2), strict=True)]
    values[pos[0], pos[1], pos[2]] = lat
    return Grid3(axes=axes, values=values, sqrt_axis=sqrt_axis)


def _load_gemm(path, spec) -> dict[str, SiteCurves]:
    c = _read(path, ["gemm_dtype", "m", "n", "k", "latency"])
    keep = _first_rows(c["gemm_dtype"], c["m"], c["n"], c["k"])
    out = {}
    for (dtype,), rows in _groups(c["gemm_dtype"][keep]):
        r = keep[rows]
        m, n, k = (c[x][r].astype(float) for x in ("m", "n", "k"))
        lat = np.maximum(c["latency"][r] * MS, sol.gemm(spec, dtype, m, n, k))
        sites = sorted(_groups(n, k), key=lambda g: g[1][0])  # first-encounter order
        xs = tuple(m[on][np.argsort(m[on])] for _, on in sites)
        ys = tuple(lat[on][np.argsort(m[on])] for _, on in sites)
        out[dtype] = SiteCurves(np.array([key[0] for key, _ in sites]),
                                np.array([key[1] for key, _ in sites]), xs, ys)
    return out


def _n_kv_lookup(heads, kv_heads):
    return np.where(heads == kv_heads, 0, kv_heads)  # 0 marks MHA, as the package keys it


def _load_attention(path, spec, context: bool) -> dict[tuple, Grid3]:
    c = _read(path, ["attn_dtype", "kv_cache_dtype", "num_heads", "num_key_value_heads",
                     "head_dim", "window_size", "batch_size", "isl", "step", "latency"])
    window = c["window_size"] if c["window_size"] is not None else np.zeros_like(c["isl"])
    nkv = _n_kv_lookup(c["num_heads"], c["num_key_value_heads"])
    seq = c["isl"] + c["step"]  # decode rows store the KV length as isl + step
    if context:
        keys = (c["attn_dtype"], c["kv_cache_dtype"], nkv, c["head_dim"], window)
        axes = (c["num_heads"], seq, c["batch_size"])
    else:
        keys = (c["kv_cache_dtype"], nkv, c["head_dim"], window)
        axes = (c["num_heads"], c["batch_size"], seq)
    keep = _first_rows(*keys, *axes)
    out = {}
    for key, rows in _groups(*(k[keep] for k in keys)):
        r = keep[rows]
        lat = c["latency"][r] * MS
        a0, a1, a2 = (a[r].astype(float) for a in axes)
        if not context:
            kv, nkv_key, head_dim, win = key
            lat = np.maximum(lat, sol.generation_attention(spec, kv, nkv_key, head_dim, win, a0, a1, a2))
        out[key] = _grid(a0, a1, a2, lat, sqrt_axis=1 if context else None)
    return out


def _load_mla_module(path, context: bool) -> dict[tuple, Grid3]:
    c = _read(path, ["mla_dtype", "kv_cache_dtype", "gemm_type", "num_heads", "batch_size",
                     "isl", "step", "latency"])
    seq = c["isl"] + c["step"]
    keys = ((c["mla_dtype"], c["kv_cache_dtype"], c["gemm_type"]) if context
            else (c["kv_cache_dtype"], c["gemm_type"]))
    axes = ((c["num_heads"], seq, c["batch_size"]) if context
            else (c["num_heads"], c["batch_size"], seq))
    keep = _first_rows(*keys, *axes)
    out = {}
    for key, rows in _groups(*(k[keep] for k in keys)):
        r = keep[rows]
        a0, a1, a2 = (a[r].astype(float) for a in axes)
        out[key] = _grid(a0, a1, a2, c["latency"][r] * MS, sqrt_axis=1 if context else None)
    return out


@dataclass(frozen=True)
class Curve:
    """A sorted 1-D curve: x (tokens or elements) against latency_s."""

    x: np.ndarray
    latency_s: np.ndarray


def _curves(keys: tuple, x: np.ndarray, lat: np.ndarray) -> dict[tuple, Curve]:
    keep = _first_rows(*keys, x)
    out = {}
    for key, rows in _groups(*(k[keep] for k in keys)):
        r = keep[rows]
        order = np.argsort(x[r])
        out[key] = Curve(x[r][order].astype(float), lat[r][order] * MS)
    return out


def _load_moe(path) -> dict[tuple, Curve]:
    c = _read(path, ["kernel_source", "moe_dtype", "distribution", "topk", "num_experts",
                     "hidden_size", "inter_size", "moe_tp_size", "moe_ep_size", "num_tokens",
                     "latency"])
    normal = c["kernel_source"] != "moe_torch_flow_min_latency"
    keys = tuple(c[k][normal] for k in ("moe_dtype", "distribution", "topk", "num_experts",
                                        "hidden_size", "inter_size", "moe_tp_size", "moe_ep_size"))
    return _curves(keys, c["num_tokens"][normal], c["latency"][normal])


def _load_allreduce(path) -> dict[tuple, Curve]:
    c = _read(path, ["kernel_source", "backend", "num_gpus", "message_size", "latency"])
    eager = np.char.endswith(c["kernel_source"].astype(str), "_eager")
    if c["backend"] is not None:
        eager |= np.char.endswith(c["backend"].astype(str), "_eager")
    keep = ~eager
    return _curves((c["num_gpus"][keep],), c["message_size"][keep], c["latency"][keep])


def _load_nccl(path) -> dict[tuple, Curve]:
    c = _read(path, ["nccl_dtype", "op_name", "num_gpus", "message_size", "latency"])
    return _curves((c["nccl_dtype"], c["op_name"], c["num_gpus"]), c["message_size"], c["latency"])


# (attribute, family folder, file, loader). The loader takes (path, spec).
_FAMILIES = (
    ("gemm", "gemm", "gemm_perf.parquet", _load_gemm),
    ("context_attention", "attention", "context_attention_perf.parquet",
     lambda p, s: _load_attention(p, s, context=True)),
    ("generation_attention", "attention", "generation_attention_perf.parquet",
     lambda p, s: _load_attention(p, s, context=False)),
    ("context_mla_module", "mla", "mla_context_module_perf.parquet",
     lambda p, s: _load_mla_module(p, context=True)),
    ("generation_mla_module", "mla", "mla_generation_module_perf.parquet",
     lambda p, s: _load_mla_module(p, context=False)),
    ("moe", "moe", "moe_perf.parquet", lambda p, s: _load_moe(p)),
    ("custom_allreduce", "comm", "custom_allreduce_perf.parquet", lambda p, s: _load_allreduce(p)),
)


@dataclass(frozen=True)
class MeasuredTables:
    """All tables of one system x engine x version, as arrays. Absent family: None."""

    system: SystemSpec
    engine: Engine
    version: str
    gemm: dict | None = None
    context_attention: dict | None = None
    generation_attention: dict | None = None
    context_mla_module: dict | None = None
    generation_mla_module: dict | None = None
    moe: dict | None = None
    custom_allreduce: dict | None = None
    nccl: dict | None = None
    # family -> the version directory its file was read from (backward fill)
    versions: dict[str, str] = field(default_factory=dict)


FAMILIES = (*(f[0] for f in _FAMILIES), "nccl")
GQA_FAMILIES = frozenset({"gemm", "context_attention", "generation_attention", "custom_allreduce",
                          "nccl"})
MLA_MOE_FAMILIES = frozenset({"gemm", "context_mla_module", "generation_mla_module", "moe",
                              "custom_allreduce", "nccl"})


def load_tables(system: str, engine: Engine, version: str,
                families: frozenset[str] | None = None) -> MeasuredTables:
    """Read the families a step needs (default: all in ``FAMILIES``), each file once."""
    unknown = set(families or ()) - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown table families {sorted(unknown)}; known: {FAMILIES}")
    wanted = set(FAMILIES if families is None else families)
    spec = load_system(system)
    found: dict[str, object] = {}
    versions: dict[str, str] = {}
    for attr, family, file, loader in _FAMILIES:
        if attr not in wanted:
            continue
        hit = table_path(system, family, engine.value, version, file)
        if hit is not None:
            found[attr] = loader(hit[0], spec)
            versions[attr] = hit[1]
    if spec.nccl_version and "nccl" in wanted:
        hit = table_path(system, "comm", "nccl", spec.nccl_version, "nccl_perf.parquet")
        if hit is not None:
            found["nccl"] = _load_nccl(hit[0])
            versions["nccl"] = hit[1]
    return MeasuredTables(system=spec, engine=engine, version=version, versions=versions, **found)
