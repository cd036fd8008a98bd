"""Benchmark: the whole live validation loop on the emulated WAN (root, /dev/net/tun).

    sudo .venv/bin/python bench/bench_live_validate.py [--out-dir bench-validate] [--steps 12]
         [--rtt-ms 0.1,10,40] [--technique data,zero2,shard,pipeshard] [--records runs.jsonl]

Runs `geosim live validate` with the issue's defaults (four techniques at RTT 0.1, 10
and 40 ms, 2 emulated hosts with one CPU device each, 1000 Mbit/s per host, tiny GPT-2),
i.e. one 2-process gloo run per technique and RTT, then the fit on two RTTs and the
prediction of the third (and of each other RTT in turn). Prints the table and the wall
time of each phase; docs/results/2026-11-22-live-validate.md logs its figures. `--records`
re-fits earlier runs without running anything (no root needed then).

Issue 24's configuration (docs/results/2026-11-25-runtime-validation.md, ~10 min):

    sudo .venv/bin/python bench/bench_live_validate.py --rtt-ms 0.1,25,70 --hold-out 0.1

Each run's record holds the machine's 1-minute load before and after its timed steps and its
fastest step (the figure compared); the benchmark prints the load at its start and end beside the
wall time, and validate warns in one line when a run's load went above the cores.

The window-limited configuration (that page's "Window-limited runs"), where each ms of RTT
costs Data, ZeRO2 and Shard more than Pipeshard, as in the study:

    sudo .venv/bin/python bench/bench_live_validate.py --model small-wan --global-batch 8 \
         --tcp-window-kib 128 --quick --timeout 240 --out-dir bench-validate-window

(2 layers x 256 wide, 32 tokens a sequence: 6.6 MB of gradients against 0.26 MB of
activations per pipeline send; TCP buffers capped at 128 KiB in the emulated hosts; ~6 min.)
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from geosim.live.experiments import validate

    validate.add_arguments(parser)
    parser.set_defaults(out="bench-validate")
    args = parser.parse_args()
    started, load = time.perf_counter(), os.getloadavg()[0]
    code = validate.run(args)
    print(f"wall time: {time.perf_counter() - started:.0f} s (1-minute load {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} cores)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
