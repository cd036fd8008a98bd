"""Sweep throughput: points per second of the default-shaped sweep, and what Ray and a process pool buy.

    python bench/bench_sweep.py                 # 2,000-point grid (5 slices x 4 techniques x 100 RTTs,
                                                # 20-epoch predictions) on all cores, then one process
                                                # vs the local pool vs Ray on a 400-point grid
    python bench/bench_sweep.py --repeats 5 --skip-ray
    python bench/bench_sweep.py --scale 1,2,4,8  # predict() wall time on generated N-site x 4-VM x 8-GPU clusters
    python bench/bench_sweep.py --memory 1000,10000,100000 [--executor local|serial|ray]
                                                # peak RSS of `geosim sweep` over that many RTT points

Every figure is the median of --repeats runs, each into a fresh directory (rows
are written and fsynced as in a real sweep). Ray's start-up is timed apart from its
sweep, since a long sweep pays it once.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from geosim.inputs.case import Case
from geosim.inputs.scenario import BUILTIN_SCENARIOS  # noqa: E402
from geosim.studies.sweep.run import LocalExecutor, RayExecutor, SerialExecutor, make_context, run_sweep  # noqa: E402
from geosim.studies.sweep.grid import Grid, parse_values  # noqa: E402
from geosim.techniques import STUDY_ORDER, technique_names  # noqa: E402


def grid(rtts: int) -> Grid:
    return Grid({"scenario": list(BUILTIN_SCENARIOS), "technique": list(STUDY_ORDER), "model": ["gpt2m"],
                 "rtt_ms": parse_values(f"0.1:150:{rtts}log", "float", "rtt")})


def _cpu_seconds() -> float:
    """This process and its reaped children (pool workers are reaped when the pool closes; Ray's are not ours)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed_sweep(g: Grid, ctx, make_executor, repeats: int) -> tuple[float, float, float]:
    """Medians of sweeping g from scratch: wall seconds (executor start-up excluded), points/s, CPU ms per point."""
    seconds, cpu = [], []
    for _ in range(repeats):
        cpu_before = _cpu_seconds()
        executor = make_executor()
        try:
            with tempfile.TemporaryDirectory() as out:
                started = time.perf_counter()
                run = run_sweep(g, ctx, out, executor, progress=False)
                seconds.append(time.perf_counter() - started)
                assert run.computed == len(g)
        finally:
            executor.close()
        cpu.append((_cpu_seconds() - cpu_before) / len(g) * 1e3)
    median = statistics.median(seconds)
    return median, len(g) / median, statistics.median(cpu)


def bench_scale(sites: list[int], vms: int, gpus: int) -> None:
    from geosim.inputs.params import load_params
    from geosim.predict import predict
    from geosim.inputs.scale import scale_name, scale_scenario
    from geosim.inputs.scenario import get_model

    params = load_params()
    print(f"\npredict() on generated clusters (N sites x {vms} VMs x {gpus} GPUs, A30, gpt2m, 20 ms):")
    for n in sites:
        sc = scale_scenario(scale_name(n, vms, gpus))
        for tech in technique_names():
            started = time.perf_counter()
            pred = predict(Case(sc.cluster, get_model("gpt2m"), sc.workload(), params), tech)
            wall = time.perf_counter() - started
            print(f"  {sc.cluster.num_gpus:5d} GPUs  {tech:10s} {pred.status:14s} {wall:8.2f} s  "
                  f"{pred.simulated_events:>10,} events", flush=True)


MEMORY_GRID = "1:200:{step:g}"  # RTTs of utah-gpn with the study's first technique: ~2-5 ms a point


def sweep_peak_rss(points: int, executor: str, checkout: Path) -> tuple[int, float, float]:
    """One `geosim sweep` of about `points` RTT points in a child process: (points, peak RSS in MB of the
    largest process it and its reaped children had, wall s). Crossovers are found (the summary is read);
    the best option is not (it plans at every RTT: its own work grows with the RTTs asked)."""
    import subprocess

    step = 200 / points  # 1:200 in that step: at most `points` values (a range holds 100,000)
    workers = {"serial": ["--workers", "1"], "local": ["--workers", "2"], "ray": ["--ray-address", "local",
                                                                               "--workers", "2"]}[executor]
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "geosim", "sweep", "--scenario", "utah-gpn", "--technique", STUDY_ORDER[0],
               "--rtt-ms", MEMORY_GRID.format(step=step), "--out-dir", str(Path(out) / "s"), "--quiet", "--no-best",
               *workers]  # the text summary: --json echoes the grid's axes, output as long as the input
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                cwd=checkout)  # `-m geosim` runs that checkout's geosim
        stdout = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise SystemExit(f"bench_sweep: the sweep of {points} points exited {proc.returncode}")
        done = int(stdout.split(b" points in ", 1)[0])  # "N points in DIR/ (...)"
    return done, usage.ru_maxrss / 1024, wall


