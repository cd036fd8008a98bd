"""The Python API of the WAN emulator: bring a slice up, find it, tear it down.

    from geosim.live.wan.emulator import up, down, current
    with up(rtt_ms=40, bandwidth_mbit=1000, hosts=2, ttl_s=600) as wan:
        for ns, addr, ifname, host in wan.hosts: ...
        subprocess.run(wan.exec_argv(0, ["python", "train.py"]))

`up` starts a detached forwarder process (live/wan/forwarder.py) that owns the slice for
its whole life: it builds it, forwards frames, and tears it down after the TTL or when
`down` signals it. The state file (GEOSIM_WAN_STATE, default /run/geosim-wan/state.json)
lets other processes find the slice.

When the forwarder dies without its teardown (SIGKILL, OOM killer), what it made stays:
namespaces, /etc/netns entries, TAPs, processes inside, the state file. `leftovers()`
finds them from their names alone, `status` lists them and `down` removes them.

Over 400 lines: bring-up, discovery and teardown share the state file's checks and its ownership
rules (issue 44); split, those rules would be read in three places.
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
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from geosim.base.errors import GeosimError
from geosim.base.input_limits import loads_json
from geosim.live.wan import netns
from geosim.live.wan.forwarder import remove_state

DEFAULT_STATE = "/run/geosim-wan/state.json"
MIN_MBIT, MAX_MBIT = 0.1, 100_000.0
SOURCE = "geosim live wan up"
STATE_MAX_BYTES = 1 << 20  # a state file is a few KB; anything larger is not one
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
        _down(self.id, self.forwarder_pid, self.state_path, timeout_s, self.log_path)

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
        if not netns.valid_id(d.get("id")):  # every action on a slice goes by its id: never an empty or odd one
            raise ValueError(f"its id {str(d.get('id'))[:40]!r} is not of the form `up` writes (6 hex digits)")
        pid = d.get("forwarder_pid", 0)
        if isinstance(pid, bool) or not isinstance(pid, int) or not 0 <= pid < 1 << 22:
            raise ValueError(f"its forwarder_pid {str(pid)[:40]!r} is not a process id")
        d["hosts"] = [Host(**h) for h in d["hosts"]]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


FORWARDER_MODULE = "geosim.live.wan.forwarder"
_FORWARDER_NAMES = (FORWARDER_MODULE.encode(), b"live.wan.forwarder")


def forwarder_alive(pid: int, slice_id: str) -> bool:
    """The pid is running and is the forwarder of this slice (guards against pid reuse)."""
    if not pid:
        return False
    return any(p == pid for p, sid, _ in _all_forwarders([pid]) if sid == slice_id)


class BrokenState(GeosimError):
    """The state file exists but cannot be read as a slice (`geosim live wan down` removes it)."""


def read_state(path: str | None = None) -> WanSlice | None:
    """The slice of the state file; None without one; BrokenState if it cannot be read."""
    path = state_path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO named as the state: no wait for a writer
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BrokenState(f"cannot open it ({exc.strerror}); left as it is", source=path) from None
    with os.fdopen(fd, "rb") as f:
        not_ours = _not_ours(os.fstat(f.fileno()))
        if not_ours:  # root acts on what root's `up` wrote alone: another user's file names no slice of its
            raise BrokenState(f"{not_ours}: not a state file this user's `geosim live wan up` wrote, so "
                              "`geosim live wan down` leaves it as it is", source=path)
        data = f.read(STATE_MAX_BYTES + 1)
    try:
        return WanSlice.from_dict(loads_json(data.decode("utf-8"), path, STATE_MAX_BYTES))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, GeosimError) as exc:
        why = exc.problem if isinstance(exc, GeosimError) else f"{type(exc).__name__}: {exc}"
        # what `down` will do with it, said the same way here (status reports it, down acts on it)
        then = ("`geosim live wan down` removes it and whatever it left" if looks_like_state(path) else
                "not a WAN state file geosim wrote, so `geosim live wan down` leaves it as it is")
        raise BrokenState(f"unreadable state file ({why}); {then}", source=path) from None


def _not_ours(st: os.stat_result) -> str | None:
    """Why a state file (its stat) is not one this user's `up` made, None when it may be."""
    import stat

    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by uid {os.geteuid()} who runs this"
    if st.st_mode & 0o022:
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def current(path: str | None = None) -> WanSlice | None:
    """The slice recorded in the state file if its forwarder is running, else None
    (BrokenState if the file cannot be read)."""
    s = read_state(path)
    return s if s is not None and s.alive() else None


