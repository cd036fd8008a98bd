"""How fast geosim predicts, and whether extrapolating an epoch from steady-state iterations is right.

    python bench/bench_predict.py            # everything (about a minute on 2 cores)
    python bench/bench_predict.py --runs 3   # fewer repetitions
    python bench/bench_predict.py --quick --json   # 1 and 2 only, as JSON (the other lines go to stderr)

It times the geosim it imports: run it from a tree's root (e.g. an export of an older commit, with
PYTHONPATH=. ) to time that tree, its `geosim predict` subprocesses included.

Prints min / median / max wall time of:
  1. one 20-epoch prediction per technique on UTAH-GPN (target: median <= 10 ms);
  2. the default `geosim predict` (five slices, every technique, both VMs and each alone, and
     the planner's verdict per slice), in process with stdout suppressed, and as a fresh
     subprocess (<= 1 s), with the bytecode cache on as an installed geosim has it;
  3. one simulated iteration of a 1,024-GPU cluster: 64 hosts x 16 A100-80GB at 8 sites,
     Pipeshard with 8 stages (one per site) and data parallel inside each     (<= 10 s);
plus simulated events per second, and
  4. the extrapolation check: predict() simulates SIMULATED_ITERATIONS iterations and
     extrapolates the rest; here every iteration of a short run is simulated and the two
     run times (startup excluded) must agree within 0.5%.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path

import geosim
from geosim.inputs.case import Case
from geosim.cli import main as geosim_main
from geosim.sim.engine import run_schedule
from geosim.sim.network.tcp import TCPNetwork
from geosim.inputs.params import default_params
from geosim.predict import SIMULATED_ITERATIONS, predict
from geosim.inputs.scenario import BUILTIN_SCENARIOS, get_model, gpu_catalog, load_scenario
from geosim.techniques import STUDY_ORDER, is_low_communication, technique_names

# the study's four, then the low-communication techniques (DiLoCo, SparseLoCo, the hybrid)
TECHNIQUE_NAMES = (*STUDY_ORDER, *(t for t in technique_names() if is_low_communication(t)))
from geosim.inputs.specs import Cluster, Host, Link, Workload
from geosim.techniques import build_schedule

TARGETS = {"prediction": 0.010, "default predict": 1.0, "1,024-GPU iteration": 10.0}
AGREEMENT = 0.005


CPU_S: list[float] = []  # the last timed() call's CPU seconds per run (this process only)
FIGURES: dict = {}  # what --json prints
OUT = sys.stdout  # the human-readable lines: stderr under --json


def say(*parts) -> None:
    print(*parts, file=OUT)


def figures(walls: list[float], **extra) -> dict:
    return {"median_s": statistics.median(walls), "min_s": min(walls), "max_s": max(walls), "runs": len(walls),
            **({"cpu_median_s": statistics.median(CPU_S)} if len(CPU_S) == len(walls) else {}), **extra}


def timed(fn, runs: int):
    walls, value = [], None
    CPU_S.clear()
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        value = fn()
        walls.append(time.perf_counter() - start)
        CPU_S.append(time.process_time() - cpu)
    return walls, value


def cpu_note() -> str:
    """Median CPU time of the last timing: on a shared machine wall time also counts other jobs' turns."""
    return f"cpu {fmt_s(statistics.median(CPU_S)).strip()}"


def fmt_s(seconds: float) -> str:
    return f"{seconds * 1e3:8.1f} ms" if seconds < 1 else f"{seconds:8.2f} s "


def row(name: str, walls: list[float], target: float | None = None, extra: str = "") -> None:
    med = statistics.median(walls)
    verdict = ""
    if target is not None:
        verdict = f"{'ok  ' if med <= target else 'SLOW'} (target <= {fmt_s(target).strip()})"
    say(f"  {name:<44} {fmt_s(min(walls))} {fmt_s(med)} {fmt_s(max(walls))}  {verdict} {extra}".rstrip())


def header(title: str) -> None:
    if title:
        say(f"\n{title}")
    say(f"  {'':<44} {'min':>11} {'median':>11} {'max':>11}")


# --- 1. one prediction per technique ---------------------------------------------


