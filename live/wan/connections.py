"""The TCP window a run's own connections were given, read with `ss` in the slice's namespaces.

Under a socket-buffer cap (`geosim live wan up --tcp-window-kib`) the window a flow gets is not a
property of the link alone. Linux advertises min(rcv_ssthresh, free buffer space), and clamps
rcv_ssthresh when unread data fills the receive buffer (tcp_clamp_window, tcp_prune_queue): a
collective's data that arrives before the peer posted its receive does that. Measured on this
machine's slices with a 128 KiB cap: a bulk transfer was given ~97 KiB at 25 ms, and Pipeshard's
gloo connection 61.5 KiB at 25 ms but 98.75 KiB at 70 ms (tcpdump: `win 492` against `win 790`, at
wscale 7). The same bytes then take 1.6x the round trips at 25 ms, which is why Pipeshard's step
grew less than linearly with the RTT. So a run records the window its own connection had, the way
it records the RTT its slice measured, and the simulator limits its flows to that.

`ss -tin` prints, per established socket, the peer's advertised window (`snd_wnd`, bytes), the
segments in flight (`unacked`) and the bytes written but not yet sent (`notsent`): in flight while
something waits is what the sender itself allows (its buffer, its congestion control), which can be
less than the peer advertises (summary()). Sampling costs one short `ip netns exec ss` a host per
interval (~3 ms of CPU).
"""

from __future__ import annotations

import re
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field

_ADDRESSES = re.compile(r"(\S+):(\d+)\s+(\S+):(\d+)\s*$")
_FIELD = re.compile(r"\b(snd_wnd|mss|bytes_acked|bytes_received|unacked|notsent):(\d+)")


MIN_BLOCKED = 3  # samples with data waiting before what was in flight counts as the cap


@dataclass
class Sample:
    t: float
    snd_wnd: int  # bytes the peer lets this socket have in flight
    bytes_moved: int  # bytes_acked + bytes_received: grows while the connection carries data
    in_flight: int = 0  # unacked segments x mss
    notsent: int = 0  # bytes the application wrote that TCP has not sent yet


@dataclass
class ConnectionSampler:
    """Samples every connection between two hosts of the slice, from inside each host, every
    interval_s, on a thread of its own (start(), stop(), then summary())."""

    wan: object
    interval_s: float = 0.2
    samples: dict = field(default_factory=dict)  # (host, local, peer) -> [Sample]
    errors: list = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="ss-sampler")
        self._addresses = {h.address for h in self.wan.hosts}

    def start(self) -> "ConnectionSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for i in range(len(self.wan.hosts)):
                self.sample(i)
            self._stop.wait(self.interval_s)

    def sample(self, i: int) -> None:
        try:
            out = subprocess.run(self.wan.exec_argv(i, ["ss", "-tinH", "state", "established"]),
                                 capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.errors.append(str(exc))
            return
        if out.returncode != 0:
            self.errors.append(out.stderr.strip()[-200:])
            return
        now = time.monotonic()
        for key, info in parse_ss(out.stdout):
            local, peer = key
            here, there = local.rsplit(":", 1)[0], peer.rsplit(":", 1)[0]
            if here in self._addresses and there in self._addresses and here != there and "snd_wnd" in info:
                self.samples.setdefault((i, local, peer), []).append(
                    Sample(now, info["snd_wnd"], info.get("bytes_acked", 0) + info.get("bytes_received", 0),
                           info.get("unacked", 0) * info.get("mss", 0), info.get("notsent", 0)))

    def summary(self) -> dict | None:
        """The window of the connections that carried the run, from the later half of each one's
        samples (the window settles after the first collectives): the peer's advertised window,
        time-mean over the samples where data moved, and what TCP kept in flight at the samples
        where it had more to send (notsent > 0), their median. The window is the smaller: Data's
        6.6 MB all-reduce at 70 ms kept ~80 KB in flight under a 98.75 KiB advertised window (its
        send buffer, which counts each packet's kernel overhead, full; BBR pacing it). Samples are
        evenly spaced in time and a window-bound flow moves W a round trip, so the time-mean
        advertised window is the one that moves the run's bytes in its time (a median would not
        be, when the kernel clamps the window for part of a run). None without a sample where data
        moved."""
        busiest = max((s[-1].bytes_moved for s in self.samples.values()), default=0)
        windows, blocked, used = [], [], 0
        for series in self.samples.values():
            if series[-1].bytes_moved < 0.1 * busiest:  # a coordinator's or a probe's socket
                continue
            later = list(zip(series, series[1:]))
            later = later[len(later) // 2:] if len(later) > 1 else later
            busy = [b for a, b in later if b.bytes_moved > a.bytes_moved]
            windows += [s.snd_wnd for s in busy]
            blocked += [s.in_flight for _, s in later if s.notsent > 0 and s.in_flight > 0]
            used += 1 if busy else 0
        if not windows:
            return None
        advertised = statistics.fmean(windows)
        in_flight = statistics.median(blocked) if len(blocked) >= MIN_BLOCKED else None
        return {"window_bytes": min(advertised, in_flight) if in_flight else advertised,
                "advertised_bytes": advertised, "in_flight_bytes": in_flight,
                "samples": len(windows), "blocked_samples": len(blocked), "connections": used}


def parse_ss(text: str) -> list[tuple[tuple[str, str], dict]]:
    """`ss -tinH` output -> [((local, peer), {field: int})]: each socket is a line of addresses
    followed by an indented line of its TCP info."""
    out, key = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0].isspace() and key is not None:
            out.append((key, {k: int(v) for k, v in _FIELD.findall(line)}))
            key = None
            continue
        m = _ADDRESSES.search(line)
        key = (f"{m.group(1)}:{m.group(2)}", f"{m.group(3)}:{m.group(4)}") if m else None
    return out
