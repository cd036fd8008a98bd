"""Network probes: the measuring ends used inside a slice's namespaces (live.wan.measure)
and by the Ray probe agent between real hosts (live.wan.agent).

In a namespace, as separate processes:

    python -m geosim.live.wan.probe echo BIND_ADDR       # UDP echo server: prints "ready PORT"
    python -m geosim.live.wan.probe ping ADDR PORT COUNT INTERVAL_S TIMEOUT_S
    python -m geosim.live.wan.probe icmp ADDR COUNT INTERVAL_S TIMEOUT_S   # echo answered by ADDR's kernel (root)
    python -m geosim.live.wan.probe sink BIND_ADDR       # TCP receiver: prints "ready PORT"
    python -m geosim.live.wan.probe source ADDR PORT SECONDS
    python -m geosim.live.wan.probe msgsink BIND_ADDR    # acks each message: prints "ready PORT"
    python -m geosim.live.wan.probe messages ADDR PORT SIZES REPEATS GAP_S
    python -m geosim.live.wan.probe burstsink BIND_ADDR FLOWS   # acks each flow's messages: "ready PORT"
    python -m geosim.live.wan.probe burst ADDR PORT FLOWS SIZE REPEATS GAP_S

Results are one JSON line on stdout. Between Ray nodes, in the agent's process: TcpServer
(echo and byte sink on one port), tcp_rtt_ms and tcp_gbps. Servers bind the address they
are given, never all interfaces. Pure standard library so the measurement does not depend
on ping or iperf3 being installed. Every wait is bounded: a probe left behind exits by
itself within IDLE_S.

Over 400 lines: every probe is a role of this one `python -m` entry point, which a slice's
namespaces run by name (measure.py), so the roles stay together; each is a short function.
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


def _pings(count: int, interval_s: float, one) -> None:
    """Send count + 1 pings, one(seq) -> its round trip in ms or None (lost), one every interval_s; seq 0
    is a warm-up (the first packet through a fresh path). Prints {"rtt_ms": [...], "lost": n}."""
    rtts, lost = [], 0
    for seq in range(count + 1):
        start = time.monotonic()
        got = one(seq)
        if seq > 0:
            if got is None:
                lost += 1
            else:
                rtts.append(got)
        left = start + interval_s - time.monotonic()
        if left > 0:
            time.sleep(left)
    print(json.dumps({"rtt_ms": rtts, "lost": lost}), flush=True)


def ping(addr: str, port: int, count: int, interval_s: float, timeout_s: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((addr, port))
    pad = b"\0" * 48  # 56-byte payload, like ping's default

    def one(seq: int) -> float | None:
        t0 = time.perf_counter()
        s.send(_PING.pack(seq, t0) + pad)
        deadline = t0 + timeout_s  # a later echo is counted lost (and ignored when it comes)
        while True:
            s.settimeout(max(1e-3, deadline - time.perf_counter()))
            try:
                data = s.recv(2048)
            except TimeoutError:
                return None
            t1 = time.perf_counter()
            rseq, sent = _PING.unpack_from(data)
            if rseq == seq:
                return (t1 - sent) * 1000.0

    _pings(count, interval_s, one)
    s.send(b"quit")


def _accept(bind: str, timeout_s: float, count: int = 1) -> list[socket.socket]:
    """Listens on `bind` (a free port, printed as 'ready PORT' for the prober) and takes `count` connections."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, 0))
    srv.listen(count)
    srv.settimeout(IDLE_S)
    print(f"ready {srv.getsockname()[1]}", flush=True)
    conns = [srv.accept()[0] for _ in range(count)]
    srv.close()
    for conn in conns:
        conn.settimeout(timeout_s)
    return conns


def _accept_one(bind: str, timeout_s: float) -> socket.socket:
    return _accept(bind, timeout_s)[0]


def sink(bind: str) -> None:
    conn = _accept_one(bind, IDLE_S)
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
    _ack_each_message(_accept_one(bind, IDLE_S * 4))


def _ack_each_message(conn: socket.socket) -> None:
    """Until the peer closes: read a length-prefixed message whole, then ack it with one byte."""
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