def bench_memory(sizes: list[int], executor: str, repeats: int, checkout: Path) -> None:
    print(f"\npeak RSS of `geosim sweep --scenario utah-gpn --technique {STUDY_ORDER[0]} --rtt-ms 1:200:STEP` "
          f"({executor} executor; median of {repeats}; geosim of {checkout.name}):")
    figures = []
    for n in sizes:
        runs = [sweep_peak_rss(n, executor, checkout) for _ in range(repeats)]
        points, rss, wall = runs[0][0], statistics.median(r[1] for r in runs), statistics.median(r[2] for r in runs)
        figures.append((points, rss))
        print(f"  {points:>9,} points  {rss:7.1f} MB  {wall:7.1f} s", flush=True)
    (p0, r0), (p1, r1) = figures[0], figures[-1]
    if p1 > p0:
        print(f"  growth: {(r1 - r0) * 1024 * 1024 / (p1 - p0):.1f} bytes per point from {p0:,} to {p1:,} points "
              f"({r1 - r0:+.1f} MB)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rtts", type=int, default=100, help="RTT values of the big grid (x 20 = points)")
    parser.add_argument("--small-rtts", type=int, default=20, help="RTT values of the comparison grid")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--scale", metavar="SITES", help="also time predict() on generated clusters, e.g. 1,2,4,8")
    parser.add_argument("--memory", metavar="POINTS", help="only measure a sweep's peak RSS at these sizes, "
                                                           "e.g. 1000,10000,100000")
    parser.add_argument("--executor", choices=("serial", "local", "ray"), default="serial",
                        help="the executor --memory runs (default %(default)s; local and ray use 2 workers)")
    parser.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the geosim checkout --memory runs (default: this one; another to compare)")
    args = parser.parse_args()
    if args.memory:
        print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at start")
        bench_memory(parse_values(args.memory, "int", "--memory"), args.executor, args.repeats, args.checkout.resolve())
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        return 0
    cores = os.cpu_count() or 1
    big, small = grid(args.rtts), grid(args.small_rtts)
    ctx = make_context(big)
    print(f"{cores} cores; medians of {args.repeats} runs; load average {os.getloadavg()[0]:.1f} at start")

    seconds, rate, cpu = timed_sweep(big, ctx, lambda: LocalExecutor(ctx, cores), args.repeats)
    print(f"\n{len(big)}-point grid (5 slices x 4 techniques x {args.rtts} RTTs, 20 epochs), {cores} local workers: "
          f"{seconds:.1f} s = {rate:.0f} points/s, {cpu:.1f} CPU ms per point  (target: <= 60 s)")

    print(f"\n{len(small)}-point grid, one process vs parallel (interleaved runs, so each sees the same load):")
    modes = {"one process": lambda: SerialExecutor(ctx), f"local pool ({cores})": lambda: LocalExecutor(ctx, cores)}
    startup = 0.0
    if not args.skip_ray:
        started = time.perf_counter()
        ray_executor = RayExecutor(ctx, "local", num_cpus=cores)  # one instance for every repeat, as a long sweep has
        startup = time.perf_counter() - started
        modes[f"Ray local ({cores} CPUs)"] = lambda: _Borrowed(ray_executor)
    results: dict[str, list] = {name: [] for name in modes}
    try:
        for _ in range(args.repeats):
            for name, make in modes.items():
                results[name].append(timed_sweep(small, ctx, make, 1))
    finally:
        if not args.skip_ray:
            ray_executor.close()
    base = statistics.median(r[0] for r in results["one process"])
    for name, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[2] for r in runs)
        extra = (f"  (+ {startup:.1f} s to start Ray once: {base / (wall + startup):.2f}x including it)"
                 if name.startswith("Ray") else f"  {cpu:4.1f} CPU ms/point")
        print(f"  {name:20s} {wall:6.2f} s  {len(small) / wall:5.0f} points/s  {base / wall:.2f}x{extra}")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} (other processes share the cores: compare CPU ms)")
    if args.scale:
        bench_scale(parse_values(args.scale, "int", "--scale"), vms=4, gpus=8)
    return 0


class _Borrowed:
    """An executor used but not closed by timed_sweep (Ray's start-up is measured apart)."""

    def __init__(self, executor):
        self.executor = executor
        self.workers = executor.workers

    def imap(self, fn, items):
        return self.executor.imap(fn, items)

    def close(self):
        pass


if __name__ == "__main__":
    sys.exit(main())
