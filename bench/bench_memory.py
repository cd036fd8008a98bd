"""Benchmark: geosim's per-device peak memory against XLA's own buffer assignment.

    .venv/bin/python bench/bench_memory.py [--backend gpu|cpu] [--quick] [--xla FILE] [--out FILE] [--cases FILE]

Compiles (never runs) the real GPT-2 train step that `geosim live` runs, with each technique's
sharding, for a grid of models (tiny .. gpt2-large), precisions (fp32, bf16, fp16), remat on
and off and 1-32 microbatches, and reads `compiled.memory_analysis()`: per device, arguments +
outputs - aliased + temporaries. Beside it, geosim's figure from geosim.sim.memory_layout
(live_step, without the workspace, which XLA's figure does not hold), and the error.

--backend gpu (default): XLA's CUDA compiler ahead of time for four A100s that are not here
(needs the xla-gpu extra: jax-cuda12-plugin and jax-cuda12-pjrt; no GPU, no CUDA driver).
--backend gpu-h100: the same for four H100s (sm_90, Hopper), with geosim's model told the generation.
--backend cpu: N virtual host devices; fp32 cases only, with the CPU's known differences
corrected in the comparison (live/train/compiled_memory.py: cpu_correction).
Each device count compiles in its own process. --xla FILE keeps XLA's figures (JSON Lines):
a rerun with the same FILE compiles only the cases not in it, so the model's column can be
redone in seconds after a change to the model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from geosim.live.train.compiled_memory import cpu_correction, geosim_bytes, gpu_generation, run_cases

DEVICES = 4  # data, zero2, shard over 4; pipeshard as 2 stages x 2 (unless a case names its stages)
CASE_KEYS = ("technique", "model", "dims", "precision", "remat", "global_batch", "microbatches", "stages", "seq_len")


def case(technique, model, precision, remat, global_batch, microbatches, **extra) -> dict:
    return {"technique": technique, "model": model, "precision": precision, "remat": remat,
            "global_batch": global_batch, "microbatches": microbatches, **extra}


def grid(quick: bool) -> list[dict]:
    """Every technique at every model size; the precisions, remat and microbatches spread over them so
    each appears with each technique somewhere (a full product of gpt2-large compiles would take hours
    on two busy cores)."""
    cases = []
    techniques = ("data", "zero2", "shard", "pipeshard")
    for t in techniques:  # tiny: fp32 and 16-bit, remat both ways, 1 and 4 microbatches
        cases.append(case(t, "tiny", "fp32", False, 16, 1))
        cases.append(case(t, "tiny", "bf16", True, 16, 4))
        cases.append(case(t, "tiny", "fp16", False, 128 if t in ("data", "zero2") else 32, 32))
    if quick:
        return cases
    for t in techniques:  # gpt2 small: one sequence per device per microbatch, and more
        cases.append(case(t, "gpt2", "fp32", False, 8, 2))
        cases.append(case(t, "gpt2", "bf16", True, 16, 4))
    for t, precision, remat, batch, mb in (("data", "bf16", False, 8, 1), ("zero2", "fp16", True, 32, 8),
                                           ("shard", "fp32", True, 8, 2), ("pipeshard", "bf16", False, 16, 8)):
        cases.append(case(t, "gpt2-medium", precision, remat, batch, mb))
    for t, precision, remat, batch, mb in (("data", "bf16", True, 8, 2), ("zero2", "fp32", False, 4, 1),
                                           ("shard", "fp16", True, 4, 1), ("pipeshard", "bf16", True, 8, 4)):
        cases.append(case(t, "gpt2-large", precision, remat, batch, mb))
    return cases


def compared(rows: list[dict], backend: str, devices: int = DEVICES) -> list[dict]:
    out = []
    for row in rows:
        if "peak" not in row:
            out.append({**row, "geosim": None, "error_fraction": None})
            continue
        parts = geosim_bytes(row, devices, gpu_generation(backend))
        ours = sum(parts.values()) + (cpu_correction(row, devices) if backend == "cpu" else 0.0)
        out.append({**row, "geosim": ours, "parts": parts, "error_fraction": ours / row["peak"] - 1.0})
    return out


def label(row: dict) -> str:
    stages = f" S={row['stages']}" if row.get("stages") else ""
    return (f"{row['technique']:<9} {row['model']:<11} {row['precision']:<4} {'remat' if row['remat'] else '-':<5} "
            f"B={row['global_batch']:<3} mb={row['microbatches']:<2}{stages}")


def print_table(rows: list[dict], backend: str) -> None:
    print(f"{'case':<48} {'XLA (MiB)':>10} {'geosim (MiB)':>12} {'error':>7}   XLA arg/out-alias/temp MiB")
    for row in rows:
        if row.get("geosim") is None:
            print(f"{label(row):<48} compile failed: {row.get('error', '?')[:80]}")
            continue
        mib = 2**20
        print(f"{label(row):<48} {row['peak'] / mib:>10.1f} {row['geosim'] / mib:>12.1f} {row['error_fraction']:>+7.1%}"
              f"   {row['argument'] / mib:.0f}/{(row['output'] - row['alias']) / mib:.0f}/{row['temp'] / mib:.0f}")
    errors = [r["error_fraction"] for r in rows if r.get("error_fraction") is not None]
    if errors:
        worst = max(rows, key=lambda r: abs(r["error_fraction"]) if r.get("error_fraction") is not None else -1)
        print(f"\n{len(errors)} cases on XLA's {backend.upper()} compiler: median |error| "
              f"{statistics.median(abs(e) for e in errors):.1%}, worst {worst['error_fraction']:+.1%} ({label(worst)}), "
              f"within 10%: {sum(abs(e) <= 0.10 for e in errors)} of {len(errors)}")
        for t in ("data", "zero2", "shard", "pipeshard"):
            mine = [abs(r["error_fraction"]) for r in rows if r["technique"] == t and r.get("error_fraction") is not None]
            if mine:
                print(f"  {t:<9} {len(mine):>2} cases: median |error| {statistics.median(mine):.1%}, worst {max(mine):.1%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("gpu", "gpu-h100", "cpu"), default="gpu",
                        help="gpu: XLA's CUDA compiler for A100s (sm_80); gpu-h100: for H100s (sm_90); cpu: host devices")
    parser.add_argument("--quick", action="store_true", help="the tiny model only")
    parser.add_argument("--xla", help="JSON Lines file of XLA's figures to reuse and extend")
    parser.add_argument("--out", help="also write the compared rows as JSON")
    parser.add_argument("--models", help="only these models of the grid, comma-separated (to split the compiles "
                                         "over processes sharing one --xla file)")
    parser.add_argument("--cases", help="JSON Lines of cases to compile instead of the grid (the keys of a grid "
                                        "case; a model not in the catalog as \"dims\": {n_layer, n_embd, n_head, "
                                        "vocab, n_ctx}; pipeshard's \"stages\")")
    parser.add_argument("--devices", type=int, default=DEVICES,
                        help=f"devices the cases run on (default {DEVICES}; 1 for a single GPU's records)")
    args = parser.parse_args()
    if args.cases:
        try:
            cases = [json.loads(line) for line in Path(args.cases).read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as exc:
            print(f"bench_memory: --cases {args.cases}: {exc}", file=sys.stderr)
            return 2
    else:
        cases = grid(args.quick)
    if args.models:
        cases = [c for c in cases if c["model"] in args.models.split(",")]
    if args.backend == "cpu":
        cases = [c for c in cases if c["precision"] == "fp32"]
    known: dict[str, dict] = {}
    key = lambda c: json.dumps({k: c[k] for k in CASE_KEYS if k in c}, sort_keys=True)  # noqa: E731
    if args.xla and Path(args.xla).exists():
        for line in Path(args.xla).read_text().splitlines():
            row = json.loads(line)
            known[key(row)] = row
    todo = [c for c in cases if key(c) not in known]
    load = os.getloadavg()
    print(f"bench_memory: {len(cases)} cases on {args.devices} devices, XLA's {args.backend.upper()} compiler; "
          f"{len(todo)} to compile; load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} ({os.cpu_count()} cores)", flush=True)
    started = time.perf_counter()
    if todo:
        def keep(row: dict) -> None:  # progress, and XLA's figures on disk as they come
            if "technique" not in row:  # the worker could not start its compiler: said below, once
                return
            print(f"  compiled {label(row)} in {row.get('compile_s', '?')} s", flush=True)
            if args.xla and "technique" in row:
                with open(args.xla, "a") as f:
                    f.write(json.dumps(row) + "\n")

        try:
            fresh = run_cases(args.backend, args.devices, todo, timeout_s=3 * 3600, each=keep)
        except subprocess.TimeoutExpired:
            print("compiles timed out", file=sys.stderr)
            return 1
        if fresh and "technique" not in fresh[0]:
            print(f"XLA's {args.backend} compiler is not available: {fresh[0].get('error')}", file=sys.stderr)
            return 3
        for row in fresh:
            known[key(row)] = row
    rows = compared([known[key(c)] for c in cases if key(c) in known], args.backend, args.devices)
    compile_s = sum(r.get("compile_s", 0) for r in rows)
    print_table(rows, args.backend)
    print(f"compiles {compile_s:.0f} s (sum of the cases' compile times), wall {time.perf_counter() - started:.0f} s; "
          f"load after {os.getloadavg()[0]:.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
