"""Network probes: the measuring ends used inside a slice's namespaces (live.wan.measure)
and by the Ray probe agent between real hosts (live.wan.agent).

In a namespace, as separate processes:

    python -m geosim.live.wan.probe echo BIND_ADDR       # UDP echo server: prints "ready PORT"
    python -m geosim.live.wan.probe ping ADDR PORT COUNT INTERVAL_S TIMEOUT_S
    python -m geosim.live.wan.probe sink BIND_ADDR       # TCP receiver: prints "ready PORT"
    python -m geosim.live.wan.probe source ADDR PORT SECONDS
    python -m geosim.live.wan.probe msgsink BIND_ADDR    # acks each message: prints "ready PORT"
    python -m geosim.live.wan.probe messages ADDR PORT SIZES REPEATS GAP_S

Results are one JSON line on stdout. Between Ray nodes, in the agent's process: TcpServer
(echo and byte sink on one port), tcp_rtt_ms and tcp_gbps. Servers bind the address they
are given, never all interfaces. Pure standard library so the measurement does not depend
on ping or iperf3 being installed. Every wait is bounded: a probe left behind exits by
itself within IDLE_S.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import struct
import sys
import threading
import time

IDLE_S = 30.0
_PING = struct.Struct("!Id")  # sequence number, send time


def echo(bind: str) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((bind, 0))
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


def sink(bind: str) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, 0))
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


_MSG = struct.Struct("!Q")  # a message's length, ahead of its bytes


def msgsink(bind: str) -> None:
    """Receives length-prefixed messages on one connection and acks each with one byte once all of
    it has arrived: the sender's clock then spans the message's transfer plus one RTT."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, 0))
    srv.listen(1)
    srv.settimeout(IDLE_S)
    print(f"ready {srv.getsockname()[1]}", flush=True)
    conn, _ = srv.accept()
    conn.settimeout(IDLE_S * 4)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(1 << 20)
    while True:
        head = b""
        while len(head) < _MSG.size:
            got = conn.recv(_MSG.size - len(head))
            if not got:
                return
            head += got
        left = _MSG.unpack(head)[0]
        while left:
            n = conn.recv_into(buf, min(left, len(buf)))
            if not n:
                return
            left -= n
        conn.sendall(b"k")


def messages(addr: str, port: int, sizes: list[int], repeats: int, gap_s: float) -> None:
    """Sends each size `repeats` times on one connection, idle `gap_s` before each (a training
    step's compute between two gradient exchanges): seconds from the first byte written to the ack."""
    s = socket.create_connection((addr, port), timeout=IDLE_S * 4)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = {}
    for size in sizes:
        payload = memoryview(bytearray(size))
        times = []
        for _ in range(repeats):
            time.sleep(gap_s)
            t0 = time.perf_counter()
            s.sendall(_MSG.pack(size))
            s.sendall(payload)
            if s.recv(1) != b"k":
                raise ConnectionError("the message sink closed early")
            times.append(time.perf_counter() - t0)
        out[str(size)] = times
    s.close()
    print(json.dumps({"seconds": out}), flush=True)


# ----------------------------------------------------------------- between Ray nodes (the agent)
CHUNK = 1 << 20


def recv_exact(conn, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise ConnectionError("peer closed")
        data += part
    return data


class TcpServer:
    """One TCP port on `bind`: a client's first byte picks echo (b"p": 64-byte messages sent
    back) or sink (anything else: bytes counted until EOF, the count sent back)."""

    def __init__(self, bind: str):
        self.socket = socket.create_server((bind, 0), backlog=64)
        self.port = self.socket.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.socket.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            mode = recv_exact(conn, 1)
            if mode == b"p":  # echo fixed-size messages until the client closes
                while True:
                    try:
                        conn.sendall(recv_exact(conn, 64))
                    except ConnectionError:
                        return
            else:  # sink: count bytes until EOF, answer with the count
                total = 0
                while part := conn.recv(CHUNK):
                    total += len(part)
                conn.sendall(struct.pack("!Q", total))

    def close(self):
        self.socket.close()


def tcp_rtt_ms(ip: str, port: int, count: int) -> float:
    """Median of `count` 64-byte request/response round trips (TCP_NODELAY) to a TcpServer."""
    with socket.create_connection((ip, port), timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"p")
        rtts, msg = [], b"x" * 64
        for _ in range(count + 2):
            t = time.perf_counter()
            s.sendall(msg)
            recv_exact(s, 64)
            rtts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(rtts[2:])  # the first round trips include connection warm-up


def tcp_gbps(ip: str, port: int, streams: int, seconds: float) -> float:
    """Gbit/s that arrived at a TcpServer over `streams` parallel connections sending for `seconds`."""
    totals = [0] * streams
    payload = b"\0" * CHUNK

    def send(i):
        with socket.create_connection((ip, port), timeout=60) as s:
            s.sendall(b"s")
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            totals[i] = struct.unpack("!Q", recv_exact(s, 8))[0]  # bytes that arrived

    start = time.perf_counter()
    threads = [threading.Thread(target=send, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(totals) * 8 / (time.perf_counter() - start) / 1e9


def main(argv: list[str]) -> int:
    role, args = argv[1], argv[2:]
    try:  # measure the emulated link, not how long a busy 2-core machine takes to schedule us
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(5))
    except (OSError, AttributeError):
        pass
    if role == "echo":
        echo(args[0])
    elif role == "ping":
        ping(args[0], int(args[1]), int(args[2]), float(args[3]), float(args[4]))
    elif role == "sink":
        sink(args[0])
    elif role == "source":
        source(args[0], int(args[1]), float(args[2]))
    elif role == "msgsink":
        msgsink(args[0])
    elif role == "messages":
        messages(args[0], int(args[1]), [int(x) for x in args[2].split(",")], int(args[3]), float(args[4]))
    else:
        print(f"unknown probe {role!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