def burstsink(bind: str, flows: int) -> None:
    """msgsink over `flows` connections at once, one thread each (a receiving host's GPUs)."""
    conns = _accept(bind, IDLE_S * 4, flows)

    def serve(conn):
        try:
            _ack_each_message(conn)
        except OSError:  # the sender's side failed: it reports that
            return

    threads = [threading.Thread(target=serve, args=(c,), daemon=True) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def burst(addr: str, port: int, flows: int, size: int, repeats: int, gap_s: float) -> None:
    """`flows` connections from this host; in each repeat, after `gap_s` idle, every one of them sends a
    message of `size` bytes at one instant (a host's GPUs sending their activations or gradients
    together) and waits for its ack: each flow's seconds from that instant to its ack, in flow order."""
    conns = [socket.create_connection((addr, port), timeout=IDLE_S * 4) for _ in range(flows)]
    for c in conns:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = memoryview(bytearray(size))
    head = _MSG.pack(size)
    out: list[list[float]] = []
    for _ in range(repeats):
        time.sleep(gap_s)
        go = threading.Barrier(flows + 1)
        done = [0.0] * flows
        errors: list[BaseException] = []

        def send(i: int) -> None:
            try:
                go.wait()
                conns[i].sendall(head)
                conns[i].sendall(payload)
                if conns[i].recv(1) != b"k":
                    raise ConnectionError("the burst sink closed early")
                done[i] = time.perf_counter()
            except BaseException as exc:  # reported below, in the main thread
                errors.append(exc)

        threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(flows)]
        for t in threads:
            t.start()
        t0 = time.perf_counter()
        go.wait()
        for t in threads:
            t.join(IDLE_S * 4)
        if errors:
            raise errors[0]
        if any(t.is_alive() for t in threads):
            raise TimeoutError(f"a flow got no ack within {IDLE_S * 4:g} s")
        out.append([d - t0 for d in done])
    for c in conns:
        c.close()
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


# how an RTT can be read (live.wan.measure.measure_rtt): an ICMP echo the kernel answers (`icmp`), or a UDP
# datagram this module's echo server sends back (`echo` + `ping`)
RTT_METHODS = ("icmp", "udp")

# Linux's SO_TIMESTAMPNS (Python's socket module does not name it): each received datagram carries
# the kernel's receive time, so the reply's wait in the socket for this process to run is not counted
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_ICMP_HEADER = struct.Struct("!BBHHH")  # type, code, checksum, identifier, sequence
ICMP_ECHO_REQUEST, ICMP_ECHO_REPLY = 8, 0


def icmp_checksum(data: bytes) -> int:
    """RFC 1071: the one's complement of the one's complement sum of the 16-bit words."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def icmp_echo_request(ident: int, seq: int, payload: bytes) -> bytes:
    header = _ICMP_HEADER.pack(ICMP_ECHO_REQUEST, 0, 0, ident, seq)
    return _ICMP_HEADER.pack(ICMP_ECHO_REQUEST, 0, icmp_checksum(header + payload), ident, seq) + payload


def icmp(addr: str, count: int, interval_s: float, timeout_s: float) -> None:
    """Round trips of ICMP echo requests, answered by the destination's kernel: no process at the far end
    has to be scheduled (a UDP echo server's wake-up added 0.1-0.2 ms on a busy 2-core machine, more than a
    0.1 ms emulated RTT), and the reply is timed by the kernel's receive timestamp. What a TCP segment and
    its ACK see on the path. Needs a raw socket (root, as inside a slice's namespaces)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    ident, pad = os.getpid() & 0xFFFF, b"\0" * 48

    def one(seq: int) -> float | None:
        request = icmp_echo_request(ident, seq, pad)
        start = time.monotonic()
        t0 = time.clock_gettime_ns(time.CLOCK_REALTIME)  # the clock SO_TIMESTAMPNS stamps with
        s.sendto(request, (addr, 0))
        while True:
            s.settimeout(max(1e-3, start + timeout_s - time.monotonic()))
            try:
                data, ancillary, _, _ = s.recvmsg(2048, 1024)
            except TimeoutError:
                return None
            ihl = (data[0] & 0x0F) * 4  # a raw ICMP socket receives the IP header too
            kind, _, _, rid, rseq = _ICMP_HEADER.unpack_from(data, ihl)
            if kind != ICMP_ECHO_REPLY or rid != ident or rseq != seq:
                continue  # another process's echo, or a late one counted lost
            stamp = next((struct.unpack("qq", d[:16]) for level, kind_, d in ancillary
                          if level == socket.SOL_SOCKET and kind_ == SO_TIMESTAMPNS), None)
            t1 = stamp[0] * 10**9 + stamp[1] if stamp else time.clock_gettime_ns(time.CLOCK_REALTIME)
            return (t1 - t0) / 1e6

    _pings(count, interval_s, one)


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
    elif role == "icmp":
        icmp(args[0], int(args[1]), float(args[2]), float(args[3]))
    elif role == "sink":
        sink(args[0])
    elif role == "source":
        source(args[0], int(args[1]), float(args[2]))
    elif role == "msgsink":
        msgsink(args[0])
    elif role == "burstsink":
        burstsink(args[0], int(args[1]))
    elif role == "burst":
        burst(args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4]), float(args[5]))
    elif role == "messages":
        messages(args[0], int(args[1]), [int(x) for x in args[2].split(",")], int(args[3]), float(args[4]))
    else:
        print(f"unknown probe {role!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
