"""Tiny network probes run inside a slice's namespaces by live.wan.measure.

    python -m live.wan.probe echo                      # UDP echo server: prints "ready PORT"
    python -m live.wan.probe ping ADDR PORT COUNT INTERVAL_S TIMEOUT_S
    python -m live.wan.probe sink                      # TCP receiver: prints "ready PORT"
    python -m live.wan.probe source ADDR PORT SECONDS

Results are one JSON line on stdout. Pure standard library so the measurement does not
depend on ping or iperf3 being installed. Every wait is bounded: a probe left behind
exits by itself within IDLE_S.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time

IDLE_S = 30.0
_PING = struct.Struct("!Id")  # sequence number, send time


def echo() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 0))
    s.settimeout(IDLE_S)
    print(f"ready {s.getsockname()[1]}", flush=True)
    while True:
        try:
            data, peer = s.recvfrom(2048)
        except TimeoutError:
            return
        if data == b"quit":
            return
        s.sendto(data, peer)


def ping(addr: str, port: int, count: int, interval_s: float, timeout_s: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((addr, port))
    rtts, lost = [], 0
    pad = b"\0" * 48  # 56-byte payload, like ping's default
    for seq in range(count + 1):  # seq 0 is a warm-up (first packet through a fresh path)
        t0 = time.perf_counter()
        s.send(_PING.pack(seq, t0) + pad)
        deadline = t0 + timeout_s  # a later echo is counted lost (and ignored when it comes)
        got = None
        while got is None:
            s.settimeout(max(1e-3, deadline - time.perf_counter()))
            try:
                data = s.recv(2048)
            except TimeoutError:
                break
            t1 = time.perf_counter()
            rseq, sent = _PING.unpack_from(data)
            if rseq == seq:
                got = (t1 - sent) * 1000.0
        if seq > 0:
            if got is None:
                lost += 1
            else:
                rtts.append(got)
        left = t0 + interval_s - time.perf_counter()
        if left > 0:
            time.sleep(left)
    s.send(b"quit")
    print(json.dumps({"rtt_ms": rtts, "lost": lost}), flush=True)


def sink() -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 0))
    srv.listen(1)
    srv.settimeout(IDLE_S)
    print(f"ready {srv.getsockname()[1]}", flush=True)
    conn, _ = srv.accept()
    conn.settimeout(IDLE_S)
    buf = bytearray(1 << 20)
    total, t_first, samples, next_sample = 0, None, [], 0.0
    while True:
        n = conn.recv_into(buf)
        now = time.perf_counter()
        if not n:
            break
        if t_first is None:
            t_first = now
        total += n
        if now >= next_sample:  # (time, bytes) every 50 ms: enough to cut off slow start
            samples.append((now - t_first, total))
            next_sample = now + 0.05
    if t_first is not None:
        samples.append((now - t_first, total))
    print(json.dumps({"bytes": total, "samples": samples}), flush=True)


def source(addr: str, port: int, seconds: float) -> None:
    s = socket.create_connection((addr, port), timeout=IDLE_S)
    chunk = memoryview(bytearray(1 << 20))
    total, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        s.sendall(chunk)
        total += len(chunk)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # wait for the sink's close: everything sent has arrived
    s.close()
    print(json.dumps({"bytes": total}), flush=True)


def main(argv: list[str]) -> int:
    role, args = argv[1], argv[2:]
    try:  # measure the emulated link, not how long a busy 2-core machine takes to schedule us
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(5))
    except (OSError, AttributeError):
        pass
    if role == "echo":
        echo()
    elif role == "ping":
        ping(args[0], int(args[1]), int(args[2]), float(args[3]), float(args[4]))
    elif role == "sink":
        sink()
    elif role == "source":
        source(args[0], int(args[1]), float(args[2]))
    else:
        print(f"unknown probe {role!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
