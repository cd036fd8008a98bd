"""How long `geosim predict` takes to plan large clusters, and how that grows with the cluster.

    python bench/bench_plan.py              # every cluster, 3 runs each (several minutes on 2 cores)
    python bench/bench_plan.py --runs 5
    python bench/bench_plan.py --quick      # the 16- and 128-GPU clusters only
    python bench/bench_plan.py --json       # the figures as JSON on stdout (the lines go to stderr)
    python bench/bench_plan.py --published  # the sizes the field publishes (issue 34): Megatron-LM's
                                            # 39.1B on 512 A100s and 76.1B on 1,024, forced layouts and
                                            # the planner's whole search
    python bench/bench_plan.py --published --case 76.1B --baseline ../other-checkout
                                            # those whose label holds 76.1B, each run beside the same
                                            # command on another checkout's geosim (before/after, one run)

Each case is one fresh `geosim predict --scenario FILE --model M --global-batch 512
--microbatches 16 --hosts all` (every technique's row, the planner's search for the
verdict included) in a subprocess, so its resident memory is its own. The clusters are
bench/clusters/*.toml: 8 H100 per host joined by NVLink, sites joined by 100 Gbit/s links
with RTTs estimated from FABRIC geography (bench/clusters/make_clusters.py writes them).

Prints per case the median, min and max of wall and CPU time over the runs, the largest
resident set, and the target; then a fixed CPU yardstick (a pure-Python loop, timed in the
same run) and each case's CPU time in yardsticks, so figures from busy or other machines
compare; and the growth exponent: the slope of log(CPU time) against log(hosts) over the
gpt2-xl clusters (1 = linear in sites x hosts).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import geosim

ROOT = Path(geosim.__file__).resolve().parent.parent
CLUSTERS = Path(__file__).resolve().parent / "clusters"
# (label, scenario file, model, hosts, target seconds)
CASES = [("2 sites x 1 host x 8 H100 (16 GPUs)", "h100-2x1.toml", "gpt2-xl", 2, 2.0),
         ("4 sites x 4 hosts x 8 H100 (128 GPUs)", "h100-4x4.toml", "gpt2-xl", 16, 5.0),
         ("8 sites x 16 hosts x 8 H100 (1,024 GPUs)", "h100-8x16.toml", "gpt2-xl", 128, 15.0),
         ("1,024 GPUs, GPT-3 6.7B", "h100-8x16.toml", "gpt3-6.7b", 128, 15.0)]
# Megatron-LM's weak-scaling table (Narayanan et al. 2021, Table 1) on DGX A100 clusters at one site
# (bench/clusters/a100-1x64.toml, a100-1x128.toml): (label, command after `geosim`, target CPU seconds).
# Its layouts (tensor 8 x pipeline 2 x data 32 for 39.1B, 8 x 4 x 32 for 76.1B, a microbatch of one
# sequence per replica: batch / data microbatches) and a deeper pipeline of the same 39.1B.
MEGATRON = ["--seq-len", "2048", "--remat", "--hosts", "all"]
PUBLISHED = [
    ("39.1B, 512 A100s, t8 x p2 x d32, 48 microbatches",
     ["predict", "--scenario", "a100-1x64.toml", "--model", "megatron-39.1b", "--global-batch", "1536",
      "--technique", "pipeshard", "--tensor-parallel", "8", "--pipeline-parallel", "2", "--data-parallel", "32",
      "--microbatches", "48", *MEGATRON], 15.0),
    ("39.1B, 512 A100s, t8 x p8 x d8, 24 microbatches",
     ["predict", "--scenario", "a100-1x64.toml", "--model", "megatron-39.1b", "--global-batch", "1536",
      "--technique", "pipeshard", "--tensor-parallel", "8", "--pipeline-parallel", "8", "--data-parallel", "8",
      "--microbatches", "24", *MEGATRON], 15.0),
    ("39.1B, 512 A100s, the planner's whole search (plan)",
     ["plan", "--scenario", "a100-1x64.toml", "--model", "megatron-39.1b", "--global-batch", "1536",
      "--microbatches", "24", "--seq-len", "2048", "--remat"], 15.0),
    ("76.1B, 1,024 A100s, t8 x p4 x d32, 56 microbatches",
     ["predict", "--scenario", "a100-1x128.toml", "--model", "megatron-76.1b", "--global-batch", "1792",
      "--technique", "pipeshard", "--tensor-parallel", "8", "--pipeline-parallel", "4", "--data-parallel", "32",
      "--microbatches", "56", *MEGATRON], 15.0),
    # the README's large example: 1,024 H100s over eight sites, a 3D layout asked, with the verdict's search
    ("README: 6.7B, 1,024 H100s at 8 sites, t8 x p16 x d8",
     ["predict", "--scenario", "h100-8x16.toml", "--model", "gpt3-6.7b", "--global-batch", "512", "--microbatches",
      "16", "--hosts", "all", "--technique", "pipeshard", "--tensor-parallel", "8", "--pipeline-parallel", "16",
      "--data-parallel", "8"], 60.0),
]
MEMORY_TARGET_MB = 1024.0  # the 1,024-GPU gpt2-xl case
OUT = sys.stdout


def say(*parts) -> None:
    print(*parts, file=OUT, flush=True)


def yardstick_s() -> float:
    """CPU seconds of a fixed pure-Python loop: what this machine does per unit of interpreter work."""
    start = time.process_time()
    total = 0
    for i in range(3_000_000):
        total += i * i % 7
    return time.process_time() - start


def run_case(scenario: Path, model: str) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak resident MB, verdict line) of one fresh `geosim predict`."""
    return run_command(["predict", "--scenario", str(scenario), "--model", model, "--global-batch", "512",
                        "--microbatches", "16", "--hosts", "all"])


