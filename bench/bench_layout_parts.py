"""Where a large Pipeshard layout's prediction spends its CPU: issue 47's 10,240-GPU case (GPT-3 6.7B,
t8 x p16 x d80 on 16 sites x 80 hosts x 8 H100, bench/clusters/h100-16x80.toml) or a smaller one of the
same shape, part by part, in one process: the build, the symmetry search, and `--iterations` of the
run on the fabric model (what `geosim predict` runs first; it runs 24 more where those do not settle).

    python bench/bench_layout_parts.py                           # 16 sites x 80 hosts, t8 p16 d80
    python bench/bench_layout_parts.py --sites 16 --hosts 10     # the 1,280-GPU version (t8 p16 d10)
    python bench/bench_layout_parts.py --sites 4 --hosts 8 --pipeline 4 --ranks
    PYTHONPATH=DIR python bench/bench_layout_parts.py ...        # the same on another checkout (DIR)

Prints each part's CPU seconds, the run's events, ranks simulated and iteration times (to compare two
checkouts' answers: the same times to the last digit), and the peak resident memory. --ranks then runs
every rank again and counts its distinct per-rank and per-host iteration ends: whether classes of
ranks that behave alike exist at all.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "clusters"))

from make_clusters import GPUS_PER_HOST, counted  # noqa: E402  (the bench clusters' own writer)

from geosim.inputs.case import Case  # noqa: E402
from geosim.inputs.params import default_params  # noqa: E402
from geosim.inputs.scenario import get_model, load_scenario  # noqa: E402
from geosim.inputs.specs import Workload  # noqa: E402
from geosim.sim.engine import EngineRun, run_schedule  # noqa: E402
from geosim.sim.kernel import Clock  # noqa: E402
from geosim.sim.network import capabilities, network_backend  # noqa: E402
from geosim.sim.symmetry import find_symmetry  # noqa: E402
from geosim.techniques import build_schedule, layout_options  # noqa: E402


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, default=16)
    parser.add_argument("--hosts", type=int, default=80, help="hosts per site (8 H100 each)")
    parser.add_argument("--tensor", type=int, default=8)
    parser.add_argument("--pipeline", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--ranks", action="store_true",
                        help="then run every rank once more and count its distinct rank and host ends")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "layout.toml"
        path.write_text(counted("layout", args.sites, args.hosts))
        cluster = load_scenario(path).cluster
    gpus = args.sites * args.hosts * GPUS_PER_HOST
    data = gpus // (args.tensor * args.pipeline)
    params = default_params()
    workload = Workload(global_batch=16 * data, microbatches=16)  # the bench case's: 1,280 at d80, the CLI's defaults
    case = Case(cluster, get_model("gpt3-6.7b"), workload, params)
    print(f"{gpus} GPUs ({args.sites} x {args.hosts} x {GPUS_PER_HOST} H100), gpt3-6.7b t{args.tensor} "
          f"p{args.pipeline} d{data}, global batch {workload.global_batch}, 16 microbatches")
    start = time.process_time()
    options = layout_options("pipeshard", case, tuple(h.name for h in cluster.hosts), tensor=args.tensor,
                             pipeline=args.pipeline)
    schedule = build_schedule("pipeshard", case, options)
    print(f"  build: {time.process_time() - start:.2f} s CPU, {rss_mb():.0f} MB")
    net = network_backend("fabric")(Clock(), cluster, params, schedule.devices, None)
    caps = capabilities(net)
    caps.prepare(schedule.programs)
    start = time.process_time()
    found = find_symmetry(schedule, caps)
    print(f"  symmetry search: {time.process_time() - start:.2f} s CPU, found {found}")
    start = time.process_time()
    result = run_schedule(schedule, cluster, params, workload, iterations=args.iterations,
                          network=network_backend("fabric"))
    spent = time.process_time() - start
    times = [result.iteration_time(i) for i in range(args.iterations)]
    print(f"  run of {args.iterations} iterations (search included): {spent:.2f} s CPU, {result.events:,} events "
          f"({spent / result.events * 1e6:.1f} us each), {result.simulated_ranks} ranks simulated, {rss_mb():.0f} MB")
    print("  iteration times: " + ", ".join(repr(t) for t in times))
    if args.ranks:  # every rank, each one's ends kept (run_schedule's answer has the latest only)
        run = EngineRun(schedule, cluster, params, workload, args.iterations, network_backend("fabric"), False, False,
                        Clock)
        run.run(False)
        ends = run.ends[-1]
        hosts = [tuple(ends[i:i + GPUS_PER_HOST]) for i in range(0, len(ends), GPUS_PER_HOST)]
        print(f"  distinct ends in the last iteration: {len(set(ends))} of {len(ends)} ranks, "
              f"{len(set(hosts))} of {len(hosts)} hosts' vectors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
