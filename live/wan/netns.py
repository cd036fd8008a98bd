"""Namespaces, TAP devices and their teardown: the kernel side of the WAN emulator.

Everything a slice creates is named from its id, so teardown can find it again from
the id alone (after a crash, a SIGKILL or with no state file):
  namespace   geosim-wan-<id>-h<i>       (/run/netns/..., /etc/netns/...)
  TAP device  gw<id>t<i> in the root namespace until moved, then `wan0` inside
Addresses are 10.213.0.<i+1>/24 and exist only inside those namespaces: nothing
here routes to or from the machine's real interfaces.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import struct
import subprocess
import time

from geosim.base.errors import GeosimError

TUN_PATH = "/dev/net/tun"  # module attribute so tests can point it at a missing path
NETNS_RUN = "/run/netns"
NETNS_ETC = "/etc/netns"
PREFIX = "geosim-wan-"
SUBNET = "10.213.0"  # the project's own test hosts; never an address outside this /24 or loopback
IFNAME = "wan0"
MAX_HOSTS = 200
# a slice's id as `up` writes it (secrets.token_hex(3)); anything else names no slice. An empty or
# shorter id would be a prefix of every slice's names: teardown() refuses it rather than match them all
ID_PATTERN = re.compile(r"[0-9a-f]{6}")
_NS_NAME = re.compile(re.escape(PREFIX) + r"([0-9a-f]{6})-h[0-9]{1,4}")

_TUNSETIFF = 0x400454CA
_IFF_TAP = 0x0002
_IFF_NO_PI = 0x1000
_IFF_VNET_HDR = 0x4000
_TUNSETOFFLOAD = 0x400454D0
_TUN_F_CSUM, _TUN_F_TSO4, _TUN_F_TSO6 = 0x01, 0x02, 0x04
VNET_HDR_LEN = 10  # struct virtio_net_hdr, the kernel's default size for a TAP

SOURCE = "geosim live wan"


def child_env(base: dict | None = None) -> dict:
    """An environment whose `python -m geosim...` imports this same geosim: from a source
    checkout its root goes first on PYTHONPATH (children run with another working directory)."""
    import geosim

    env = dict(os.environ if base is None else base)
    root = os.path.dirname(os.path.dirname(os.path.abspath(geosim.__file__)))
    if os.path.isfile(os.path.join(root, "pyproject.toml")):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def valid_id(slice_id) -> bool:
    """Whether `slice_id` is an id `up` could have written (6 lowercase hex digits)."""
    return isinstance(slice_id, str) and ID_PATTERN.fullmatch(slice_id) is not None


def id_of(name: str) -> str | None:
    """The slice id in a namespace name geosim-wan-<id>-h<i>, None when the name is not of that form."""
    match = _NS_NAME.fullmatch(name)
    return match.group(1) if match else None


def owned_by_me(path: str) -> bool:
    """A file or directory (not followed if a link) owned by this user and writable by no one else."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def ns_name(slice_id: str, i: int) -> str:
    return f"{PREFIX}{slice_id}-h{i}"


def tap_name(slice_id: str, i: int) -> str:
    return f"gw{slice_id}t{i}"  # <= 15 chars (IFNAMSIZ) for a 6-hex id and < 1000 hosts


def address(i: int) -> str:
    return f"{SUBNET}.{i + 1}"


def mac(i: int) -> str:
    # Locally administered, fixed per host index: the forwarder's switch table is known
    # up front and every namespace gets permanent neighbour entries (no ARP over the WAN).
    return f"02:67:73:77:{(i + 1) >> 8:02x}:{(i + 1) & 0xFF:02x}"


def hostname(i: int) -> str:
    return f"wan-host{i}"


def check_host() -> None:
    """Raise GeosimError unless this process can build a slice (root, tun, ip)."""
    if os.geteuid() != 0:
        raise GeosimError("needs root (network namespaces and TAP devices); run with sudo", source=SOURCE)
    if not os.path.exists(TUN_PATH):
        raise GeosimError(f"{TUN_PATH} is missing: the kernel has no TUN/TAP support (modprobe tun)", source=SOURCE)
    if shutil.which("ip") is None:
        raise GeosimError("the 'ip' command (iproute2) is not installed", source=SOURCE)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run(["ip", *args], check=check)