def timed_geosim(arguments: list[str], root: Path, bench: str):
    """(process, wall s, CPU s, peak resident MB) of one fresh `geosim ARGUMENTS`, the geosim of the
    checkout `root` (first on the path); a failure ends `bench` with its stderr. CPU from the children's
    rusage before and after; the resident peak is the largest of any child so far (Linux keeps one
    maximum for all waited children), so cases run smallest first. bench_every_row.py times with it too."""
    # a bench times the whole question: the checkout's --time-limit (where it has one) is lifted
    process = root / "geosim" / "cli" / "_process.py"
    unlimited = ["--time-limit", "none"] if process.exists() and "DEFAULT_TIME_LIMIT" in process.read_text() else []
    command = [sys.executable, "-m", "geosim", *arguments, *unlimited]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=root, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{bench}: {' '.join(command)} failed: {proc.stderr.strip()[-2000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return proc, wall, cpu, after.ru_maxrss / 1024  # ru_maxrss: KiB on Linux


def run_command(arguments: list[str], root: Path = ROOT) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak resident MB, verdict line) of one fresh `geosim ARGUMENTS` (timed_geosim)."""
    proc, wall, cpu, rss_mb = timed_geosim(arguments, root, "bench_plan")
    verdict = next((line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("verdict:")), "")
    return wall, cpu, rss_mb, verdict


def exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(seconds) on log(hosts)."""
    xs = [math.log(h) for h, _ in points]
    ys = [math.log(s) for _, s in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main(argv: list[str] | None = None) -> int:
    global OUT
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the 16- and 128-GPU clusters only")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--published", action="store_true",
                        help="Megatron-LM's 39.1B on 512 A100s and 76.1B on 1,024 (issue 34's sizes)")
    parser.add_argument("--case", help="with --published: only the cases whose label contains this text")
    parser.add_argument("--baseline", type=Path,
                        help="with --published: a checkout whose geosim runs each command too, alternately (its "
                             "CPU time and the ratio in the same run)")
    args = parser.parse_args(argv)
    if args.case is not None and not any(args.case in label for label, _, _ in PUBLISHED):
        print(f"bench_plan: --case {args.case!r} matches no published case's label", file=sys.stderr)
        return 2
    if args.baseline is not None and not (args.baseline / "geosim" / "__init__.py").is_file():
        print(f"bench_plan: --baseline {args.baseline}: no geosim/__init__.py there (a checkout of geosim)",
              file=sys.stderr)
        return 2
    if args.json:
        OUT = sys.stderr
    if args.published:
        return published(args)
    cases = CASES[:2] if args.quick else CASES
    say(f"geosim predict --model M --global-batch 512 --microbatches 16 --hosts all, {args.runs} runs each "
        f"(load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    say(f"  {'cluster':<42} {'wall median':>11} {'CPU median':>10} {'CPU min..max':>14} {'RSS MB':>7}  target")
    figures, sticks = [], []
    for label, name, model, hosts, target in cases:
        walls, cpus, rss, verdict = [], [], 0.0, ""
        for _ in range(args.runs):
            sticks.append(yardstick_s())  # interleaved: the yardstick sees the same load as the cases
            wall, cpu, peak, verdict = run_case(CLUSTERS / name, model)
            walls.append(wall)
            cpus.append(cpu)
            rss = max(rss, peak)
        cpu_med = statistics.median(cpus)
        ok = "ok  " if cpu_med <= target else "SLOW"
        memory = ""
        if hosts == 128 and model == "gpt2-xl":
            memory = f", RSS {'ok' if rss <= MEMORY_TARGET_MB else 'OVER'} (<= {MEMORY_TARGET_MB:.0f} MB)"
        say(f"  {label + ', ' + model:<42} {statistics.median(walls):>10.2f}s {cpu_med:>9.2f}s "
            f"{min(cpus):>6.2f}..{max(cpus):<6.2f} {rss:>7.0f}  {ok} CPU <= {target:g} s{memory}")
        say(f"      {verdict}")
        figures.append({"cluster": label, "scenario": name, "model": model, "hosts": hosts, "runs": args.runs,
                        "wall_median_s": statistics.median(walls), "cpu_median_s": cpu_med,
                        "cpu_min_s": min(cpus), "cpu_max_s": max(cpus), "peak_rss_mb": rss, "target_s": target,
                        "verdict": verdict})
    stick = statistics.median(sticks)
    say(f"\n  CPU yardstick (3 M iterations of a Python loop): median {stick:.3f} s over {len(sticks)} runs")
    for f in figures:
        f["cpu_median_yardsticks"] = f["cpu_median_s"] / stick
        say(f"    {f['cluster'] + ', ' + f['model']:<52} {f['cpu_median_yardsticks']:>8.1f} yardsticks")
    growth = [(f["hosts"], f["cpu_median_s"]) for f in figures if f["model"] == "gpt2-xl"]
    slope = exponent(growth) if len(growth) > 1 else None
    if slope is not None:
        say(f"  growth: CPU time ~ hosts^{slope:.2f} over {', '.join(str(h) for h, _ in growth)} hosts "
            f"({'no faster than linear' if slope <= 1.0 else 'FASTER than linear'})")
    if args.json:
        print(json.dumps({"yardstick_s": stick, "growth_exponent": slope, "cases": figures}, indent=2))
    return 0


def published(args) -> int:
    """The sizes the field publishes: each command's CPU seconds (median of the runs) against its
    target, and in yardsticks timed in the same run."""
    say(f"geosim at Megatron-LM's published sizes, {args.runs} runs each "
        f"(load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    say(f"  {'case':<54} {'wall median':>11} {'CPU median':>10} {'CPU min..max':>14} {'RSS MB':>7}  target")
    figures, sticks = [], []
    for label, arguments, target in PUBLISHED:
        if args.case is not None and args.case not in label:
            continue
        arguments = [str(CLUSTERS / a) if a.endswith(".toml") else a for a in arguments]
        walls, cpus, rss, verdict, base_cpus = [], [], 0.0, "", []
        for _ in range(args.runs):
            sticks.append(yardstick_s())
            if args.baseline is not None:
                base_cpus.append(run_command(arguments, args.baseline.resolve())[1])
            wall, cpu, peak, verdict = run_command(arguments)
            walls.append(wall)
            cpus.append(cpu)
            rss = max(rss, peak)
        cpu_med = statistics.median(cpus)

        say(f"  {label:<54} {statistics.median(walls):>10.2f}s {cpu_med:>9.2f}s {min(cpus):>6.2f}..{max(cpus):<6.2f} "
            f"{rss:>7.0f}  {'ok  ' if cpu_med <= target else 'SLOW'} CPU <= {target:g} s")
        figures.append({"case": label, "command": "geosim " + " ".join(arguments), "runs": args.runs,
                        "wall_median_s": statistics.median(walls), "cpu_median_s": cpu_med, "cpu_min_s": min(cpus),
                        "cpu_max_s": max(cpus), "peak_rss_mb": rss, "target_s": target, "verdict": verdict})
        if base_cpus:  # the same command on the baseline checkout, run alternately with this one
            base = statistics.median(base_cpus)
            say(f"  {'  the same on --baseline':<54} {'':>11} {base:>9.2f}s "
                f"{min(base_cpus):>6.2f}..{max(base_cpus):<6.2f}          this checkout / baseline: {cpu_med / base:.2f}")
            figures[-1].update(baseline=str(args.baseline), baseline_cpu_median_s=base,
                               ratio_to_baseline=cpu_med / base)
    stick = statistics.median(sticks)
    say(f"\n  CPU yardstick (3 M iterations of a Python loop): median {stick:.3f} s over {len(sticks)} runs")
    for f in figures:
        f["cpu_median_yardsticks"] = f["cpu_median_s"] / stick
        say(f"    {f['case']:<54} {f['cpu_median_yardsticks']:>8.1f} yardsticks")
    if args.json:
        print(json.dumps({"yardstick_s": stick, "cases": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
