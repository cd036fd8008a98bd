"""Every row, any size (issue 47): `geosim predict` of every technique on all GPUs at 128 and 1,024
H100s, and one 3D layout on 10,240, as multiples of a yardstick measured in the same run.

    python bench/bench_every_row.py                    # every case, 3 runs each (long on 2 shared cores)
    python bench/bench_every_row.py --case 128 --runs 3
    python bench/bench_every_row.py --baseline DIR     # each command also on another checkout's geosim
                                                       # (a `git archive` of main), alternately: its CPU
                                                       # time, the ratio, and whether the answers are equal
    python bench/bench_every_row.py --json

The yardstick Y is issue 47's: `geosim predict` of gpt2-xl, global batch 512, 16 microbatches, every
technique on all GPUs of bench/clusters/h100-2x1.toml (2 sites x 1 host x 8 H100); its median CPU
time over the run, timed before each case's run, so it sees the same load. Each case is a fresh
process (its resident memory is its own; CPU from the children's rusage). The load average (1 min)
is recorded with every figure: the machine is shared.

Targets (issue 47): 128 GPUs every technique <= 10 Y; 1,024 GPUs every technique <= 30 Y; 10,240 GPUs
one layout <= 40 Y; peak resident memory <= 2 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import geosim
from bench_plan import timed_geosim  # the child timer both benches share (bench/ is the script's path)

ROOT = Path(geosim.__file__).resolve().parent.parent
CLUSTERS = Path(__file__).resolve().parent / "clusters"
EVERY = ["--model", "gpt2-xl", "--global-batch", "512", "--microbatches", "16", "--hosts", "all"]
YARDSTICK = ["predict", "--scenario", "h100-2x1.toml", *EVERY]
# (label, command after `geosim`, target in yardsticks)
CASES = [
    ("128 GPUs (4 sites x 4 hosts x 8 H100), every technique",
     ["predict", "--scenario", "h100-4x4.toml", *EVERY], 10.0),
    ("1,024 GPUs (8 x 16 x 8 H100), every technique", ["predict", "--scenario", "h100-8x16.toml", *EVERY], 30.0),
    ("10,240 GPUs (16 x 80 x 8 H100), GPT-3 6.7B t8 x p16 x d80",
     ["predict", "--scenario", "h100-16x80.toml", "--model", "gpt3-6.7b", "--global-batch", "1280", "--microbatches",
      "16", "--hosts", "all", "--technique", "pipeshard", "--tensor-parallel", "8", "--pipeline-parallel", "16",
      "--data-parallel", "80"], 40.0),
]
MEMORY_TARGET_MB = 2048.0
OUT = sys.stdout


def say(*parts) -> None:
    print(*parts, file=OUT, flush=True)


def run_command(arguments: list[str], root: Path = ROOT) -> dict:
    """One fresh `geosim ARGUMENTS --json` of the checkout `root`: CPU s, wall s, the largest resident
    set of any child so far (MB; Linux keeps one maximum for all waited children: cases run smallest
    first), the load average when it ended, and its answer (the JSON less each row's wall_s)."""
    arguments = [str(CLUSTERS / a) if a.endswith(".toml") else a for a in arguments]
    proc, wall, cpu, rss_mb = timed_geosim([*arguments, "--json"], root, "bench_every_row")
    return {"cpu_s": cpu, "wall_s": wall, "rss_mb": rss_mb, "load": os.getloadavg()[0], "answer": answer_of(proc.stdout),
            "announced": [line.strip() for line in proc.stderr.splitlines() if "will take about" in line]}


def answer_of(stdout: str) -> list:
    """The predictions of a --json answer, less what a run's own clock sets (wall_s)."""
    doc = json.loads(stdout)
    return [{"verdict": s["verdict"], "best": s["best"],
             "predictions": [{k: v for k, v in p.items() if k != "wall_s"} for p in s["predictions"]]}
            for s in doc["slices"]]


def main(argv: list[str] | None = None) -> int:
    global OUT
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--case", help="only the cases whose label contains this text")
    parser.add_argument("--baseline", type=Path, help="a checkout whose geosim runs each command too, alternately")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cases = [c for c in CASES if args.case is None or args.case in c[0]]
    if not cases:
        print(f"bench_every_row: --case {args.case!r} matches no case's label", file=sys.stderr)
        return 2
    if args.baseline is not None and not (args.baseline / "geosim" / "__init__.py").is_file():
        print(f"bench_every_row: --baseline {args.baseline}: no geosim/__init__.py there", file=sys.stderr)
        return 2
    if args.json:
        OUT = sys.stderr
    say(f"geosim predict, {args.runs} runs each, as multiples of Y (the 16-GPU case's median CPU time, this run); "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    sticks, figures = [], []
    for label, arguments, target in cases:
        runs, base = [], []
        for _ in range(args.runs):
            stick = run_command(YARDSTICK)
            sticks.append(stick["cpu_s"])
            say(f"  Y: {stick['cpu_s']:.2f} s CPU (load {stick['load']:.1f})")
            if args.baseline is not None:
                base.append(run_command(arguments, args.baseline.resolve()))
                say(f"  {label} on --baseline: {base[-1]['cpu_s']:.2f} s CPU (load {base[-1]['load']:.1f})")
            runs.append(run_command(arguments))
            say(f"  {label}: {runs[-1]['cpu_s']:.2f} s CPU, {runs[-1]['wall_s']:.1f} s wall, "
                f"{runs[-1]['rss_mb']:.0f} MB (load {runs[-1]['load']:.1f})")
            for line in runs[-1]["announced"]:
                say(f"    announced: {line}")
        cpus = [r["cpu_s"] for r in runs]
        figure = {"case": label, "command": "geosim " + " ".join(arguments), "runs": args.runs,
                  "cpu_s": cpus, "cpu_median_s": statistics.median(cpus), "loads": [r["load"] for r in runs],
                  "peak_rss_mb": max(r["rss_mb"] for r in runs), "target_y": target,
                  "same_answer_every_run": all(r["answer"] == runs[0]["answer"] for r in runs)}
        if base:
            figure.update(baseline=str(args.baseline), baseline_cpu_s=[b["cpu_s"] for b in base],
                          baseline_cpu_median_s=statistics.median(b["cpu_s"] for b in base),
                          same_answer_as_baseline=all(b["answer"] == runs[0]["answer"] for b in base))
        figures.append(figure)
    y = statistics.median(sticks)
    say(f"\n  Y = {y:.3f} s CPU (median of {len(sticks)}: {', '.join(f'{s:.2f}' for s in sticks)})")
    for f in figures:
        f["yardsticks"] = f["cpu_median_s"] / y
        ok = f["yardsticks"] <= f["target_y"] and f["peak_rss_mb"] <= MEMORY_TARGET_MB
        line = (f"  {f['case']:<62} {f['cpu_median_s']:>7.2f} s = {f['yardsticks']:>6.1f} Y "
                f"(target {f['target_y']:g} Y), peak {f['peak_rss_mb']:.0f} MB: {'ok' if ok else 'MISSED'}")
        if "baseline_cpu_median_s" in f:
            line += (f"; baseline {f['baseline_cpu_median_s']:.2f} s, answers "
                     f"{'equal' if f['same_answer_as_baseline'] else 'DIFFER'}")
        say(line)
    if args.json:
        print(json.dumps({"yardstick_s": y, "yardstick_runs_s": sticks, "cases": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
