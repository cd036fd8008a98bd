"""FABRIC site choice: the RTT estimate's error on Table I's WAN pairs, and how fast plan --sites answers.

    python bench/bench_fabric.py             # about a minute on 2 cores
    python bench/bench_fabric.py --runs 3

Prints
  1. the route-inflation fit and, for each of the study's four WAN pairs, the great-circle
     distance, Table I's RTT, the estimate and its error (target: every |error| < 20%);
  2. min / median / max wall time of `geosim plan --sites all --model gpt2m --gpu RTX6000`,
     in process (rank_sites) and as a fresh subprocess with its start-up (target: median < 10 s);
  3. the same for `--sites all` with no GPU filter (every site whose GPUs are known).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from geosim.fabric.choose import rank_sites, resolve_sites  # noqa: E402
from geosim.base.sites import rtt_model  # noqa: E402
from geosim.inputs.params import load_params  # noqa: E402
from geosim.inputs.scenario import get_model, make_workload  # noqa: E402
from geosim.techniques import STUDY_ORDER  # noqa: E402


def timings(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def show(label: str, values: list[float], target: float | None = None) -> None:
    med = statistics.median(values)
    verdict = "" if target is None else ("  ok" if med < target else f"  OVER the {target:g} s target")
    print(f"  {label:<58} min {min(values):6.2f}  median {med:6.2f}  max {max(values):6.2f} s{verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    model = rtt_model()
    print(f"1. RTT from geography: route inflation {model.inflation:.3f} over the great circle, fibre at "
          f"{2.998e5 / 1.468:.0f} km/s")
    print(f"  {'pair':<14} {'distance km':>11} {'Table I ms':>10} {'estimate ms':>11} {'error':>7}")
    for p in model.pairs:
        print(f"  {'-'.join(p.sites):<14} {p.distance_km:>11.0f} {p.measured_ms:>10.1f} {p.estimated_ms:>11.1f} "
              f"{100 * p.error:>+6.1f}%")
    worst = max(abs(p.error) for p in model.pairs)
    print(f"  worst |error| {100 * worst:.1f}% (target < 20%): {'ok' if worst < 0.2 else 'MISSED'}")

    params, gpt2m, workload = load_params(None), get_model("gpt2m"), make_workload({})
    print(f"\n2./3. plan --sites ({args.runs} runs each)")
    for gpu in ("RTX6000", None):
        sites, notes = resolve_sites("all", gpu)
        ranking = rank_sites(sites, gpt2m, workload, params, gpu=gpu, techniques=STUDY_ORDER, notes=notes)
        label = f"--sites all --gpu {gpu}" if gpu else "--sites all"
        print(f"  {label}: {len(sites)} sites, {len(ranking.ranked)} slices, {ranking.planned} planner searches, "
              f"{ranking.derived} derived; best {ranking.ranked[0].label}")
        show(f"{label}, in process", timings(
            lambda: rank_sites(sites, gpt2m, workload, params, gpu=gpu, techniques=STUDY_ORDER), args.runs),
             10.0 if gpu else None)
        argv = [sys.executable, "-m", "geosim", "plan", "--sites", "all", "--model", "gpt2m", "--technique",
                ",".join(STUDY_ORDER)] + (["--gpu", gpu] if gpu else [])
        show(f"{label}, fresh `geosim plan` process", timings(
            lambda: subprocess.run(argv, check=True, capture_output=True, cwd=ROOT), args.runs), 10.0 if gpu else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