def run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise GeosimError(f"`{' '.join(argv)}` failed: {proc.stderr.strip() or proc.returncode}", source=SOURCE)
    return proc


def open_tap(name: str, offload: bool = False) -> int:
    """A non-blocking TAP fd; the device lives as long as the fd is open.

    offload: the TAP carries a virtio-net header and accepts TCP segmentation and checksum
    offload, as a VM's NIC does. The stack then hands the forwarder up to 64 KB TCP
    super-frames (still segmented at the MTU on the emulated wire: gso_size is kept) and
    the forwarder moves ~40x fewer frames for the same throughput. Frames are passed on
    with their header untouched; the receiving stack takes them like GRO output.
    """
    fd = os.open(TUN_PATH, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        flags = _IFF_TAP | _IFF_NO_PI | (_IFF_VNET_HDR if offload else 0)
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH22x", name.encode(), flags))
        if offload:
            fcntl.ioctl(fd, _TUNSETOFFLOAD, _TUN_F_CSUM | _TUN_F_TSO4 | _TUN_F_TSO6)
    except OSError:
        os.close(fd)
        raise
    return fd


def hosts_file(i: int, n: int) -> str:
    # gloo resolves the machine's hostname to pick its interface; in the real /etc/hosts
    # that is 127.0.0.1, so each namespace maps it to its own WAN address instead.
    lines = ["127.0.0.1 localhost", f"{address(i)} {os.uname().nodename} {hostname(i)}"]
    lines += [f"{address(j)} {hostname(j)}" for j in range(n) if j != i]
    return "\n".join(lines) + "\n"


def tcp_buffers(rmem_max: int, window_bytes: int | None = None) -> tuple[str, str]:
    """(tcp_rmem, tcp_wmem) values "min default max". Without a window cap: buffers large
    enough for a WAN bandwidth-delay product. With one: every TCP socket of the namespace
    autotunes up to window_bytes at most (receive and send), as on a host whose stock
    buffers are smaller than the path's bandwidth-delay product."""
    if window_bytes is None:
        return f"4096 131072 {rmem_max}", f"4096 65536 {rmem_max}"
    w = int(window_bytes)
    return f"4096 {min(131072, w)} {w}", f"4096 {min(65536, w)} {w}"


def sysctls(rmem_max: int, window_bytes: int | None = None) -> list[str]:
    # IPv6 off so no router solicitations, DAD or MLD frames cross the emulated link;
    # TCP buffers per namespace (these sysctls are per network namespace; net.core.rmem_max
    # and wmem_max are not, and cannot be written inside one).
    rmem, wmem = tcp_buffers(rmem_max, window_bytes)
    return [
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
        f"net.ipv4.tcp_rmem={rmem}",
        f"net.ipv4.tcp_wmem={wmem}",
        "net.ipv4.tcp_no_metrics_save=1",
    ]


TBF_LATENCY_MS = 50.0  # the queue tbf holds before it drops, at the rate


def tbf_burst_bytes(bandwidth_mbit: float, mtu: int, offload: bool = False) -> int:
    """The token bucket's size (tbf_args explains the choice); the simulator's Shaper takes it too."""
    rate_bytes = bandwidth_mbit * 1e6 / 8
    return int(max(4 * (mtu + 14), rate_bytes * 0.001, 65536 + 2 * (mtu + 14) if offload else 0))


def tbf_args(bandwidth_mbit: float, mtu: int, offload: bool = False) -> list[str]:
    # Burst: 1 ms worth at the rate, at least a few frames. With offload, at least one
    # 64 KB TSO super-frame: a smaller bucket makes tbf cut every super-frame into MTU
    # frames and the forwarder's CPU goes from ~0.1 to ~0.7 core at 200 Mbit/s; the long-run
    # rate is the same (tbf charges every segment's headers), only bursts get coarser.
    # Queue of ~50 ms before tbf drops: local TCP senders see the qdisc's backpressure
    # (TCP small queues) and rarely fill it; it bounds what several flows can pile up.
    burst = tbf_burst_bytes(bandwidth_mbit, mtu, offload)
    return ["rate", f"{int(bandwidth_mbit * 1e6)}bit", "burst", str(burst), "latency", f"{TBF_LATENCY_MS:g}ms"]


def configure_host(slice_id: str, i: int, n: int, *, mtu: int, bandwidth_mbit: float | None, rmem_max: int,
                   offload: bool = False, window_bytes: int | None = None) -> None:
    """Create namespace i, move its TAP in and configure it. The TAP must already be open."""
    ns, tap = ns_name(slice_id, i), tap_name(slice_id, i)
    ip("netns", "add", ns)
    etc = os.path.join(NETNS_ETC, ns)
    os.makedirs(etc, exist_ok=True)
    with open(os.path.join(etc, "hosts"), "w") as f:
        f.write(hosts_file(i, n))
    run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", *sysctls(rmem_max, window_bytes)])
    ip("link", "set", tap, "netns", ns)
    ip("-n", ns, "link", "set", tap, "name", IFNAME, "address", mac(i), "mtu", str(mtu))
    ip("-n", ns, "addr", "add", f"{address(i)}/24", "dev", IFNAME)
    for j in range(n):
        if j != i:
            ip("-n", ns, "neigh", "replace", address(j), "lladdr", mac(j), "dev", IFNAME, "nud", "permanent")
    if bandwidth_mbit:
        run(["tc", "-n", ns, "qdisc", "replace", "dev", IFNAME, "root", "tbf", *tbf_args(bandwidth_mbit, mtu, offload)])
    ip("-n", ns, "link", "set", "lo", "up")
    ip("-n", ns, "link", "set", IFNAME, "up")


def namespaces(slice_id: str | None = None) -> list[str]:
    """Namespaces of one slice (or of every geosim slice), from /run/netns and /etc/netns: names of
    the form up gives them (geosim-wan-<6 hex>-h<i>), owned by this user."""
    if slice_id is not None and not valid_id(slice_id):
        return []
    found = set()
    for base in (NETNS_RUN, NETNS_ETC):
        try:
            names = os.listdir(base)
        except OSError:
            continue
        found.update(x for x in names if id_of(x) and (slice_id is None or id_of(x) == slice_id)
                     and owned_by_me(os.path.join(base, x)))
    return sorted(found)


def tap_links(slice_id: str | None = None) -> list[str]:
    """TAP devices of a slice still in the root namespace (a setup that failed mid-way)."""
    if slice_id is not None and not valid_id(slice_id):
        return []
    pattern = re.compile(rf"^gw{slice_id if slice_id else '[0-9a-f]{6}'}t\d+$")
    try:
        return sorted(x for x in os.listdir("/sys/class/net") if pattern.match(x))
    except FileNotFoundError:
        return []


def pids_in(ns: str) -> list[int]:
    """Processes whose network namespace is `ns` (what `ip netns pids` prints)."""
    try:
        st = os.stat(os.path.join(NETNS_RUN, ns))
    except OSError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                s = os.stat(f"/proc/{entry}/ns/net")
            except OSError:
                continue
            if (s.st_ino, s.st_dev) == (st.st_ino, st.st_dev) and int(entry) != os.getpid():
                pids.append(int(entry))
    return pids


def kill_pids(pids: list[int], grace_s: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 1.0)
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            alive = [p for p in alive if os.path.exists(f"/proc/{p}") and not _zombie(p)]
        pids = alive
        if not pids:
            return


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def teardown(slice_id: str) -> list[str]:
    """Remove every namespace, /etc/netns entry and TAP of one slice, named by its id as `up` wrote it.

    Processes still running inside the namespaces are stopped first: otherwise they keep
    the namespace alive after `ip netns del`. Idempotent; returns what it removed. Never a
    wildcard: an id not of `up`'s form (empty, None, shorter: a prefix of other slices' names)
    is refused, so no state file or process can make it remove another slice.
    """
    if not valid_id(slice_id):
        raise GeosimError(f"{str(slice_id)[:40]!r} is not a WAN slice id (6 hex digits, as `up` writes); "
                          "nothing torn down", source=SOURCE)
    removed = []
    nss = namespaces(slice_id)
    for ns in nss:
        kill_pids(pids_in(ns))
    for ns in nss:
        if os.path.exists(os.path.join(NETNS_RUN, ns)):
            ip("netns", "del", ns, check=False)
        shutil.rmtree(os.path.join(NETNS_ETC, ns), ignore_errors=True)
        removed.append(ns)
    for link in tap_links(slice_id):
        ip("link", "del", link, check=False)
        removed.append(link)
    try:
        os.rmdir(NETNS_ETC)  # only if we emptied it; it did not exist on a fresh machine
    except OSError:
        pass
    return removed
