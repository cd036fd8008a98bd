"""The forwarder: the one process that owns a slice, from setup to teardown.

Run as `python -m geosim.live.wan.forwarder CONFIG_JSON READY_FD CTL_FD` by `emulator.up()`. It opens
one TAP per host, builds the namespaces around them, writes the state file, reports
"ok" (or the error) on READY_FD, then switches frames between the TAPs: each frame is
held for the one-way delay of its (source, destination) pair, optionally with jitter
and loss. It exits after the TTL or on SIGTERM/SIGINT/SIGHUP, and always tears down
everything it made on the way out.

Why a FIFO per directed pair and not a heap: the delay of a pair is constant (jitter is
clamped so a pair never reorders), so arrival order is delivery order; a deque is
cheaper than a heap at ~100k frames/s in Python.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import select
import signal
import stat
import sys
import time
from collections import deque

from geosim.live.wan import netns
from geosim.base.errors import GeosimError
from geosim.base.fileio import write_atomic
from geosim.base.input_limits import loads_json


# Frames due within BATCH_S of now go out together: one wake-up per batch instead of per
# frame at high packet rates. Timers fire ~0.1-0.2 ms late on a VM anyway; that constant
# lateness (and the stacks' own latency) is what emulator.up() calibrates away.
BATCH_S = 0.00005


class _Stop(Exception):
    pass


def _stop(signum, frame):
    raise _Stop()


def forward(fds: list[int], delay_s: list[list[float]], *, jitter_s: float, loss: float,
            deadline: float, mtu: int, seed: int | None = None, stats: dict | None = None,
            ctl_fd: int | None = None, offload: bool = False) -> None:
    """Switch frames between TAP fds until `deadline` (time.monotonic()).

    ctl_fd: a pipe from `up()` carrying "trim_us X" lines: take X microseconds off every
    one-way delay (the measured overhead of the path itself, see emulator.calibrate).
    """
    n = len(fds)
    base = [row[:] for row in delay_s]
    watch = fds + ([ctl_fd] if ctl_fd is not None else [])
    rng = random.Random(seed)
    rnd = rng.random
    port_of = {fd: i for i, fd in enumerate(fds)}
    mac_port = {bytes.fromhex(netns.mac(i).replace(":", "")): i for i in range(n)}
    flood = [tuple(j for j in range(n) if j != i) for i in range(n)]
    queues = [[deque() for _ in range(n)] for _ in range(n)]
    last = [[0.0] * n for _ in range(n)]
    out = [(queues[i][j], fds[j]) for i in range(n) for j in range(n) if i != j]
    # A frame is at most the MTU plus the Ethernet (+VLAN) header, or with offload a
    # 64 KB super-frame after its virtio-net header (whose length hdr skips to the MACs).
    hdr = netns.VNET_HDR_LEN if offload else 0
    readsize = 65536 + 64 + hdr if offload else mtu + 64
    monotonic, sel, read, write = time.monotonic, select.select, os.read, os.write
    forwarded = dropped = 0
    try:
        while True:
            now = monotonic()
            if now >= deadline:
                return
            wake = deadline
            due = now + BATCH_S
            for q, ofd in out:  # deliver everything due, find the next due time
                while q:
                    t, fr = q[0]
                    if t > due:
                        if t < wake:
                            wake = t
                        break
                    q.popleft()
                    try:
                        write(ofd, fr)
                        forwarded += 1
                    except OSError:  # namespace going away, or its backlog is full: a lost frame
                        dropped += 1
            # select(), not epoll: its timeout has microsecond resolution; epoll rounds up
            # to whole milliseconds, which would add up to 2 ms to every RTT.
            left = wake - monotonic()
            ready, _, _ = sel(watch, (), (), left if left > 0.0 else 0.0)
            if not ready:
                continue
            now = monotonic()
            for fd in ready:
                if fd == ctl_fd:
                    _control(ctl_fd, watch, base, delay_s)
                    continue
                src = port_of[fd]
                row, lrow, d = queues[src], last[src], delay_s[src]
                for _ in range(256):  # bounded batch so one busy host cannot starve delivery
                    try:
                        fr = read(fd, readsize)
                    except BlockingIOError:
                        break
                    dst = mac_port.get(fr[hdr:hdr + 6])
                    targets = flood[src] if dst is None else ((dst,) if dst != src else ())
                    for j in targets:
                        if loss and rnd() < loss:
                            dropped += 1
                            continue
                        t = now + d[j]
                        if jitter_s:
                            t += (2.0 * rnd() - 1.0) * jitter_s
                            if t < lrow[j]:
                                t = lrow[j]  # never overtake the previous frame of this pair
                            lrow[j] = t
                        row[j].append((t, fr))
    finally:
        if stats is not None:
            stats.update(forwarded=forwarded, dropped=dropped)


def _control(ctl_fd: int, watch: list[int], base: list[list[float]], delay_s: list[list[float]]) -> None:
    data = os.read(ctl_fd, 4096)
    if not data:  # `up()` is done with us
        watch.remove(ctl_fd)
        os.close(ctl_fd)
        return
    for line in data.decode().splitlines():
        key, _, value = line.partition(" ")
        if key == "trim_us":
            trim = float(value) / 1e6
            for i, row in enumerate(base):  # in place: the loop holds references to the rows
                for j, d in enumerate(row):
                    delay_s[i][j] = max(0.0, d - trim) if i != j else 0.0
            print(f"one-way delays trimmed by {float(value):.0f} us", flush=True)


def _tune_process(realtime: bool) -> None:
    # Wake up on time even when training processes load both cores. Under load, a normal
    # (even nice -10) task waits up to a scheduler slice (~3-4 ms here) after its timer
    # fires; SCHED_FIFO preempts at once, as the kernel's own network path would. The
    # forwarder sleeps between frames and uses CPU only in proportion to traffic, and the
    # kernel's RT throttling (95% of a core at most) bounds it if it ever spins.
    try:
        if realtime:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        else:
            os.nice(-10)
    except (OSError, AttributeError):
        try:
            os.nice(-10)
        except OSError:
            pass
    try:  # PR_SET_TIMERSLACK = 29: 1 us instead of the default 50 us on select() timeouts
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def write_state(path: str, state: dict) -> None:
    """Atomically (geosim.base.fileio: a unique temporary file beside it, renamed over it): readers
    never see half a file, and no fixed temporary name can be linked elsewhere."""

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_atomic(path, json.dumps(state, indent=2), mode=0o644)  # writable by its owner alone: read_state checks


def remove_state(path: str, slice_id: str) -> None:
    try:
        with open(path, opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return  # another user's file: never this user's to remove
            if loads_json(f.read(1 << 20), path).get("id") != slice_id:
                return  # another slice's state: not ours to remove
        os.unlink(path)
    except (OSError, ValueError, AttributeError, GeosimError):  # not a state of ours: left alone
        pass


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[1])
    ready_fd, ctl_fd = int(argv[2]), int(argv[3])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _stop)
    sid, n = cfg["id"], cfg["hosts"]
    fds: list[int] = []
    stats: dict = {}
    ready = False
    reason = "stopped"
    try:
        for i in range(n):
            fds.append(netns.open_tap(netns.tap_name(sid, i), offload=cfg["offload"]))
        for i in range(n):
            netns.configure_host(sid, i, n, mtu=cfg["mtu"], bandwidth_mbit=cfg["bandwidth_mbit"],
                                 rmem_max=cfg["rmem_max"], offload=cfg["offload"],
                                 window_bytes=cfg.get("window_bytes"))
        state = dict(cfg["state"], forwarder_pid=os.getpid())
        write_state(cfg["state_path"], state)
        _tune_process(cfg.get("realtime", True))
        os.write(ready_fd, b"ok\n")
        os.close(ready_fd)
        ready = True
        print(f"slice {sid} up: {n} hosts, expires in {cfg['ttl_s']} s", flush=True)
        delay_s = [[ms / 2000.0 for ms in row] for row in cfg["rtt_ms"]]
        forward(fds, delay_s, jitter_s=cfg["jitter_ms"] / 1000.0, loss=cfg["loss"],
                deadline=time.monotonic() + cfg["ttl_s"], mtu=cfg["mtu"], seed=cfg.get("seed"), stats=stats,
                ctl_fd=ctl_fd, offload=cfg["offload"])
        reason = "ttl expired"
    except _Stop:
        pass
    except Exception as exc:  # reported to `up` if it is still waiting, else to the log
        reason = f"error: {exc}"
        if not ready:
            try:
                os.write(ready_fd, f"error: {exc}\n".encode())
            except OSError:
                pass
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second `down` must not interrupt the teardown
        for fd in fds:
            os.close(fd)  # non-persistent TAPs vanish with their last fd
        netns.teardown(sid)
        remove_state(cfg["state_path"], sid)
        print(f"slice {sid} down ({reason}); frames forwarded {stats.get('forwarded', 0)}, "
              f"dropped {stats.get('dropped', 0)}", flush=True)
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
