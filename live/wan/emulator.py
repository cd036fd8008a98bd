"""The Python API of the WAN emulator: bring a slice up, find it, tear it down.

    from geosim.live.wan.emulator import up, down, current
    with up(rtt_ms=40, bandwidth_mbit=1000, hosts=2, ttl_s=600) as wan:
        for ns, addr, ifname, host in wan.hosts: ...
        subprocess.run(wan.exec_argv(0, ["python", "train.py"]))

`up` starts a detached forwarder process (live.wan.forwarder) that owns the slice for
its whole life: it builds it, forwards frames, and tears it down after the TTL or when
`down` signals it. The state file (GEOSIM_WAN_STATE, default /run/geosim-wan/state.json)
lets other processes find the slice.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from geosim.errors import GeosimError
from geosim.live.wan import netns
from geosim.live.wan.forwarder import remove_state

DEFAULT_STATE = "/run/geosim-wan/state.json"
SOURCE = "geosim live wan up"
_children: dict[str, subprocess.Popen] = {}  # forwarders started by this process, reaped by down()


def state_path(path: str | None = None) -> str:
    return path or os.environ.get("GEOSIM_WAN_STATE") or DEFAULT_STATE


class Host(NamedTuple):
    namespace: str
    address: str
    interface: str
    hostname: str


@dataclass
class WanSlice:
    id: str
    hosts: list[Host]
    rtt_ms: list[list[float]]  # round trip between host i and j (a matrix; diagonal 0)
    bandwidth_mbit: float | None  # egress cap of every host; None = as fast as the forwarder goes
    jitter_ms: float
    loss: float
    mtu: int
    ttl_s: float
    started_at: float  # wall clock (time.time())
    expires_at: float
    state_path: str
    log_path: str
    forwarder_pid: int = 0
    extra: dict = field(default_factory=dict)

    def exec_argv(self, i: int, argv: list[str]) -> list[str]:
        """argv run inside host i's namespace (with its /etc/netns hosts file)."""
        return ["ip", "netns", "exec", self.hosts[i].namespace, *argv]

    def alive(self) -> bool:
        return forwarder_alive(self.forwarder_pid, self.id)

    def down(self, timeout_s: float = 15.0) -> None:
        _down(self.id, self.forwarder_pid, self.state_path, timeout_s)

    def __enter__(self) -> WanSlice:
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["hosts"] = [h._asdict() for h in self.hosts]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> WanSlice:
        d = dict(d)
        d["hosts"] = [Host(**h) for h in d["hosts"]]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


