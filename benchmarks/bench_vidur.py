"""Vidur on the same request lengths as bench_open_loop.py: wall time and peak RSS.

Vidur (https://github.com/microsoft/vidur, Agrawal et al., MLSys 2024) simulates LLM
serving replicas from per-operator profiles. This runs it on the first 4,000 and 10,000
requests of the Azure conversation trace 2023 (the same arrivals and prompt and output
lengths bench_open_loop.py replays), on the layout of
examples/clusters/hgx-h100-llama70b.toml: one H100 DGX node, two replicas of TP 4, up to
128 sequences and 4,096 batched tokens a step with chunked prefill (Vidur's Sarathi
scheduler, chunk 4,096). Vidur ships H100 profiles for Llama-2-70B, not Llama-3.1-70B:
the same layer shapes (80 layers, hidden 8,192, 64 query and 8 KV heads, FFN 28,672); only
the vocabulary differs. Each run is `python -m vidur.main` under /usr/bin/time -v; the first
also fits Vidur's execution-time models (timed and reported on its own), the timed runs
then find them in the cache; wall time and maximum RSS are read from time's report.

    python benchmarks/bench_vidur.py --vidur-src DIR --vidur-python PY [--sizes 4000,10000]

DIR is a Vidur checkout (its data/ directory is read relative to it) and PY a Python with
Vidur's requirements installed (`pip install -r DIR/requirements.txt`). Skips with a one-line
reason when either is missing.

The attention profiles (data/profiling/compute/*/*/attention.csv) are stored in Git LFS;
a checkout without LFS has pointers there. Then, with --stand-in-attention, this writes a
stand-in on the grid Vidur's attention profiler measures (vidur/profiling/utils), its
times from a roofline of the H100 (989 TFLOP/s BF16 dense, 3.35 TB/s HBM3: NVIDIA H100
datasheet) at 60% and 80% efficiency. Vidur's cost to run depends on the profile's size
(its models are fitted on every row) and on the events of the run, not on the values, but
its latency figures are then not Vidur's own: docs/performance.md says which runs used it.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replay_runner import AZURE_CONV, positive_ints, shared_missing

MODEL = "meta-llama/Llama-2-70b-hf"
DEVICE = "h100"
NETWORK = "h100_dgx"
TP = 4
REPLICAS = 2
BATCH_CAP = 128
CHUNK_TOKENS = 4096
# The longest Azure conversation request among the first 10,000 is 14,089 tokens (prompt
# plus output); Vidur cuts prompts so that the total fits max_tokens, so it is set above.
MAX_TOKENS = 16384
BLOCK_TOKENS = 16  # Vidur's default KV block
# Vidur fits a random forest per operator, choosing its size by grid search with k-fold
# cross-validation. Its default grid (3 x 3 x 3 forests, 10 folds) fits for hours on two
# cores; "single" fits one forest of the default grid's smallest size, depth 16, 2 folds.
# Fitted models are cached, so the timed runs after the first do not fit.
_RF = "--random_forrest_execution_time_predictor_config_"
FIT_GRIDS = {
    "default": [],
    "single": [f"{_RF}num_estimators", "250", f"{_RF}max_depth", "16",
               f"{_RF}min_samples_split", "2", f"{_RF}k_fold_cv_splits", "2"],
}

# Roofline of one H100 SXM5 (NVIDIA H100 datasheet: 989 TFLOP/s dense BF16, 3.35 TB/s).
H100_FLOPS = 989e12 * 0.6
H100_BYTES_PER_S = 3.35e12 * 0.8
HEAD_DIM = 128
Q_HEADS_PER_GPU = 64 // TP
KV_HEADS_PER_GPU = 8 // TP
# KV tokens one GPU holds at TP 4: 80 GB x 0.9 less a quarter of 140 GB of weights, over
# 80 layers x K and V x 2 heads x 128 x 2 bytes.
KV_TOKENS_LIMIT = int((80e9 * 0.9 - 140e9 / TP) / (80 * 2 * KV_HEADS_PER_GPU * HEAD_DIM * 2))


def _steps(*spans: tuple[int, int, int]) -> list[int]:
    out: list[int] = []
    for start, stop, step in spans:
        out.extend(v for v in range(start, stop + 1, step) if not out or v > out[-1])
    return out


def attention_grid(max_seq: int, max_batch: int) -> list[tuple[int, int, int, bool]]:
    """(prefill chunk, KV tokens, batch, is prefill): the shapes Vidur's attention
    profiler measures (chunked prefills, whole prefills, decodes), under the memory limit."""
    chunks = [c for c in _steps((64, 128, 16), (128, 1024, 32), (1024, 4096, 64),
                                (4096, 16384, 128), (16384, 65536, 256)) if c <= max_seq]
    seqs = [s for s in _steps((0, 1024, 32), (1024, 4096, 64), (4096, 65536, 256))
            if s <= max_seq]
    batches = [b for b in _steps((1, 128, 1), (128, 1024, 8)) if b <= max_batch]
    rows = [(c, i * c, 1, True) for c in chunks for i in range(max_seq // c)]
    rows += [(s, 0, 1, True) for s in seqs if s > 0]
    rows += [(0, s, b, False) for s in seqs if s > 0 for b in batches]
    return [r for r in rows if r[2] * (r[0] + r[1]) <= KV_TOKENS_LIMIT]


def _roofline_ms(flops: float, nbytes: float) -> float:
    return 1e3 * max(flops / H100_FLOPS, nbytes / H100_BYTES_PER_S) + 0.01


def write_stand_in_attention(path: Path) -> int:
    kv_bytes_per_token = 2 * KV_HEADS_PER_GPU * HEAD_DIM * 2
    rows = attention_grid(MAX_TOKENS, BATCH_CAP)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["time_stats.attn_prefill.median", "time_stats.attn_decode.median",
                      "time_stats.attn_kv_cache_save.median", "n_embd", "n_q_head",
                      "n_kv_head", "block_size", "num_tensor_parallel_workers",
                      "max_model_len", "batch_size", "prefill_chunk_size", "kv_cache_size",
                      "is_prefill"])
        for chunk, kv, batch, prefill in rows:
            tokens = chunk if prefill else 1
            flops = 4 * batch * tokens * (kv + tokens / 2) * HEAD_DIM * Q_HEADS_PER_GPU
            ms = _roofline_ms(flops, batch * (kv + tokens) * kv_bytes_per_token)
            out.writerow([ms if prefill else "", "" if prefill else ms,
                          _roofline_ms(0, batch * tokens * kv_bytes_per_token), 8192, 64, 8,
                          BLOCK_TOKENS, TP, MAX_TOKENS, batch, chunk, kv, prefill])
    return len(rows)


def write_trace(requests: int, path: Path) -> None:
    """The first `requests` rows of the Azure trace in Vidur's trace_replay format."""
    with AZURE_CONV.open() as src, path.open("w", newline="") as dst:
        rows = csv.DictReader(src)
        out = csv.writer(dst)
        out.writerow(["arrived_at", "num_prefill_tokens", "num_decode_tokens"])
        origin = None
        for i, row in enumerate(rows):
            if i == requests:
                break
            t = datetime.fromisoformat(row["TIMESTAMP"].strip()[:26])
            origin = origin or t
            out.writerow([(t - origin).total_seconds(), row["ContextTokens"],
                          row["GeneratedTokens"]])