def leftovers(path: str | None = None) -> dict:
    """Everything of a geosim WAN slice on this machine that no running forwarder owns, and
    the state file's condition: {"namespaces", "etc_netns", "taps", "processes" (pid, namespace),
    "forwarders" (pid, id, state path: running ones not recorded in this state file),
    "state_file" (None, or {"path", "id", "problem"})}. Empty lists: nothing left over."""
    path = state_path(path)
    running = _all_forwarders()
    live_ids = {sid for _, sid, _ in running}
    found = {"namespaces": [], "etc_netns": [], "taps": [], "processes": [], "forwarders": [], "state_file": None}
    for ns in netns.namespaces():
        sid = netns.id_of(ns)
        if sid in live_ids:
            continue
        if os.path.exists(os.path.join(netns.NETNS_RUN, ns)):
            found["namespaces"].append(ns)
            found["processes"] += [(pid, ns) for pid in netns.pids_in(ns)]
        if os.path.isdir(os.path.join(netns.NETNS_ETC, ns)):
            found["etc_netns"].append(ns)
    found["taps"] = [t for t in netns.tap_links() if t[2:8] not in live_ids]
    try:
        recorded = read_state(path)
        problem = None
    except BrokenState as exc:
        recorded, problem = None, exc.problem
    if problem:
        found["state_file"] = {"path": path, "id": None, "problem": problem}
    elif recorded is not None and not recorded.alive():
        found["state_file"] = {"path": path, "id": recorded.id, "problem": "its forwarder is not running"}
    mine = recorded.id if recorded is not None else None
    found["forwarders"] = [(pid, sid, sp) for pid, sid, sp in running if sid != mine and sp == path]
    return found


def describe_leftovers(found: dict) -> list[str]:
    lines = []
    if found["state_file"]:
        sf = found["state_file"]
        lines.append(f"state file {sf['path']}" + (f" (slice {sf['id']})" if sf["id"] else "") + f": {sf['problem']}")
    for pid, sid, sp in found["forwarders"]:
        lines.append(f"forwarder process {pid} of slice {sid} is running but not in the state file")
    if found["namespaces"]:
        lines.append("namespaces: " + ", ".join(found["namespaces"]))
    extra_etc = [x for x in found["etc_netns"] if x not in found["namespaces"]]
    if found["etc_netns"]:
        lines.append(f"/etc/netns entries: {', '.join(found['etc_netns'])}" if extra_etc or not found["namespaces"]
                     else f"/etc/netns entries of those namespaces ({len(found['etc_netns'])})")
    if found["taps"]:
        lines.append("TAP devices: " + ", ".join(found["taps"]))
    for pid, ns in found["processes"]:
        lines.append(f"process {pid} ({_comm(pid)}) still running in {ns}")
    return lines


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


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
    matrix = [[0.0 if i == j else _number(v, "--rtt-matrix", 0, 60_000) for j, v in enumerate(row)]
              for i, row in enumerate(rows)]
    for i in range(hosts):
        for j in range(i + 1, hosts):
            if not math.isclose(matrix[i][j], matrix[j][i], rel_tol=1e-9, abs_tol=1e-9):
                # a round trip crosses both directions: i->j->i and j->i->j are the same trip
                raise GeosimError(f"must be symmetric: a round trip is the same both ways, but row {i} column {j} "
                                  f"is {matrix[i][j]:g} ms and row {j} column {i} is {matrix[j][i]:g} ms",
                                  source=SOURCE, key="--rtt-matrix")
    return matrix


