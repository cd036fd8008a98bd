"""Benchmark: the whole live validation loop on the emulated WAN (root, /dev/net/tun).

    sudo .venv/bin/python bench/bench_live_validate.py [--out-dir bench-validate] [--steps 12]
         [--rtt-ms 0.1,10,40] [--technique data,zero2,shard,pipeshard] [--records runs.jsonl]

Runs `geosim live validate` with the issue's defaults (four techniques at RTT 0.1, 10
and 40 ms, 2 emulated hosts with one CPU device each, 1000 Mbit/s per host, tiny GPT-2),
i.e. one 2-process gloo run per technique and RTT, then the fit on two RTTs and the
prediction of the third (and of each other RTT in turn). Prints the table and the wall
time of each phase; docs/results/2026-11-22-live-validate.md logs its figures. `--records`
re-fits earlier runs without running anything (no root needed then).

The window-limited configuration (that page's "Window-limited runs"), where each ms of RTT
costs Data, ZeRO2 and Shard more than Pipeshard, as in the study:

    sudo .venv/bin/python bench/bench_live_validate.py --model small-wan --global-batch 8 \
         --tcp-window-kib 128 --quick --timeout 240 --out-dir bench-validate-window

(2 layers x 256 wide, 32 tokens a sequence: 6.6 MB of gradients against 0.26 MB of
activations per pipeline send; TCP buffers capped at 128 KiB in the emulated hosts; ~6 min.)
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from geosim.live.experiments import validate

    validate.add_arguments(parser)
    parser.set_defaults(out="bench-validate")
    args = parser.parse_args()
    started = time.perf_counter()
    code = validate.run(args)
    print(f"wall time: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
