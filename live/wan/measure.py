"""Measure a slice from the inside: RTT (ICMP echo, or UDP echo) and TCP throughput between two hosts.

Both run the probes of live/wan/probe.py in the hosts' namespaces, as separate processes,
the way training processes will run there. `wan` is an emulator.WanSlice (this module does
not import the emulator, which uses it to calibrate a new slice).
"""

from __future__ import annotations

import json
import select
import statistics
import subprocess
import sys

from geosim.base.errors import GeosimError
from geosim.live.wan import netns
from geosim.live.wan.probe import RTT_METHODS

SOURCE = "geosim live wan measure"


def _probe(wan, i: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen(wan.exec_argv(i, [sys.executable, "-m", "geosim.live.wan.probe", *args]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=netns.child_env())


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    if not select.select([proc.stdout], [], [], timeout_s)[0]:
        raise GeosimError(f"probe {proc.args[-1]!r} gave no answer within {timeout_s:g} s", source=SOURCE)
    line = proc.stdout.readline()
    if not line:
        proc.wait(5)
        raise GeosimError(f"probe failed: {proc.stderr.read().strip()[-300:]}", source=SOURCE)
    return line.strip()


def _server(wan, i: int, role: str) -> tuple[subprocess.Popen, int]:
    proc = _probe(wan, i, role, wan.hosts[i].address)  # listens on the host's address only
    try:
        line = _readline(proc, 15)
    except BaseException:
        _stop(proc)
        raise
    return proc, int(line.split()[1])


def _answer(wan, i: int, budget_s: float, *args: str) -> dict:
    """Run a client probe in host i and return the JSON line it prints (within budget_s)."""
    client = _probe(wan, i, *args)
    try:
        return json.loads(_readline(client, budget_s))
    finally:
        _stop(client)


def _stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(5)
        for f in (p.stdout, p.stderr):
            f.close()


def measure_rtt(wan, *, src: int = 0, dst: int = 1, count: int = 20,
                interval_s: float = 0.02, timeout_s: float | None = None, method: str = "icmp") -> dict:
    """Round trips of a 56-byte echo from host src to host dst, in milliseconds: an ICMP echo the
    destination's kernel answers (default: what a TCP segment and its ACK see on the path), or a UDP
    datagram a Python echo server in dst sends back ("udp": also counts that server's wake-up, which on
    a busy 2-core machine doubled a 0.1 ms RTT: docs/results/2026-11-26-cpu-compute.md). A ping without
    an echo within timeout_s (default max(0.25 s, 4 x RTT + jitter)) is lost."""
    if method not in RTT_METHODS:
        raise GeosimError(f"unknown RTT method {method!r} (known: {', '.join(RTT_METHODS)})", source=SOURCE)
    if timeout_s is None:
        timeout_s = max(0.25, 4 * wan.rtt_ms[src][dst] / 1000 + 2 * wan.jitter_ms / 1000)
    budget = 20 + (count + 1) * (interval_s + timeout_s)
    if method == "icmp":
        result = _answer(wan, src, budget, "icmp", wan.hosts[dst].address, str(count), str(interval_s), str(timeout_s))
    else:
        server, port = _server(wan, dst, "echo")
        try:
            result = _answer(wan, src, budget, "ping", wan.hosts[dst].address, str(port), str(count), str(interval_s),
                             str(timeout_s))
        finally:
            _stop(server)
    rtts = result["rtt_ms"]
    if not rtts:
        raise GeosimError(f"no echo came back from {wan.hosts[dst].address} ({count} sent)", source=SOURCE)
    return {"src": src, "dst": dst, "requested_ms": wan.rtt_ms[src][dst], "method": method, "count": count,
            "lost": result["lost"], "median_ms": statistics.median(rtts), "mean_ms": statistics.fmean(rtts),
            "min_ms": min(rtts), "max_ms": max(rtts), "samples_ms": rtts}


def measure_throughput(wan, *, src: int = 0, dst: int = 1, seconds: float = 3.0,
                       warmup_s: float | None = None) -> dict:
    """One TCP stream from src to dst for `seconds`; the rate after `warmup_s` is the
    steady-state figure (default: skip max(0.5 s, 15 RTTs) of slow start)."""
    rtt_s = wan.rtt_ms[src][dst] / 1000
    if warmup_s is None:
        warmup_s = min(max(0.5, 15 * rtt_s), seconds / 2)
    server, port = _server(wan, dst, "sink")
    try:
        client = _probe(wan, src, "source", wan.hosts[dst].address, str(port), str(seconds))
        try:
            sent = json.loads(_readline(client, seconds + 30))
            got = json.loads(_readline(server, 10))
        finally:
            _stop(client)
    finally:
        _stop(server)
    samples = got["samples"]
    t_end, b_end = samples[-1]
    steady = [(t, b) for t, b in samples if t >= warmup_s]
    t0, b0 = steady[0] if steady and t_end - steady[0][0] > 0.2 else (0.0, 0)
    mbit = lambda b, t: b * 8 / t / 1e6 if t > 0 else 0.0  # noqa: E731
    return {"src": src, "dst": dst, "requested_mbit": wan.bandwidth_mbit, "seconds": t_end, "bytes": got["bytes"],
            "bytes_sent": sent["bytes"], "mbit_total": mbit(b_end, t_end), "mbit_steady": mbit(b_end - b0, t_end - t0),
            "warmup_s": t0}



def measure_messages(wan, sizes: list[int], *, src: int = 0, dst: int = 1, repeats: int = 5,
                     gap_s: float = 0.3) -> dict:
    """Seconds to move one message of each size from src to dst and get its one-byte ack, on one
    TCP connection, each after `gap_s` idle (longer than the RTO, so Linux restarts slow start as it
    does between a training step's gradient exchanges). {size: [seconds, ...]}."""
    server, port = _server(wan, dst, "msgsink")
    try:
        budget = 30 + repeats * sum(gap_s + 8 * s / ((wan.bandwidth_mbit or 1000) * 1e6) + 1 for s in sizes)
        result = _answer(wan, src, budget, "messages", wan.hosts[dst].address, str(port),
                         ",".join(str(int(s)) for s in sizes), str(repeats), str(gap_s))
    finally:
        _stop(server)
    return {int(k): v for k, v in result["seconds"].items()}


def measure_burst(wan, flows: int, size: int, *, src: int = 0, dst: int = 1, repeats: int = 5,
                  gap_s: float = 0.3) -> list[list[float]]:
    """`flows` connections from src to dst each send one message of `size` bytes at one instant, after
    `gap_s` idle, and wait for its one-byte ack; per repeat, each flow's seconds to its ack (in flow
    order). How one host's simultaneous flows share its egress: one after another, or together."""
    server = _probe(wan, dst, "burstsink", wan.hosts[dst].address, str(flows))
    try:
        port = int(_readline(server, 15).split()[1])
        budget = 30 + repeats * (gap_s + 8 * flows * size / ((wan.bandwidth_mbit or 1000) * 1e6) + 2)
        result = _answer(wan, src, budget, "burst", wan.hosts[dst].address, str(port), str(flows), str(size),
                         str(repeats), str(gap_s))
    finally:
        _stop(server)
    return result["seconds"]
