"""`geosim live wan up|down|status|measure`: the emulated WAN slice from the command line.

live/cli.py hooks this in with add_arguments(parser) and run(args). Only the standard
library, geosim.base.errors and the probes' RTT methods load at import; the emulator loads when a command runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from geosim.cli.vocabulary import add_renamed
from geosim.base.errors import GeosimError
from geosim.live.wan.probe import RTT_METHODS
from geosim.inputs.scenario import check_number

HELP = "emulate a geo-distributed slice on this machine: hosts in network namespaces joined by a delayed WAN link (root)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="wan_command", metavar="ACTION")
    sub.required = True

    p = sub.add_parser("up", help="bring up N emulated hosts joined by a WAN link",
                       description="Bring up N hosts (network namespaces) joined by an emulated WAN link. Needs root.")
    p.add_argument("--rtt-ms", type=float, default=40.0, help="round-trip time between every pair of hosts (default %(default)s)")
    p.add_argument("--rtt-matrix", metavar="ROWS",
                   help="per-pair RTTs in ms instead of --rtt-ms, rows separated by ';', e.g. '0,10,40;10,0,30;40,30,0'")
    p.add_argument("--bandwidth-gbps", type=float, default=None,
                   help="egress cap of each host in Gbit/s (tbf; TCP goodput is ~95%% of it); default: no cap")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="uniform +- jitter on each one-way delay (no reordering)")
    p.add_argument("--loss", type=float, default=0.0, help="probability in [0, 1) that a frame is dropped")
    p.add_argument("--host-count", dest="hosts", type=int, default=2, help="number of emulated hosts (default %(default)s)")
    add_renamed(p, "--num-hosts", "--host-count", dest="hosts", type=int)
    p.add_argument("--ttl-s", type=float, default=3600.0, help="tear down by itself after this many seconds (default %(default)s)")
    p.add_argument("--mtu", type=int, default=1500, help="MTU of the emulated link (default %(default)s)")
    p.add_argument("--no-calibrate", action="store_true", help="do not take the path's own overhead off the delay")
    p.add_argument("--no-offload", action="store_true", help="no TCP segmentation offload on the TAPs (slower forwarder)")
    p.add_argument("--no-realtime", action="store_true", help="run the forwarder at normal priority, not SCHED_FIFO")
    p.add_argument("--tcp-window-kib", type=float, default=None, metavar="N",
                   help="cap TCP socket buffers in every host at N KiB (per-namespace net.ipv4.tcp_rmem/tcp_wmem max): "
                        "a flow then moves about a window per round trip; default: sized for the bandwidth-delay product")
    p.add_argument("--json", action="store_true", help="print the slice as JSON")

    p = sub.add_parser("down", help="tear the slice down now, and whatever dead slices left behind (idempotent)")
    p.add_argument("--all", action="store_true", help="tear down every geosim WAN slice on this machine")

    p = sub.add_parser("status", help="show the slice that is up and any leftovers (exit 1 if none is up)")
    p.add_argument("--json", action="store_true", help="print the slice as JSON (null if none; leftovers go to stderr)")

    p = sub.add_parser("measure", help="measure RTT and TCP throughput between two hosts of the slice")
    p.add_argument("--src", type=int, default=0, help="sending host (default %(default)s)")
    p.add_argument("--dst", type=int, default=1, help="receiving host (default %(default)s)")
    p.add_argument("--count", type=int, default=20, help="RTT samples (default %(default)s)")
    p.add_argument("--rtt-method", choices=RTT_METHODS, default=RTT_METHODS[0],
                   help="icmp: echo answered by the destination's kernel, what TCP's segments see (default); "
                        "udp: a Python echo server, whose wake-up adds 0.1-0.2 ms on a busy machine")
    p.add_argument("--seconds", type=float, default=3.0, help="length of the TCP transfer (default %(default)s; 0 skips it)")
    p.add_argument("--message-sizes", metavar="BYTES",
                   help="also time one message of each size (comma-separated bytes) and its one-byte ack, 5 times "
                        "each after 0.3 s idle, as a training step's gradient exchange goes")
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def _matrix(text: str) -> list[list[float]]:

    try:
        return [[float(x) for x in row.split(",")] for row in text.strip().strip(";").split(";")]
    except ValueError:
        raise GeosimError(f"expected rows of numbers like '0,10;10,0', got {text!r}",
                          source="geosim live wan up", key="--rtt-matrix") from None


def _describe(wan) -> str:
    pairs = {r for i, row in enumerate(wan.rtt_ms) for j, r in enumerate(row) if i != j}
    uniform = len(pairs) == 1
    rtt = f"RTT {next(iter(pairs)):g} ms" if uniform else "RTT per pair (matrix)"
    bw = f"{wan.bandwidth_mbit:g} Mbit/s per host" if wan.bandwidth_mbit else "no bandwidth cap"
    if wan.extra.get("tcp_window_kib"):
        bw += f", TCP window {wan.extra['tcp_window_kib']:g} KiB"
    left = max(0.0, wan.expires_at - time.time())
    lines = [f"WAN slice {wan.id}: {len(wan.hosts)} hosts, {rtt}, {bw}, jitter {wan.jitter_ms:g} ms, "
             f"loss {wan.loss:g}; tears down in {left:.0f} s"]
    lines.append(f"  {'host':<5}{'hostname':<12}{'address':<13}{'interface':<11}namespace")
    for i, h in enumerate(wan.hosts):
        lines.append(f"  {i:<5}{h.hostname:<12}{h.address:<13}{h.interface:<11}{h.namespace}")
    if not uniform:
        for i, row in enumerate(wan.rtt_ms):
            lines.append(f"  rtt_ms[{i}] = {', '.join(f'{r:g}' for r in row)}")
    lines.append(f"run a command in host 0: ip netns exec {wan.hosts[0].namespace} COMMAND")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from geosim.live.wan import emulator

    action = args.wan_command
    if action == "up":
        rtt = _matrix(args.rtt_matrix) if args.rtt_matrix else args.rtt_ms
        mbit = None
        if args.bandwidth_gbps is not None:  # the emulator's tbf takes Mbit/s: check in the unit the user typed

            mbit = 1000 * check_number(args.bandwidth_gbps, None, "--bandwidth-gbps", emulator.MIN_MBIT / 1000,
                                       emulator.MAX_MBIT / 1000)
        wan = emulator.up(rtt, bandwidth_mbit=mbit, hosts=args.hosts, jitter_ms=args.jitter_ms,
                          loss=args.loss, ttl_s=args.ttl_s, mtu=args.mtu, calibrate=not args.no_calibrate,
                          offload=False if args.no_offload else None,
                          realtime=not args.no_realtime, tcp_window_kib=args.tcp_window_kib)
        print(json.dumps(wan.to_dict(), indent=2) if args.json else _describe(wan))
        return 0
    if action == "down":
        done = emulator.down(everything=args.all)
        print(f"WAN slice {', '.join(done)} down" if done else "no WAN slice was up")
        return 0
    if action == "status":
        return _status(args)
    if action == "measure":
        return _measure(args)
    raise AssertionError(action)


def _status(args: argparse.Namespace) -> int:
    """The slice that is up, and what dead slices left behind (named, for `down` to remove)."""
    from geosim.live.wan import emulator

    try:
        wan = emulator.current()
    except emulator.BrokenState:
        wan = None  # leftovers() reports the file
    found = emulator.leftovers()
    lines = emulator.describe_leftovers(found)
    print(json.dumps(wan.to_dict() if wan else None, indent=2) if args.json else
          _describe(wan) if wan else "no WAN slice is up")
    if lines:  # on stderr with --json, so stdout stays the slice alone
        print("left over from a slice whose forwarder is gone (`geosim live wan down` removes them):\n"
              + "\n".join("  " + line for line in lines), file=sys.stderr if args.json else sys.stdout)
    return 0 if wan else 1


def _measure(args: argparse.Namespace) -> int:
    from geosim.live.wan import emulator, measure

    wan = emulator.current()
    if wan is None:
        raise GeosimError("no WAN slice is up; start one with `geosim live wan up`", source="geosim live wan measure")
    for key, i in (("--src", args.src), ("--dst", args.dst)):
        if not 0 <= i < len(wan.hosts):
            raise GeosimError(f"no host {i} (the slice has {len(wan.hosts)})", source="geosim live wan measure", key=key)
    if args.src == args.dst:
        raise GeosimError("must differ from --src", source="geosim live wan measure", key="--dst")
    rtt = measure.measure_rtt(wan, src=args.src, dst=args.dst, count=max(1, args.count), method=args.rtt_method)
    sizes = []
    if args.message_sizes:
        try:
            sizes = [int(x) for x in args.message_sizes.split(",")]
        except ValueError:
            sizes = [0]
        if not sizes or any(not 1 <= s <= 1 << 30 for s in sizes):
            raise GeosimError(f"must be comma-separated byte counts in [1, 2^30], got {args.message_sizes!r}",
                              source="geosim live wan measure", key="--message-sizes")
    tput = measure.measure_throughput(wan, src=args.src, dst=args.dst, seconds=args.seconds) if args.seconds > 0 else None
    messages = measure.measure_messages(wan, sizes, src=args.src, dst=args.dst) if sizes else None
    if args.json:
        print(json.dumps({"slice": wan.id, "rtt": rtt, "throughput": tput, "messages_s": messages}, indent=2))
        return 0
    print(f"RTT host{args.src} -> host{args.dst}: median {rtt['median_ms']:.2f} ms (min {rtt['min_ms']:.2f}, "
          f"max {rtt['max_ms']:.2f}, {len(rtt['samples_ms'])} {rtt['method'].upper()} pings, {rtt['lost']} lost; "
          f"requested {rtt['requested_ms']:g} ms)")
    if tput:
        cap = f"cap {tput['requested_mbit']:g} Mbit/s" if tput["requested_mbit"] else "no cap"
        print(f"TCP host{args.src} -> host{args.dst}: {tput['mbit_steady']:.1f} Mbit/s after slow start "
              f"({tput['mbit_total']:.1f} over all {tput['seconds']:.1f} s; {cap})")
    for size, seconds in (messages or {}).items():
        print(f"message of {size:,} B host{args.src} -> host{args.dst} and its ack: median "
              f"{statistics.median(seconds) * 1e3:.1f} ms of {len(seconds)}")
    return 0
