"""How one host's simultaneous flows share its egress, measured on the emulated WAN and set beside
geosim's TCP model: the physics behind issue 47's hop question.

A host whose GPUs all send at one instant (a pipeline stage's activations, a data ring's first
chunks) puts several TCP flows on one NIC and one WAN hop. geosim's hops serve messages first come,
first served: the k-th of N equal messages ends about k line times after the instant. A link that
TCP shares among its flows ends them together, near N line times. This bench runs the real thing:
N connections between two namespaces of the WAN emulator (Linux TCP, the machine's congestion
control, the emulator's tbf rate cap at the sender, a user-space delay), each sending one message
of SIZE bytes at one instant after an idle gap, each timed to its one-byte ack; and the same N
messages on geosim's TCP model of that link (the slice's tbf as the link's shaper, as
live/experiments/runtime_validation.py states it for its message probes), where they are priced one after another.

    sudo python bench/bench_shared_hop.py                          # 20 ms, 200 Mbit/s, 1/2/4/8 flows of 4 MB
    sudo python bench/bench_shared_hop.py --flows 1,4 --size 1000000 --rtt-ms 40 --congestion cubic --json

Needs root, /dev/net/tun and iproute2 (the emulator's needs: live/wan/netns.check_host). Prints,
per flow count, the median over repeats of the first, middle and last flow's time to its ack, and
the model's first and last; "ends together" is first / last (1.0: all at once; about 1 / N: one
after another).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def model_times(flows: int, size: int, rtt_ms: float, rate_gbps: float, repeats: int, gap_s: float):
    """The same bursts on geosim's TCP model of the slice (runtime_validation.probe_network: its tbf as
    the link's shaper, its buffers as the window): host h0's `flows` devices each send `size` bytes to
    their peer on h1 at one instant after `gap_s` idle, `repeats` times; per repeat, each flow's seconds
    to its ack (arrival plus the ack's one-way trip)."""
    from geosim.inputs.params import default_params
    from geosim.live.experiments.runtime_validation import probe_network

    net = probe_network(rate_gbps, rtt_ms, default_params(), devices_per_host=flows)
    back = net.route(0, flows).one_way_s
    now, out = 0.0, []
    for _ in range(repeats):
        now += gap_s
        ends = [net.send_at(i, flows + i, size, False, "burst", now) for i in range(flows)]
        out.append([end - now + back for end in ends])
        now = max(ends) + back
    return out


def order_stats(runs: list[list[float]]) -> dict:
    """The median over repeats of the first, middle and last flow to finish."""
    ordered = [sorted(r) for r in runs]
    pick = lambda k: statistics.median(r[k] for r in ordered)  # noqa: E731
    n = len(ordered[0])
    return {"first_s": pick(0), "middle_s": pick(n // 2), "last_s": pick(n - 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--bandwidth-gbps", type=float, default=0.2,
                        help="the emulator's cap at each host's egress (as `geosim live wan up --bandwidth-gbps`)")
    parser.add_argument("--flows", default="1,2,4,8", help="flow counts, comma-separated (default %(default)s)")
    parser.add_argument("--size", type=int, default=4_000_000, help="bytes per message (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--gap-s", type=float, default=0.3,
                        help="idle before each burst (past the RTO: slow start restarts, as between steps)")
    parser.add_argument("--congestion", default=None,
                        help="the namespaces' TCP congestion control (default: the machine's)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = parser.parse_args(argv)
    try:
        counts = [int(x) for x in args.flows.split(",")]
    except ValueError:
        print(f"bench_shared_hop: --flows: {args.flows!r} is not a comma-separated list of whole numbers",
              file=sys.stderr)
        return 2
    if any(not 1 <= n <= 64 for n in counts) or args.size < 1 or args.repeats < 1 or args.gap_s < 0:
        print("bench_shared_hop: --flows takes 1-64 flows, --size and --repeats at least 1, --gap-s at least 0",
              file=sys.stderr)
        return 2

    from geosim.base.errors import GeosimError
    from geosim.live.experiments.rate_runs import set_congestion
    from geosim.live.wan import netns
    from geosim.live.wan.emulator import up
    from geosim.live.wan.measure import measure_burst, measure_rtt

    try:
        netns.check_host()
    except GeosimError as exc:
        print(f"bench_shared_hop: {exc}", file=sys.stderr)
        return 2
    rows = []
    with up(rtt_ms=args.rtt_ms, bandwidth_mbit=args.bandwidth_gbps * 1000, hosts=2, ttl_s=1800,
            state=str(Path("/tmp") / f"bench_shared_hop-{time.time_ns()}.json")) as wan:
        rtt = measure_rtt(wan, count=20, interval_s=0.01)["median_ms"]
        try:
            congestion = set_congestion(wan, args.congestion)
        except subprocess.CalledProcessError:
            allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text().strip()
            print(f"bench_shared_hop: --congestion {args.congestion!r}: a namespace may choose only what "
                  f"net.ipv4.tcp_allowed_congestion_control lists ({allowed})", file=sys.stderr)
            return 2
        if not args.json:
            print(f"emulated link: RTT {args.rtt_ms:g} ms (measured {rtt:.1f}), {args.bandwidth_gbps * 1000:g} Mbit/s "
                  f"at the sender, {congestion}; {args.size:,} B a flow, {args.repeats} repeats after "
                  f"{args.gap_s:g} s idle; load {load()}")
            print(f"{'flows':>5} | {'measured first / middle / last (s)':>36} | {'ends together':>13} | "
                  f"{'geosim first / last (s)':>23} | {'ends together':>13}")
        for n in counts:
            before = load()
            measured = measure_burst(wan, n, args.size, repeats=args.repeats, gap_s=args.gap_s)
            model = model_times(n, args.size, args.rtt_ms, args.bandwidth_gbps, args.repeats, args.gap_s)
            m, g = order_stats(measured), order_stats(model)
            row = {"flows": n, "measured": m, "geosim": g, "measured_together": m["first_s"] / m["last_s"],
                   "geosim_together": g["first_s"] / g["last_s"], "runs_s": measured, "load": before}
            rows.append(row)
            if not args.json:
                print(f"{n:>5} | {m['first_s']:>10.3f} / {m['middle_s']:>9.3f} / {m['last_s']:>9.3f} | "
                      f"{row['measured_together']:>13.2f} | {g['first_s']:>10.3f} / {g['last_s']:>10.3f} | "
                      f"{row['geosim_together']:>13.2f}", flush=True)
    if args.json:
        print(json.dumps({"rtt_ms": args.rtt_ms, "measured_rtt_ms": rtt, "bandwidth_gbps": args.bandwidth_gbps,
                          "size": args.size, "repeats": args.repeats, "gap_s": args.gap_s,
                          "congestion": congestion, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