def socket_buffer_bytes(bandwidth_mbit: float | None, rtt_matrix_ms: list[list[float]]) -> int:
    """The hosts' TCP buffer maximum: 4 x the bandwidth-delay product of the slowest pair, 6-64 MB."""
    bdp = (bandwidth_mbit or 2000) * 1e6 / 8 * max(max(r) for r in rtt_matrix_ms) / 1000
    return int(min(64 << 20, max(6 << 20, 4 * bdp)))


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
    if isinstance(hosts, bool) or int(_number(hosts, "--host-count", 2, netns.MAX_HOSTS)) != float(hosts):
        raise GeosimError(f"must be a whole number of hosts, got {hosts!r}", source=SOURCE, key="--host-count")
    hosts = int(hosts)
    matrix = _rtt_matrix(rtt_ms, hosts)
    if bandwidth_mbit is not None:  # tbf's range, and what a forwarder in Python could carry
        # named as the caller of this function passed it; the CLI checks --bandwidth-gbps first
        bandwidth_mbit = _number(bandwidth_mbit, "bandwidth_mbit", MIN_MBIT, MAX_MBIT)
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
        raise GeosimError("a bandwidth cap (--bandwidth-gbps) needs the 'tc' command (iproute2)", source=SOURCE)

    path = state_path(state)
    old = read_state(path)  # BrokenState: reported, `down` clears it
    if old is not None:
        if old.alive():
            raise GeosimError(f"a WAN slice is already up (id {old.id}, {len(old.hosts)} hosts, state {path}); "
                              "run `geosim live wan down` first", source=SOURCE)
        netns.teardown(old.id)  # its forwarder died without cleaning up: finish the job
        remove_state(path, old.id)

    sid = secrets.token_hex(3)
    now = time.time()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    # a log of its own (not a fixed name someone could have linked elsewhere); `down` removes it
    log_fd, log_path = tempfile.mkstemp(prefix=f"forwarder-{sid}-", suffix=".log", dir=os.path.dirname(path) or ".")
    wan = WanSlice(
        id=sid, hosts=[Host(netns.ns_name(sid, i), netns.address(i), netns.IFNAME, netns.hostname(i)) for i in range(hosts)],
        rtt_ms=matrix, bandwidth_mbit=bandwidth_mbit, jitter_ms=jitter_ms, loss=loss, mtu=mtu, ttl_s=ttl_s,
        started_at=now, expires_at=now + ttl_s, state_path=path, log_path=log_path,
        extra={"subnet": f"{netns.SUBNET}.0/24", "macs": [netns.mac(i) for i in range(hosts)], "offload": offload,
               "tcp_window_kib": None if window_bytes is None else window_bytes / 1024})
    cfg = {"id": sid, "hosts": hosts, "rtt_ms": matrix, "jitter_ms": jitter_ms, "loss": loss,
           "bandwidth_mbit": bandwidth_mbit, "mtu": mtu, "ttl_s": ttl_s, "seed": seed,
           "offload": offload, "realtime": realtime, "window_bytes": window_bytes,
           "rmem_max": socket_buffer_bytes(bandwidth_mbit, matrix), "state_path": path, "state": wan.to_dict()}
    proc = _spawn_forwarder(cfg, log_fd)
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


def _spawn_forwarder(cfg: dict, log_fd: int) -> subprocess.Popen:
    r, w = os.pipe()
    cr, cw = os.pipe()  # control: up() -> forwarder (calibration), closed when up() returns
    with os.fdopen(log_fd, "wb") as log:
        # Its own session: the slice outlives the `geosim live wan up` that started it,
        # and a Ctrl-C in that terminal does not reach it.
        proc = subprocess.Popen([sys.executable, "-m", FORWARDER_MODULE, json.dumps(cfg), str(w), str(cr)],
                                pass_fds=(w, cr), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd="/", env=netns.child_env(), start_new_session=True)
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


def _down(sid: str, pid: int, path: str, timeout_s: float = 15.0, log_path: str | None = None) -> None:
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
    if log_path and own_log(log_path, sid, path):
        try:
            os.unlink(log_path)
        except OSError:
            pass