def vidur_args(trace: Path, cache: Path, out: Path) -> list[str]:
    trace_opts = {"trace_file": trace, "prefill_scale_factor": 1, "decode_scale_factor": 1,
                  "time_scale_factor": 1, "max_tokens": MAX_TOKENS}
    args = ["--replica_config_device", DEVICE, "--replica_config_network_device", NETWORK,
            "--replica_config_model_name", MODEL,
            "--replica_config_tensor_parallel_size", TP,
            "--replica_config_num_pipeline_stages", 1, "--cluster_config_num_replicas", REPLICAS,
            "--request_generator_config_type", "trace_replay",
            "--replica_scheduler_config_type", "sarathi",
            "--sarathi_scheduler_config_batch_size_cap", BATCH_CAP,
            "--sarathi_scheduler_config_chunk_size", CHUNK_TOKENS,
            "--random_forrest_execution_time_predictor_config_prediction_max_tokens_per_request",
            MAX_TOKENS,
            "--random_forrest_execution_time_predictor_config_prediction_max_prefill_chunk_size",
            CHUNK_TOKENS,
            "--metrics_config_output_dir", out, "--metrics_config_cache_dir", cache,
            "--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace"]
    for key, value in trace_opts.items():
        args += [f"--trace_request_generator_config_{key}", value]
    return [str(a) for a in args]