def bench_predictions(runs: int) -> tuple[int, float]:
    header("1. one 20-epoch prediction, gpt2m on UTAH-GPN (predict(): build, simulate, extrapolate)")
    scenario = load_scenario("utah-gpn")
    model, workload, params = get_model("gpt2m"), scenario.workload(), default_params()
    events = wall = 0.0
    for technique in TECHNIQUE_NAMES:
        walls, r = timed(lambda: predict(Case(scenario.cluster, model, workload, params), technique), runs)
        events += r.simulated_events * runs
        wall += sum(walls)
        row(f"{technique} ({r.simulated_events:,} events)", walls, TARGETS["prediction"],
            f"{cpu_note()} -> {r.total_time_s / 3600:.2f} h")
        FIGURES.setdefault("prediction", {})[technique] = figures(walls, events=r.simulated_events,
                                                                  target_s=TARGETS["prediction"])
    return int(events), wall


# --- 2. the default geosim predict ---------------------------------------------------


def bench_default_predict(runs: int) -> None:
    header("2. default `geosim predict` (5 slices x every technique x {both VMs, each VM})")

    def in_process():
        with contextlib.redirect_stdout(io.StringIO()):
            assert geosim_main(["predict"]) == 0

    walls, _ = timed(in_process, runs)
    row("in process, main(['predict'])", walls, TARGETS["default predict"], cpu_note())
    FIGURES["default_predict_in_process"] = figures(walls, target_s=TARGETS["default predict"])
    # `python -m geosim` from the root of the tree this process imported, so the subprocess runs the
    # same code; with the bytecode cache on (an installed geosim has its .pyc files): a first run writes it
    root = Path(geosim.__file__).resolve().parent.parent
    command = [sys.executable, "-m", "geosim"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def child(*args):
        proc = subprocess.run(command + list(args), capture_output=True, text=True, cwd=root, env=env)
        assert proc.returncode == 0, proc.stderr

    child("predict")
    walls, _ = timed(lambda: child("predict"), runs)
    row("subprocess `geosim predict` (a fresh process)", walls, TARGETS["default predict"])
    FIGURES["default_predict_subprocess"] = figures(walls, target_s=TARGETS["default predict"])
    walls, _ = timed(lambda: child("--version"), runs)
    row("subprocess `geosim --version` (start-up alone)", walls)
    FIGURES["version_subprocess"] = figures(walls)


# --- 3. a 1,024-GPU cluster --------------------------------------------------------------


def big_cluster(sites: int = 8, hosts_per_site: int = 8, gpus_per_host: int = 16) -> Cluster:
    gpu = gpu_catalog()["A100-80GB"]
    hosts = tuple(Host(f"s{s}h{h}", f"site{s}", (gpu,) * gpus_per_host, intra_host="nvlink")
                  for s in range(sites) for h in range(hosts_per_site))
    # a full mesh of site-to-site links, RTT growing with "distance" between site indices
    links = tuple(Link(f"site{a}", f"site{b}", rtt_s=(5 + 10 * (b - a)) / 1e3, bandwidth_bps=100e9)
                  for a, b in combinations(range(sites), 2))
    return Cluster("1024-GPU", hosts, links)


def bench_big(runs: int) -> tuple[int, float]:
    say("\n3. one iteration of a 1,024-GPU cluster: 64 hosts x 16 A100-80GB at 8 sites, Pipeshard,")
    say("   8 stages (one site's 8 hosts = 128 GPUs each, data parallel inside), gpt2m, 8 microbatches")
    header("")
    cluster = big_cluster()
    model, params = get_model("gpt2m"), default_params()
    workload = Workload(global_batch=8 * 128, microbatches=8)
    meshes = [[h.name for h in cluster.hosts if h.site == f"site{s}"] for s in range(8)]
    options = {"meshes": meshes}
    walls, schedule = timed(lambda: build_schedule("pipeshard", Case(cluster, model, workload, params), options), 1)
    row("build the schedule", walls)
    results = []

    def simulate():
        results.append(run_schedule(schedule, cluster, params, workload, iterations=1, network=TCPNetwork))

    walls, _ = timed(simulate, runs)
    r = results[-1]
    row(f"simulate one iteration ({r.events:,} events)", walls, TARGETS["1,024-GPU iteration"],
        f"-> {r.iteration_end[0]:.2f} s simulated, {r.transfers:,} transfers")
    FIGURES["iteration_1024_gpus"] = figures(walls, events=r.events, target_s=TARGETS["1,024-GPU iteration"])
    walls_p, p = timed(lambda: predict(Case(cluster, model, workload, params), "pipeshard", options=options), 1)
    row(f"whole predict() ({SIMULATED_ITERATIONS} real + 1 ideal iteration)", walls_p, None,
        f"-> {p.status}, {p.iteration_time_s:.2f} s/iteration" if p.ok else f"-> {p.status}: {p.reason}")
    return r.events * runs, sum(walls)


# --- 4. extrapolation against simulating every iteration ---------------------------


def check_extrapolation(slices: list[str], iterations_per_epoch: int, epochs: int) -> bool:
    say(f"\n4. extrapolation: predict() ({SIMULATED_ITERATIONS} simulated iterations, the rest extrapolated) vs "
          f"simulating all {iterations_per_epoch * epochs} iterations")
    say(f"   ({epochs} epochs x {iterations_per_epoch} iterations, gpt2m, the default batch; run time excludes startup; "
          f"must agree within {AGREEMENT:.1%})")
    say(f"  {'slice':<10} {'technique':<10} {'extrapolated':>13} {'every iter':>13} {'rel diff':>9}  "
          f"{'wall':>7}  verdict")
    model, params = get_model("gpt2m"), default_params()
    all_ok = True
    for name in slices:
        scenario = load_scenario(name)
        base = scenario.workload()
        workload = scenario.workload(tokens_per_epoch=base.tokens_per_iteration * iterations_per_epoch, epochs=epochs)
        n = workload.iterations_per_epoch * workload.epochs
        for technique in STUDY_ORDER:  # one program per iteration (a low-communication program is H of them)
            r = predict(Case(scenario.cluster, model, workload, params), technique)
            if not r.ok:
                say(f"  {scenario.cluster.name:<10} {technique:<10} {r.status}")
                continue
            extrapolated = r.total_time_s - r.startup_s
            schedule = build_schedule(technique, Case(scenario.cluster, model, workload, params))
            start = time.perf_counter()
            full = run_schedule(schedule, scenario.cluster, params, workload, iterations=n, network=TCPNetwork)
            wall = time.perf_counter() - start
            every = full.iteration_end[-1]
            diff = (extrapolated - every) / every
            ok = abs(diff) <= AGREEMENT
            all_ok &= ok
            spread = ""
            if not ok:
                steady = [full.iteration_time(i) for i in range(1, n)]
                spread = (f"  iterations 2..{n}: {min(steady):.3f}-{max(steady):.3f} s, "
                          f"mean {statistics.fmean(steady):.3f} s; extrapolated from {r.iteration_time_s:.3f} s")
            say(f"  {scenario.cluster.name:<10} {technique:<10} {extrapolated:>11.1f} s {every:>11.1f} s "
                  f"{diff:>+9.3%}  {wall:>5.1f} s  {'ok' if ok else 'DISAGREE'}{spread}")
    return all_ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="repetitions per timing (default 7)")
    parser.add_argument("--slices", default=",".join(BUILTIN_SCENARIOS),
                        help="slices for the extrapolation check (default: all five)")
    parser.add_argument("--iterations-per-epoch", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--quick", action="store_true",
                        help="only 1 and 2 (predictions and the default predict), the speed targets")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (the table goes to stderr)")
    args = parser.parse_args(argv)
    global OUT
    OUT = sys.stderr if args.json else sys.stdout

    load = os.getloadavg()[0]
    say(f"geosim benchmark: {Path(geosim.__file__).resolve().parent}, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, {args.runs} runs per timing; params {default_params().source}; load average {load:.1f}")
    FIGURES.update(geosim=str(Path(geosim.__file__).resolve().parent), cpus=os.cpu_count(), load_average=load)
    events1, wall1 = bench_predictions(args.runs)
    bench_default_predict(max(5, args.runs - 2))
    agree = True
    if not args.quick:
        events3, wall3 = bench_big(max(3, args.runs - 2))
        say("\nsimulated events per second")
        say(f"  UTAH-GPN predictions (every technique): {events1 / wall1:>12,.0f} events/s")
        say(f"  1,024-GPU iteration:                    {events3 / wall3:>12,.0f} events/s")
        agree = check_extrapolation(args.slices.split(","), args.iterations_per_epoch, args.epochs)
        say(f"\nextrapolation within {AGREEMENT:.1%} everywhere: {'yes' if agree else 'NO'}")
        FIGURES["extrapolation_agrees"] = agree
    if args.json:
        print(json.dumps(FIGURES, indent=2, allow_nan=False))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