def own_log(log_path: str, sid: str, state: str) -> bool:
    """Whether `log_path` is this slice's forwarder log as `up` made it: a regular file (not a link)
    of ours, named forwarder-<id>-*.log, directly in the state file's directory. A state file names
    its log; one that was edited or planted must not make `down` delete something else."""
    import stat

    name = os.path.basename(log_path)
    if not (name.startswith(f"forwarder-{sid}-") and name.endswith(".log")):
        return False
    here = os.path.realpath(os.path.dirname(os.path.abspath(state)))
    if os.path.realpath(os.path.dirname(os.path.abspath(log_path))) != here:
        return False
    try:
        st = os.lstat(log_path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


def looks_like_state(path: str) -> bool:
    """An unreadable state file that geosim wrote (cut short: it begins as every state file does,
    with the slice's id): a regular file of ours, small. Anything else named as the state file is
    reported and left alone, never deleted."""
    import re

    try:
        st = os.lstat(path)
        if _not_ours(st) or st.st_size > STATE_MAX_BYTES:
            return False
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return re.match(rb'\{\s*"id":\s*"[0-9a-f]{6}"', head) is not None


def down(state: str | None = None, *, everything: bool = False, timeout_s: float = 15.0) -> list[str]:
    """Tear down the slice of this state file and every leftover no running forwarder owns
    (namespaces, /etc/netns entries, TAPs, the processes inside them, a dead or unreadable
    state file); everything=True: also every other running geosim WAN slice.

    Idempotent: returns the ids torn down (and "state file" for an unreadable one), [] when
    nothing was there.
    """
    netns.check_host()
    path = state_path(state)
    done = []
    try:
        s = read_state(path)
    except BrokenState as exc:
        s = None
        if not looks_like_state(path):
            raise GeosimError("not a WAN state file geosim wrote; left as it is (check --state or GEOSIM_WAN_STATE)",
                              source=path) from exc
        os.unlink(path)
        done.append("state file")
    if s is not None:
        _down(s.id, s.forwarder_pid, path, timeout_s, s.log_path)
        done.append(s.id)
    for pid, sid, sp in _all_forwarders():
        if everything or (sp == path and sid not in done):  # a forwarder of this state file it no longer names
            _down(sid, pid, sp, timeout_s)
            done.append(sid)
    # what dead forwarders left: nothing running owns these names any more
    live_ids = {sid for _, sid, _ in _all_forwarders()}
    orphans = {netns.id_of(x) for x in netns.namespaces()}  # names of up's form alone: valid ids
    orphans |= {t[2:8] for t in netns.tap_links()}
    for sid in sorted(orphans - live_ids):
        netns.teardown(sid)
        done.append(sid)
    return sorted(set(done))


def _all_forwarders(pids: list[int] | None = None) -> list[tuple[int, str, str]]:
    """Running forwarders: (pid, slice id, state path), from their command lines. Only processes
    of this user whose command line names a valid id: another user's process dressed as a
    forwarder (any name, any id) is never signalled, and never makes a slice look alive."""
    found = []
    me = os.geteuid()
    for entry in pids if pids is not None else os.listdir("/proc"):
        entry = str(entry)
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != me:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read(1 << 20).split(b"\0")
        except OSError:
            continue
        # also "live.wan.forwarder": slices brought up by an older geosim are running slices too
        at = next((i for i, a in enumerate(argv) if a in _FORWARDER_NAMES), None)
        if at is not None and len(argv) > at + 1 and not _zombie(int(entry)):
            try:
                cfg = loads_json(argv[at + 1].decode("utf-8"), f"process {entry}")
                if netns.valid_id(cfg["id"]) and isinstance(cfg.get("state_path", ""), str):
                    found.append((int(entry), cfg["id"], cfg.get("state_path", "")))
            except (ValueError, KeyError, TypeError, AttributeError, GeosimError):
                pass
    return found


def _zombie(pid: int) -> bool:
    return netns._zombie(pid)