def timed(cmd: list[str], cwd: Path) -> dict:
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], cwd=cwd, capture_output=True,
                          text=True)
    report = proc.stderr
    if proc.returncode != 0:
        tail = [ln for ln in report.splitlines() if ln.strip() and not ln.startswith("\t")
                and not ln.startswith("Command exited")]
        raise RuntimeError(f"vidur exited {proc.returncode}: {(tail or ['?'])[-1][:300]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", report)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", report)
    parts = [float(p) for p in wall.group(1).split(":")]
    wall_s = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    return {"wall_s": wall_s, "peak_rss_mb": int(rss.group(1)) / 1024}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vidur-src", type=Path, required=True, help="a Vidur checkout")
    ap.add_argument("--vidur-python", type=Path, required=True,
                    help="a Python with Vidur's requirements")
    ap.add_argument("--sizes", default="4000,10000")
    ap.add_argument("--stand-in-attention", action="store_true",
                    help="write a roofline attention profile where the checkout has none")
    ap.add_argument("--fit-grid", choices=sorted(FIT_GRIDS), default="single",
                    help="Vidur's model-fitting grid: its default (27 forests x 10 folds per "
                         "operator, hours on two cores) or a single forest with 2 folds")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = positive_ints("--sizes", args.sizes)
    missing = shared_missing(AZURE_CONV)
    src = args.vidur_src.resolve()
    if not missing and not (src / "vidur" / "main.py").is_file():
        missing = f"skipped: {src} is not a Vidur checkout (no vidur/main.py)"
    if not missing and not args.vidur_python.exists():
        missing = f"skipped: {args.vidur_python} not found"
    if missing:
        print(missing)
        return 0
    attention = src / "data" / "profiling" / "compute" / DEVICE / MODEL / "attention.csv"
    if not attention.is_file() or attention.read_bytes()[:8] == b"version ":
        if not args.stand_in_attention:
            print(f"skipped: {attention} is absent or a Git LFS pointer (fetch it with git lfs, "
                  f"or pass --stand-in-attention)")
            return 0
        rows = write_stand_in_attention(attention)
        print(f"wrote a roofline stand-in for {attention.relative_to(src)}: {rows:,} rows")
    results: dict = {}
    fit = FIT_GRIDS[args.fit_grid]
    with tempfile.TemporaryDirectory(prefix="vidur-bench-") as tmp:
        work = Path(tmp)
        cache = work / "cache"  # the fitted execution-time models, shared by the runs
        for n, size in enumerate(sizes):
            trace = work / f"azure-conv-{size}.csv"
            write_trace(size, trace)
            cmd = [str(args.vidur_python), "-m", "vidur.main",
                   *vidur_args(trace, cache, work / "out"), *fit]
            if n == 0:
                results["fit"] = timed(cmd, src)
                print(f"first run, fitting Vidur's models ({args.fit_grid} grid): wall "
                      f"{results['fit']['wall_s']:,.1f} s, peak RSS "
                      f"{results['fit']['peak_rss_mb']:,.0f} MB", flush=True)
            warm = timed(cmd, src)
            results[str(size)] = warm
            print(f"{size:>7,} requests: Vidur wall {warm['wall_s']:6.1f} s, peak RSS "
                  f"{warm['peak_rss_mb']:,.0f} MB (models fitted)", flush=True)
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
