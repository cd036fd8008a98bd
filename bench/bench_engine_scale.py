"""What one simulated iteration costs at 16, 128 and 1,024 GPUs, with every rank simulated ("full")
and with ranks a proven symmetry makes alike simulated once ("reduced", the engine's default).

    python bench/bench_engine_scale.py                 # both WAN variants, 16 / 128 / 1,024 GPUs
    python bench/bench_engine_scale.py --quick         # 16 and 128 GPUs only
    python bench/bench_engine_scale.py --runs 5 --json

Clusters: H100 hosts of 8 GPUs (NVLink inside, one NIC per GPU as in a DGX H100), 2 sites x 1 host
(16 GPUs), 4 x 4 (128), 8 x 16 (1,024); every pair of sites linked at 100 Gbit/s. Two WAN variants:
"even", every site link 20 ms RTT (sites are alike: a symmetry may move one site onto the next), and
"geographic", RTT 5 ms + 10 ms per site index apart (no two sites alike); and "one-site", every
host at one site (no WAN: the hosts are alike). gpt2-xl, 4 microbatches of
one sequence per GPU (global batch 4 x GPUs). Techniques: data, zero2, shard, pipeshard (one stage
per site, data parallel inside it; one-site: per group of hosts as many as the sites), and diloco,
sparseloco and hybrid (their default: one replica per host, data parallel inside it). With
--gpus-per-host 1 the same GPU counts sit on hosts of one GPU (replicas of one GPU each).

Each case runs in a fresh subprocess (its peak resident memory is that process's): the wall and CPU
time of run_schedule(..., iterations=1) are the medians of --runs runs (the full run at 1,024 GPUs:
--full-1024-runs, default 1, for it takes minutes), building the schedule excluded. The reduced
run's answers (iteration time, bytes, transfers) are checked against the full run's, bit for bit.
A CPU yardstick (a fixed pure-Python loop) is timed in the same run, before and after, so figures
compare across machines; the growth exponent is log(t_1024 / t_128) / log(8).
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

SIZES = {16: (2, 1), 128: (4, 4), 1024: (8, 16)}  # GPUs -> (sites, hosts per site), 8 GPUs per host
TECHNIQUES = ("data", "zero2", "shard", "pipeshard", "diloco", "sparseloco", "hybrid")
VARIANTS = ("even", "geographic", "one-site")
CHILD_TIMEOUT_S = 1800


def cluster(gpus: int, variant: str, per_host: int = 8):
    from geosim.inputs.scenario import gpu_catalog
    from geosim.inputs.specs import Cluster, Host, Link

    sites, hosts = SIZES[gpus]
    hosts = hosts * 8 // per_host  # the same GPUs, on hosts of per_host
    h100 = gpu_catalog()["H100"]
    made = tuple(Host(f"s{s}h{h}", f"site{s}" if variant != "one-site" else "site0", (h100,) * per_host, "nvlink",
                      "per-gpu") for s in range(sites) for h in range(hosts))
    if variant == "one-site":
        return Cluster(f"{variant}-{gpus}", made, ())
    links = tuple(Link(f"site{a}", f"site{b}", 0.020 if variant == "even" else (5 + 10 * (b - a)) / 1e3, 100e9)
                  for a in range(sites) for b in range(a + 1, sites))
    return Cluster(f"{variant}-{gpus}", made, links)


def child(technique: str, gpus: int, variant: str, mode: str, runs: int, per_host: int = 8) -> dict:
    from geosim.inputs.case import Case
    from geosim.inputs.params import default_params
    from geosim.inputs.scenario import get_model
    from geosim.sim.engine import run_schedule
    from geosim.sim.network.tcp import TCPNetwork
    from geosim.inputs.specs import Workload
    from geosim.techniques import build_schedule

    made, params = cluster(gpus, variant, per_host), default_params()
    workload = Workload(global_batch=4 * gpus, microbatches=4)
    # a stage per site (one-site: per group of hosts that would be a site)
    by_site = [[h.name for h in made.hosts if h.name.startswith(f"s{s}h")] for s in range(SIZES[gpus][0])]
    options = {"pipeshard": {"meshes": by_site}}.get(technique)
    schedule = build_schedule(technique, Case(made, get_model("gpt2-xl"), workload, params), options)
    walls, cpus, result = [], [], None
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = run_schedule(schedule, made, params, workload, iterations=1, network=TCPNetwork,
                              symmetry=mode == "reduced")
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus), "runs": runs,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "events": result.events,
            "simulated_ranks": result.simulated_ranks, "iteration_s": result.iteration_end[0],
            "bytes": result.bytes_sent, "transfers": result.transfers}


def yardstick(runs: int = 5) -> float:
    """Median CPU seconds of a fixed pure-Python loop (dict and float work, like the engine's)."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        table, total = {}, 0.0
        for i in range(300_000):
            table[i & 1023] = total = total + (i % 7) * 0.5
        times.append(time.process_time() - start)
    return statistics.median(times)


def run_child(technique, gpus, variant, mode, runs, per_host=8) -> dict | None:
    command = [sys.executable, __file__, "--child", technique, str(gpus), variant, mode, str(runs), str(per_host)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"timeout_s": CHILD_TIMEOUT_S}
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per timing (default 3)")
    parser.add_argument("--full-1024-runs", type=int, default=1, help="runs of the full simulation at 1,024 GPUs")
    parser.add_argument("--quick", action="store_true", help="16 and 128 GPUs only")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="even, geographic or both")
    parser.add_argument("--techniques", default=",".join(TECHNIQUES))
    parser.add_argument("--gpus-per-host", type=int, default=8, choices=(1, 2, 4, 8),
                        help="GPUs per host (default 8; the same GPU counts on more hosts)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        technique, gpus, variant, mode, runs, *per_host = args.child
        print(json.dumps(child(technique, int(gpus), variant, mode, int(runs), int(per_host[0]) if per_host else 8)))
        return 0

    sizes = [16, 128] if args.quick else [16, 128, 1024]
    out = sys.stderr if args.json else sys.stdout
    say = lambda *parts: print(*parts, file=out, flush=True)  # noqa: E731
    before = yardstick()
    say(f"engine scale: {args.gpus_per_host} GPUs per host; python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load average "
        f"{os.getloadavg()[0]:.1f}; CPU yardstick {before * 1e3:.1f} ms; {args.runs} runs per timing")
    figures: dict = {"yardstick_s": before, "cases": []}
    same_everywhere = True
    for variant in args.variants.split(","):
        say(f"\n{variant} WAN: one iteration, medians (wall / CPU), peak resident memory per process")
        say(f"  {'technique':<10} {'GPUs':>5} {'full wall':>10} {'cpu':>8} {'MiB':>6}  {'reduced':>9} {'cpu':>8} "
            f"{'MiB':>6}  {'ranks run':>9} {'events full/reduced':>21}  {'speed-up':>8}  same")
        for technique in args.techniques.split(","):
            walls = {}
            for gpus in sizes:
                full_runs = args.full_1024_runs if gpus == 1024 else args.runs
                full = run_child(technique, gpus, variant, "full", full_runs, args.gpus_per_host)
                reduced = run_child(technique, gpus, variant, "reduced", args.runs, args.gpus_per_host)
                figures["cases"].append({"variant": variant, "technique": technique, "gpus": gpus,
                                         "full": full, "reduced": reduced})
                if "wall_s" not in full or "wall_s" not in reduced:
                    say(f"  {technique:<10} {gpus:>5} full: {full}  reduced: {reduced}")
                    continue
                same = all(full[k] == reduced[k] for k in ("iteration_s", "bytes", "transfers"))
                same_everywhere &= same
                walls[gpus] = (full["cpu_s"], reduced["cpu_s"])
                say(f"  {technique:<10} {gpus:>5} {full['wall_s']:>9.3f}s {full['cpu_s']:>7.3f}s {full['peak_mib']:>6.0f}  "
                    f"{reduced['wall_s']:>8.3f}s {reduced['cpu_s']:>7.3f}s {reduced['peak_mib']:>6.0f}  "
                    f"{reduced['simulated_ranks']:>4}/{gpus:<4} {full['events']:>10,}/{reduced['events']:<10,} "
                    f"{full['cpu_s'] / max(reduced['cpu_s'], 1e-9):>7.1f}x  {'yes' if same else 'NO'}")
            if 128 in walls and 1024 in walls:
                growth = [math.log(walls[1024][i] / walls[128][i]) / math.log(8) for i in (0, 1)]
                say(f"  {technique:<10} growth of CPU time 128 -> 1,024 GPUs: full p^{growth[0]:.2f}, "
                    f"reduced p^{growth[1]:.2f}")
                figures.setdefault("growth", {})[f"{variant}/{technique}"] = {"full": growth[0], "reduced": growth[1]}
    after = yardstick()
    figures["yardstick_after_s"] = after
    say(f"\nCPU yardstick after: {after * 1e3:.1f} ms; load average {os.getloadavg()[0]:.1f}; "
        f"reduced answers the full run's to the bit everywhere: {'yes' if same_everywhere else 'NO'}")
    if args.json:
        print(json.dumps(figures, indent=2, allow_nan=False))
    return 0 if same_everywhere else 1


if __name__ == "__main__":
    sys.exit(main())
