"""geosim against ASTRA-sim 2.x on one 1 GiB all-reduce: the same answers, and how fast.

    python bench/bench_astra.py             # the seven cases, then wall-time growth with GPU count
    python bench/bench_astra.py --quick     # the three small cases (2x2, 64x16, flat 64)
    python bench/bench_astra.py --json      # one JSON document instead of the table
    python bench/bench_astra.py --full      # also time the full simulation (fast path off), same run

Configuration (geosim.studies.astra): links inside a host 12 GB/s (12e9 B/s) + 10 us,
between hosts 1.25 GB/s + 20 ms one way, one NIC per GPU, one chunk, ring per dimension;
hierarchical = reduce-scatter in the host, all-reduce across hosts, all-gather in the host;
geosim's plain alpha-beta network backend.

Reference figures: simulated times from ASTRA-sim 2.x, commit 518bd51, analytical
congestion-unaware backend, run with the configuration above (not re-run here: ASTRA-sim
is not installed on this machine).

Each case runs in a fresh subprocess: wall time is the median of --runs simulations
(building the schedule and running the engine, in process), peak memory that process's
maximum resident set size. Targets (issue 14): every case within 0.1% of ASTRA-sim;
flat 1,024 ring <= 1.5 s, 64x64 <= 2 s, 64x16 <= 0.4 s; flat 1,024 ring <= 350 MB; wall
time growing no faster than p^1.2 from 256 to 4,096 GPUs on the symmetric cases.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

from geosim.sim.engine import run_schedule
from geosim.sim.network.alphabeta import AlphaBetaNetwork
from geosim.inputs.specs import Workload
from geosim.studies.astra import CASES, QUICK, AstraCase, allreduce_schedule, astra_cluster, astra_params

ERROR_TARGET = 1e-3
WALL_TARGETS = {"flat 1024 ring": 1.5, "64x64 hierarchical": 2.0, "64x16 hierarchical": 0.4}
MEMORY_TARGETS = {"flat 1024 ring": 350.0}
GROWTH_TARGET = 1.2
# symmetric cases from 256 to 4,096 GPUs, for the growth exponent (no ASTRA-sim figure needed)
GROWTH = {
    "flat ring": [AstraCase(f"flat {p} ring", p, 1, "ring", math.nan) for p in (256, 1024, 4096)],
    "hierarchical": [AstraCase(f"{h}x{g} hierarchical", h, g, "hierarchical", math.nan)
                     for h, g in ((16, 16), (32, 32), (64, 64))],
}


def simulate(case: AstraCase, full: bool = False) -> float:
    """Build the case and run it once; the all-reduce's simulated time in seconds."""
    cluster = astra_cluster(case.hosts, case.gpus_per_host)
    network = functools.partial(AlphaBetaNetwork, shortcut=False) if full else AlphaBetaNetwork
    run = run_schedule(allreduce_schedule(cluster, case.algorithm), cluster, astra_params(), Workload(),
                       iterations=1, network=network)
    return run.iteration_end[0]


def one_case(case: AstraCase, runs: int, full: bool) -> dict:
    walls, cpus, simulated = [], [], 0.0
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        simulated = simulate(case, full)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    # CPU time beside wall time: on a shared machine the wall time also counts other jobs' turns
    return {"simulated_ms": simulated * 1e3, "wall_s": statistics.median(walls), "walls_s": walls,
            "cpu_s": statistics.median(cpus), "peak_mb": peak_mb}


