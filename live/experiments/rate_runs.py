"""Live runs over the emulated WAN at capped rates: what docs/results/*-runtime-validation.md is built from.

For every (rate, RTT) of the grid: bring up a 2-host slice capped at the rate (tbf on each
host's egress), measure its RTT and, with `live.wan.measure.measure_messages`, how long one
message of several sizes takes after an idle gap; then train `small-wan` with `data` and
`diloco` (H = 1, 8, 32) on it, one JAX process per host. One JSON line per run (and one per
probe) goes to the output file, with the machine's load average beside every measurement: the
two cores are shared, so figures are repeated and their medians used.

    sudo python -m geosim.live.experiments.rate_runs OUT.jsonl --rates 0.05,0.2,1,5 --rtts 10,40

A run's time per iteration is the mean over whole outer rounds after the first (compiling)
round: DiLoCo's median step is an inner step and would leave the synchronization out.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from pathlib import Path

# (technique, H) of every run; H = None for data
RUNS = (("data", None), ("diloco", 1), ("diloco", 8), ("diloco", 32))
MESSAGE_SIZES = (65536, 1 << 20, 6_600_000)


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def steps_for(h: int | None) -> int:
    # data: 12 steps (first compiles, 2 warm-up, 9 timed); diloco: the compiling round and two more
    return 12 if h is None else max(12, 3 * h)


def per_iteration(step_times: list[float], h: int | None, pick=statistics.median) -> float | None:
    """Steady seconds per iteration: data, `pick` (the median, or min: the least disturbed, as timeit
    takes) of the steps after the first 3; diloco, over whole rounds after the first, `pick` of the
    inner steps x (H - 1) plus `pick` of the synchronizing steps, over H."""
    if h is None:
        timed = step_times[3:]
        return pick(timed) if timed else None
    rounds = [step_times[i:i + h] for i in range(h, len(step_times) - h + 1, h)]
    if not rounds:
        return None
    inner = [t for r in rounds for t in r[:-1]]
    return ((pick(inner) * (h - 1) if h > 1 else 0.0) + pick([r[-1] for r in rounds])) / h


def set_congestion(wan, congestion: str | None) -> str:
    """Set the namespaces' congestion control (None: leave the machine's); the one they run."""
    import subprocess

    key = "net.ipv4.tcp_congestion_control"
    for i in range(len(wan.hosts)):
        if congestion:
            subprocess.run(wan.exec_argv(i, ["sysctl", "-qw", f"{key}={congestion}"]), check=True)
    return subprocess.run(wan.exec_argv(0, ["sysctl", "-n", key]), check=True, capture_output=True,
                          text=True).stdout.strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="JSON Lines file to append to")
    parser.add_argument("--rates", default="0.05,0.2,1,5", help="Gbit/s caps (default %(default)s)")
    parser.add_argument("--rtts", default="10,40", help="RTTs, ms (default %(default)s)")
    parser.add_argument("--runs", default=",".join(f"{t}{'' if h is None else h}" for t, h in RUNS),
                        help="data, diloco<H> (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=1, help="times each run is repeated on its slice")
    parser.add_argument("--no-probe", action="store_true", help="skip the message-size probes")
    parser.add_argument("--loss", default="0", help="frame loss probabilities of the forwarder (default %(default)s)")
    parser.add_argument("--congestion", default=None,
                        help="the namespaces' TCP congestion control (default: the machine's; a namespace may "
                             "choose only what net.ipv4.tcp_allowed_congestion_control lists)")
    args = parser.parse_args(argv)

    from geosim.live.experiments import wan_runs
    from geosim.live.train.loop import Options
    from geosim.live.wan import netns
    from geosim.live.wan.emulator import up
    from geosim.live.wan.measure import measure_messages, measure_rtt

    netns.check_host()
    # SIGTERM unwinds like ^C: the slice is torn down and the runs' processes stopped (finally)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs = []
    for item in args.runs.split(","):
        name = item.rstrip("0123456789")  # "data", "diloco8": a technique and its H, if any
        runs.append((name, int(item[len(name):]) if item[len(name):] else None))
    state = str(Path(args.out).with_suffix(".wan-state.json").resolve())
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731

    def write(doc: dict) -> None:
        from geosim.base.fileio import append_lines

        append_lines(args.out, [json.dumps(doc)])

    grid = [(rtt, rate, loss) for rtt in [float(x) for x in args.rtts.split(",")]
            for rate in [float(x) for x in args.rates.split(",")] for loss in [float(x) for x in args.loss.split(",")]]
    for rtt, rate, loss in grid:
        log(f"slice: RTT {rtt:g} ms, {rate:g} Gbit/s per host" + (f", loss {loss:g}" if loss else ""))
        wan = up(rtt_ms=rtt, bandwidth_mbit=rate * 1000, hosts=2, ttl_s=1800, state=state, loss=loss)
        try:
            congestion = set_congestion(wan, args.congestion)
            measured_rtt = measure_rtt(wan, count=20, interval_s=0.01)["median_ms"]
            if not args.no_probe:
                before = load()
                times = measure_messages(wan, list(MESSAGE_SIZES), repeats=5, gap_s=0.3)
                write({"kind": "probe", "rate_gbps": rate, "rtt_ms": rtt, "measured_rtt_ms": measured_rtt,
                       "seconds": {str(k): v for k, v in times.items()}, "load": before, "at": time.time()})
                log("  probe: " + ", ".join(f"{k} B {statistics.median(v) * 1e3:.1f} ms" for k, v in times.items()))
            for _ in range(args.repeat):
                for technique, h in runs:
                    before = load()
                    opts = Options(technique=technique, model="small-wan", steps=steps_for(h), batch=8,
                                   data="generated", tokenizer="bytes", warmup=2, log_every=1000,
                                   lowcomm={"inner_steps": h} if h else {})
                    started = time.monotonic()
                    try:
                        result = wan_runs.run_on_wan(opts, wan=wan, cpu_devices=1, timeout_s=600)
                    except Exception as exc:  # a failed run is logged, the grid goes on
                        log(f"  {technique} H={h}: failed: {exc}")
                        continue
                    t = per_iteration(result.step_times, h)
                    write({"kind": "run", "technique": technique, "inner_steps": h, "rate_gbps": rate,
                           "rtt_ms": rtt, "loss": loss, "congestion": congestion, "measured_rtt_ms": measured_rtt,
                           "time_per_iteration_s": t,
                           "step_times_s": result.step_times, "load": before, "load_after": load(),
                           "record": result.record, "at": time.time()})
                    log(f"  {technique:<6} H={h}: {t * 1e3 if t else float('nan'):.1f} ms/iteration "
                        f"(load {before}; {time.monotonic() - started:.0f} s)")
        finally:
            wan.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