def forwarder_alive(pid: int, slice_id: str) -> bool:
    """The pid is running and is the forwarder of this slice (guards against pid reuse)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return False
    return b"live.wan.forwarder" in cmd and f'"id": "{slice_id}"'.encode() in cmd


def read_state(path: str | None = None) -> WanSlice | None:
    try:
        with open(state_path(path)) as f:
            return WanSlice.from_dict(json.load(f))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError) as exc:
        raise GeosimError(f"unreadable state file: {exc}", source=state_path(path)) from exc


def current(path: str | None = None) -> WanSlice | None:
    """The slice recorded in the state file if its forwarder is running, else None."""
    s = read_state(path)
    return s if s is not None and s.alive() else None


def _number(value, key: str, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise GeosimError(f"must be a number, got {value!r}", source=SOURCE, key=key) from None
    below = x <= lo if lo_open else x < lo
    above = x >= hi if hi_open else x > hi
    if not math.isfinite(x) or below or above:
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise GeosimError(f"must be in {rng}, got {value!r}", source=SOURCE, key=key)
    return x


def _rtt_matrix(rtt_ms, hosts: int) -> list[list[float]]:
    if isinstance(rtt_ms, (int, float, str)):
        r = _number(rtt_ms, "--rtt-ms", 0, 60_000)
        return [[0.0 if i == j else r for j in range(hosts)] for i in range(hosts)]
    rows = [list(row) for row in rtt_ms]
    if len(rows) != hosts or any(len(row) != hosts for row in rows):
        raise GeosimError(f"the RTT matrix must be {hosts}x{hosts} (one row per host)", source=SOURCE, key="--rtt-matrix")
    return [[0.0 if i == j else _number(v, "--rtt-matrix", 0, 60_000) for j, v in enumerate(row)]
            for i, row in enumerate(rows)]


def up(rtt_ms: float | list[list[float]] = 40.0, *, bandwidth_mbit: float | None = None, hosts: int = 2,
       jitter_ms: float = 0.0, loss: float = 0.0, ttl_s: float = 3600.0, mtu: int = 1500,
       state: str | None = None, seed: int | None = None, timeout_s: float = 60.0,
       calibrate: bool = True, offload: bool | None = None, realtime: bool = True,
       tcp_window_kib: float | None = None) -> WanSlice:
    """Bring a slice up and return once every host is reachable; usable as a context manager.

    rtt_ms: one RTT for every pair, or an N x N matrix (row i, column j = RTT i<->j via i->j
    one-way delay of half of it). Raises GeosimError on bad values, missing privileges or
    tools, or when a slice is already up for this state file; never leaves half a slice.
    calibrate: measure the path's own RTT overhead (kernel stacks, wake-ups: ~0.2-0.4 ms
    here) and take it off the emulated delay, so applications see the requested RTT.
    offload: TCP segmentation offload on the TAPs (see netns.open_tap); default on unless
    loss > 0, because the forwarder would drop a whole super-frame as one frame.
    realtime: run the forwarder SCHED_FIFO so busy training processes do not delay frames.
    tcp_window_kib: cap every TCP socket's buffers in the namespaces (net.ipv4.tcp_rmem and
    tcp_wmem max, per namespace) at this many KiB, so a flow moves at most about a window
    per round trip, as between hosts with stock buffers on a long path. None: buffers sized
    for the bandwidth-delay product (4 x BDP, 6-64 MB).
    """
    if isinstance(hosts, bool) or int(_number(hosts, "--num-hosts", 2, netns.MAX_HOSTS)) != float(hosts):
        raise GeosimError(f"must be a whole number of hosts, got {hosts!r}", source=SOURCE, key="--num-hosts")
    hosts = int(hosts)
    matrix = _rtt_matrix(rtt_ms, hosts)
    if bandwidth_mbit is not None:
        bandwidth_mbit = _number(bandwidth_mbit, "--bandwidth-mbit", 0, 1e6, lo_open=True)
    jitter_ms = _number(jitter_ms, "--jitter-ms", 0, 60_000)
    min_one_way = min(matrix[i][j] for i in range(hosts) for j in range(hosts) if i != j) / 2
    if jitter_ms > min_one_way:
        raise GeosimError(f"must not exceed the smallest one-way delay ({min_one_way:g} ms)", source=SOURCE, key="--jitter-ms")
    loss = _number(loss, "--loss", 0, 1, hi_open=True)
    ttl_s = _number(ttl_s, "--ttl-s", 0, 7 * 86400, lo_open=True)
    mtu = int(_number(mtu, "--mtu", 576, 9000))
    window_bytes = None
    if tcp_window_kib is not None:
        window_bytes = int(_number(tcp_window_kib, "--tcp-window-kib", 8, 1 << 20) * 1024)
    if offload is None:
        offload = loss == 0
    elif offload and loss:
        raise GeosimError("offload drops whole 64 KB super-frames: use it without --loss", source=SOURCE, key="--loss")
    netns.check_host()
    if bandwidth_mbit is not None and not _which("tc"):
        raise GeosimError("--bandwidth-mbit needs the 'tc' command (iproute2)", source=SOURCE)

    path = state_path(state)
    old = read_state(path)
    if old is not None:
        if old.alive():
            raise GeosimError(f"a WAN slice is already up (id {old.id}, {len(old.hosts)} hosts, state {path}); "
                              "run `geosim live wan down` first", source=SOURCE)
        netns.teardown(old.id)  # its forwarder died without cleaning up: finish the job
        remove_state(path, old.id)

    sid = secrets.token_hex(3)
    now = time.time()
    log_path = path + ".log"
    wan = WanSlice(
        id=sid, hosts=[Host(netns.ns_name(sid, i), netns.address(i), netns.IFNAME, netns.hostname(i)) for i in range(hosts)],
        rtt_ms=matrix, bandwidth_mbit=bandwidth_mbit, jitter_ms=jitter_ms, loss=loss, mtu=mtu, ttl_s=ttl_s,
        started_at=now, expires_at=now + ttl_s, state_path=path, log_path=log_path,
        extra={"subnet": f"{netns.SUBNET}.0/24", "macs": [netns.mac(i) for i in range(hosts)], "offload": offload,
               "tcp_window_kib": None if window_bytes is None else window_bytes / 1024})
    # Socket buffers for a bandwidth-delay product: 4 x BDP of the slowest pair, 6-64 MB.
    bdp = (bandwidth_mbit or 2000) * 1e6 / 8 * max(max(r) for r in matrix) / 1000
    cfg = {"id": sid, "hosts": hosts, "rtt_ms": matrix, "jitter_ms": jitter_ms, "loss": loss,
           "bandwidth_mbit": bandwidth_mbit, "mtu": mtu, "ttl_s": ttl_s, "seed": seed,
           "offload": offload, "realtime": realtime, "window_bytes": window_bytes,
           "rmem_max": int(min(64 << 20, max(6 << 20, 4 * bdp))), "state_path": path, "state": wan.to_dict()}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    proc = _spawn_forwarder(cfg, log_path)
    _children[sid] = proc
    line = _wait_ready(proc, timeout_s)
    if line != "ok":
        os.close(proc._ctl_fd)  # type: ignore[attr-defined]
        _down(sid, proc.pid, path, timeout_s=10)
        detail = line or f"the forwarder exited ({proc.poll()}); see {log_path}"
        raise GeosimError(detail.removeprefix("error: "), source=SOURCE)
    wan.forwarder_pid = proc.pid
    try:
        if calibrate:
            wan.extra["calibration"] = _calibrate(wan, proc._ctl_fd)  # type: ignore[attr-defined]
            _save_state(wan)
    except BaseException:
        _down(sid, proc.pid, path, timeout_s=10)
        raise
    finally:
        os.close(proc._ctl_fd)  # type: ignore[attr-defined]
    return wan


def _calibrate(wan: WanSlice, ctl_fd: int) -> dict:
    """Measure host0<->host1 RTT, tell the forwarder to trim the excess (capped) off
    every one-way delay. The overhead is the machine's, so one pair stands for all."""
    from geosim.live.wan.measure import measure_rtt

    requested = wan.rtt_ms[0][1]
    if requested <= 0:
        return {"trim_us": 0.0}
    # The minimum, not the median: the path's own overhead is its best case; anything above
    # it is other processes competing for the CPU, which must not be trimmed off for good.
    before = measure_rtt(wan, count=16, interval_s=0.005)["min_ms"]
    min_one_way_us = min(r for i, row in enumerate(wan.rtt_ms) for j, r in enumerate(row) if i != j) * 500
    trim_us = max(0.0, min((before - requested) * 500, 1000.0, 0.25 * min_one_way_us))
    os.write(ctl_fd, f"trim_us {trim_us:.1f}\n".encode())
    return {"rtt_before_ms": round(before, 4), "trim_us": round(trim_us, 1)}