def in_subprocess(case: AstraCase, runs: int, full: bool = False) -> dict:
    spec = json.dumps({"name": case.name, "hosts": case.hosts, "gpus_per_host": case.gpus_per_host,
                       "algorithm": case.algorithm, "runs": runs, "full": full})
    proc = subprocess.run([sys.executable, __file__, "--one", spec], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def growth_exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(wall) against log(GPUs)."""
    xs, ys = [math.log(p) for p, _ in points], [math.log(w) for _, w in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only " + ", ".join(QUICK))
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--runs", type=int, default=5, help="simulations per case; the median wall time (default 5)")
    parser.add_argument("--full", action="store_true",
                        help="also time the full simulation (symmetry fast path off) of the cases up to 1,024 GPUs")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one case, in this process
    args = parser.parse_args(argv)
    if args.one:
        spec = json.loads(args.one)
        case = AstraCase(spec["name"], spec["hosts"], spec["gpus_per_host"], spec["algorithm"], math.nan)
        print(json.dumps(one_case(case, spec["runs"], spec["full"])))
        return 0

    cases = [c for c in CASES if not args.quick or c.name in QUICK]
    rows, ok = [], True
    if not args.json:
        print(f"geosim vs ASTRA-sim 2.x (518bd51, analytical congestion-unaware backend): one 1 GiB all-reduce; "
              f"python {platform.python_version()}, {os.cpu_count()} CPUs, median of {args.runs} runs")
        print(f"  {'case':<20} {'GPUs':>5} {'ASTRA-sim ms':>13} {'geosim ms':>13} {'error':>9} {'wall':>9} {'cpu':>8} {'peak':>8}"
              + (f" {'full sim':>9} {'speed-up':>8}" if args.full else "") + "  verdict")
    for case in cases:
        r = in_subprocess(case, args.runs)
        error = (r["simulated_ms"] - case.reference_ms) / case.reference_ms
        row = {"case": case.name, "gpus": case.gpus, "reference_ms": case.reference_ms,
               "simulated_ms": r["simulated_ms"], "error": error, "wall_s": r["wall_s"], "cpu_s": r["cpu_s"],
               "peak_mb": r["peak_mb"]}
        verdicts = ["ok" if abs(error) <= ERROR_TARGET else f"ERROR > {ERROR_TARGET:.1%}"]
        if case.name in WALL_TARGETS:
            verdicts.append(("ok" if r["wall_s"] <= WALL_TARGETS[case.name] else "SLOW")
                            + f" (<= {WALL_TARGETS[case.name]:g} s)")
        if case.name in MEMORY_TARGETS:
            verdicts.append(("ok" if r["peak_mb"] <= MEMORY_TARGETS[case.name] else "BIG")
                            + f" (<= {MEMORY_TARGETS[case.name]:g} MB)")
        ok &= all(v.startswith("ok") for v in verdicts)
        if args.full and case.gpus <= 1024:
            f = in_subprocess(case, max(1, args.runs // 2), full=True)
            row.update(full_wall_s=f["wall_s"], full_simulated_ms=f["simulated_ms"], full_peak_mb=f["peak_mb"])
        rows.append(row)
        if not args.json:
            extra = ""
            if args.full:
                extra = (f" {row['full_wall_s']:>8.3f}s {row['full_wall_s'] / row['wall_s']:>7.0f}x"
                         if "full_wall_s" in row else f" {'-':>9} {'-':>8}")
            print(f"  {case.name:<20} {case.gpus:>5} {case.reference_ms:>13.3f} {row['simulated_ms']:>13.3f} "
                  f"{error:>+9.5%} {row['wall_s']:>8.3f}s {row['cpu_s']:>7.3f}s {row['peak_mb']:>6.0f}MB{extra}  {', '.join(verdicts)}")
    growth = {}
    if not args.quick:
        if not args.json:
            print(f"\nwall time growth with GPU count, symmetric cases (target: exponent <= {GROWTH_TARGET})")
        for family, family_cases in GROWTH.items():
            measured = [(c.gpus, in_subprocess(c, args.runs)) for c in family_cases]
            exponent = growth_exponent([(p, r["wall_s"]) for p, r in measured])
            cpu_exponent = growth_exponent([(p, r["cpu_s"]) for p, r in measured])
            growth[family] = {"points": [{"gpus": p, "wall_s": r["wall_s"], "cpu_s": r["cpu_s"]} for p, r in measured],
                              "exponent": exponent, "cpu_exponent": cpu_exponent}
            ok &= exponent <= GROWTH_TARGET
            if not args.json:
                walls = ", ".join(f"{p:,} GPUs {r['wall_s']:.3f} s (cpu {r['cpu_s']:.3f} s)" for p, r in measured)
                print(f"  {family:<13} {walls}: p^{exponent:.2f} (cpu p^{cpu_exponent:.2f})  "
                      f"{'ok' if exponent <= GROWTH_TARGET else 'STEEP'}")
    if args.json:
        print(json.dumps({"reference": "ASTRA-sim 2.x, commit 518bd51, analytical congestion-unaware backend",
                          "runs": args.runs, "load_average": os.getloadavg()[0], "cases": rows, "growth": growth, "targets_met": ok},
                         indent=2, allow_nan=False))
    else:
        print(f"\nall targets met: {'yes' if ok else 'NO'} (load average {os.getloadavg()[0]:.1f} at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
