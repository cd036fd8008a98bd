"""Bench the WAN emulator: median RTT at 10 and 40 ms, TCP throughput vs the requested cap.

    sudo python bench/wan_emulator.py [--runs 3] [--seconds 3] [--json]

Each figure is the median over `runs` fresh slices (a slice per run, so calibration and
setup are part of what is measured). Needs root and /dev/net/tun; uses its own state file,
so it does not disturb a slice brought up with `geosim live wan up`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from geosim.live.wan import emulator
from geosim.live.wan.measure import measure_rtt, measure_throughput


def bench(runs: int, seconds: float, state: str) -> list[dict]:
    rows = []
    for rtt in (10.0, 40.0):
        meds = []
        for _ in range(runs):
            with emulator.up(rtt, ttl_s=300, state=state) as wan:
                meds.append(measure_rtt(wan, count=20)["median_ms"])
        med = statistics.median(meds)
        rows.append({"what": "rtt", "requested": rtt, "measured": med, "error_pct": 100 * (med - rtt) / rtt,
                     "runs": [round(m, 3) for m in meds]})
    for rtt, cap in ((10.0, 200.0), (40.0, 200.0), (40.0, 1000.0), (10.0, None)):
        rates, cpu = [], []
        for _ in range(runs):
            with emulator.up(rtt, bandwidth_mbit=cap, ttl_s=300, state=state) as wan:
                c0, t0 = _cpu_s(wan.forwarder_pid), time.monotonic()
                rates.append(measure_throughput(wan, seconds=seconds)["mbit_steady"])
                cpu.append((_cpu_s(wan.forwarder_pid) - c0) / (time.monotonic() - t0))
        med = statistics.median(rates)
        rows.append({"what": "throughput", "rtt_ms": rtt, "requested": cap, "measured": med,
                     "error_pct": 100 * (med - cap) / cap if cap else None, "runs": [round(r, 1) for r in rates],
                     "forwarder_cpu": round(statistics.median(cpu), 2)})
    return rows


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="geosim-wan-bench-") as tmp:
        rows = bench(args.runs, args.seconds, os.path.join(tmp, "state.json"))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        if r["what"] == "rtt":
            print(f"RTT  requested {r['requested']:5.1f} ms  median {r['measured']:7.3f} ms  "
                  f"({r['error_pct']:+.1f}%)  runs {r['runs']}")
        else:
            req = f"{r['requested']:6.0f} Mbit/s" if r["requested"] else "   no cap    "
            err = f"({r['error_pct']:+.1f}%)" if r["error_pct"] is not None else ""
            print(f"TCP  rtt {r['rtt_ms']:4.0f} ms  cap {req}  median {r['measured']:7.1f} Mbit/s {err:9}"
                  f" forwarder {r['forwarder_cpu']:.2f} cores  runs {r['runs']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