def _save_state(wan: WanSlice) -> None:
    from geosim.live.wan.forwarder import write_state

    write_state(wan.state_path, wan.to_dict())


def _which(cmd: str) -> bool:
    import shutil

    return shutil.which(cmd) is not None


def _spawn_forwarder(cfg: dict, log_path: str) -> subprocess.Popen:
    r, w = os.pipe()
    cr, cw = os.pipe()  # control: up() -> forwarder (calibration), closed when up() returns
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    with open(log_path, "wb") as log:
        # Its own session: the slice outlives the `geosim live wan up` that started it,
        # and a Ctrl-C in that terminal does not reach it.
        proc = subprocess.Popen([sys.executable, "-m", "live.wan.forwarder", json.dumps(cfg), str(w), str(cr)],
                                pass_fds=(w, cr), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd="/", env=env, start_new_session=True)
    os.close(w)
    os.close(cr)
    proc._ctl_fd = cw  # type: ignore[attr-defined]
    proc._ready_fd = r  # type: ignore[attr-defined]
    return proc


def _wait_ready(proc: subprocess.Popen, timeout_s: float) -> str:
    r = proc._ready_fd  # type: ignore[attr-defined]
    buf = b""
    deadline = time.monotonic() + timeout_s
    try:
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                return "error: the forwarder did not come up within %g s" % timeout_s
            chunk = os.read(r, 4096)
            if not chunk:
                break
            buf += chunk
    finally:
        os.close(r)
    return buf.decode(errors="replace").strip()


def _down(sid: str, pid: int, path: str, timeout_s: float = 15.0) -> None:
    proc = _children.pop(sid, None)
    if forwarder_alive(pid, sid):
        os.kill(pid, signal.SIGTERM)  # the forwarder tears its slice down itself
        deadline = time.monotonic() + timeout_s
        while forwarder_alive(pid, sid) and time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.05)
        if forwarder_alive(pid, sid):
            os.kill(pid, signal.SIGKILL)
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    netns.teardown(sid)  # idempotent; covers a forwarder that was killed or crashed
    remove_state(path, sid)


def down(state: str | None = None, *, everything: bool = False, timeout_s: float = 15.0) -> list[str]:
    """Tear down the slice of this state file (everything=True: every geosim WAN slice).

    Idempotent: returns the ids torn down, [] when nothing was up.
    """
    netns.check_host()
    path = state_path(state)
    done = []
    s = read_state(path)
    if s is not None:
        _down(s.id, s.forwarder_pid, path, timeout_s)
        done.append(s.id)
    if everything:
        for pid, sid in _all_forwarders():
            _down(sid, pid, path, timeout_s)
            done.append(sid)
        leftovers = netns.teardown(None)
        done += sorted({x.removeprefix(netns.PREFIX).split("-")[0] for x in leftovers if x.startswith(netns.PREFIX)})
    return sorted(set(done))


def _all_forwarders() -> list[tuple[int, str]]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"live.wan.forwarder" in argv and len(argv) > 3:
            try:
                found.append((int(entry), json.loads(argv[argv.index(b"live.wan.forwarder") + 1])["id"]))
            except (ValueError, KeyError, IndexError):
                pass
    return found
