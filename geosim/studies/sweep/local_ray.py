"""A Ray instance that geosim starts itself (`geosim sweep --ray-address local`): closed to the network.

By default Ray (2.x, checked on 2.60 with `ss -ltnp`) puts its GCS, raylet, workers' gRPC servers,
the dashboard agent and the runtime-env agent on every interface (0.0.0.0 or ::), and keeps its
session under /tmp/ray, a name any user of the machine can predict. An instance only this process
uses needs neither:
- RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes Ray take the loopback address as the node's address
  (what it does on macOS and Windows), so every service binds 127.0.0.1 (`_node_ip_address`
  alone does not: ray.init turns 127.0.0.1 into the machine's own address). Ray reads it when
  imported, so it is set before the import, and in the module if Ray was imported already;
  Ray's processes inherit it.
- include_dashboard=False: no dashboard HTTP server.
- _temp_dir: a directory inside one made by mkdtemp (mode 0700, an unpredictable name), removed
  at shutdown. Inside, because Ray makes its temp directory world-writable (0777): the private
  parent keeps other users out of it.

- A watchdog (a small process in a session of its own) waits on a pipe only this driver holds:
  when the driver dies, even by SIGKILL, the pipe closes and the watchdog stops every process
  whose command line or environment names the private directory (GCS, raylet, workers, the
  dashboard and runtime-env agents), or that holds a file open in it, and removes the directory.
  Ray renames its agents' command lines ("ray::DashboardAgent", written over the environment as
  well, so INSTANCE_ENV, set before ray.init, is not always readable there): their open logs
  name the directory. Found by command line alone, they outlived the watchdog by minutes. Without it they listened for minutes and the
  session directory stayed for good.
- Ray's auth token stays in the environment (RAY_AUTH_TOKEN, made here): Ray would otherwise
  write ~/.ray/auth_token, and fail under a read-only HOME. Nothing of Ray's goes to HOME.

A cluster meant to be reached from other machines is started deliberately with `ray start`
(docs/guide/sweeps.md, "A Ray cluster"); geosim then only attaches to it (--ray-address HOST:PORT).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
INSTANCE_ENV = "GEOSIM_RAY_INSTANCE"  # the private directory, in the environment of each of its processes


def loopback_ray_env() -> None:
    """Before (or, failing that, after) `import ray`: the node address Ray picks is the loopback."""
    os.environ.update(LOOPBACK_ENV)
    # token auth with the token in the environment (inherited by Ray's processes), never ~/.ray
    if "RAY_AUTH_MODE" not in os.environ and "RAY_AUTH_TOKEN" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # imported earlier in this process: the module read the old value
        constants.ENABLE_RAY_CLUSTER = False
        raylet = sys.modules.get("ray._raylet")
        if raylet is not None:  # Ray's config caches the auth mode when imported
            raylet.Config.initialize("")


def init_local(ray, num_cpus: int | None = None) -> str:
    """Start a fresh single-node Ray on loopback with a private temp directory; returns that directory
    (remove it with `remove_temp_dir` after ray.shutdown())."""
    loopback_ray_env()
    temp = tempfile.mkdtemp(prefix="geosim-ray-")  # short: Ray's socket paths have a length limit
    kwargs = {"num_cpus": num_cpus} if num_cpus else {}
    os.environ[INSTANCE_ENV] = temp  # every process Ray starts inherits it: how the watchdog knows them
    _WATCHDOGS[temp] = start_watchdog(temp)
    try:
        ray.init(address="local", include_dashboard=False, log_to_driver=False, _temp_dir=os.path.join(temp, "r"),
                 _node_ip_address="127.0.0.1", **kwargs)
    except BaseException:
        remove_temp_dir(temp)
        raise
    return temp


def remove_temp_dir(temp: str | None) -> None:
    if temp:
        shutil.rmtree(temp, ignore_errors=True)
        if os.environ.get(INSTANCE_ENV) == temp:
            del os.environ[INSTANCE_ENV]
        fd = _WATCHDOGS.pop(temp, None)
        if fd is not None:
            os.close(fd)  # the watchdog wakes, finds nothing left, and exits


_WATCHDOGS: dict[str, int] = {}  # private directory -> the write end of its watchdog's pipe


def start_watchdog(temp: str) -> int:
    """Start the watchdog of `temp` (see the module's docstring); returns the pipe's write end,
    which only this process holds (close-on-exec: Ray's processes do not inherit it)."""
    r, w = os.pipe()
    os.set_inheritable(w, False)
    subprocess.Popen([sys.executable, "-m", __name__, str(r), temp, str(os.getpid())], pass_fds=(r,), stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd="/")
    os.close(r)
    return w


def processes_naming(temp: str, spare: tuple[int, ...] = ()) -> list[int]:
    """Pids of this user's processes whose command line or environment names `temp` (Ray's, for our
    instance)."""
    found, needle, marker = [], temp.encode(), f"{INSTANCE_ENV}={temp}\0".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid() or int(entry) in spare:
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != os.geteuid():
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                named = needle in f.read()
            if not named:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    named = marker in f.read() + b"\0"
            if not named:  # a renamed title can overwrite the environment too: its open logs still say
                named = _holds_open(entry, temp)
            if named:
                found.append(int(entry))
        except OSError:
            continue
    return found


def _holds_open(pid: str, temp: str) -> bool:
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if temp in os.readlink(f"/proc/{pid}/fd/{fd}"):
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def watch(read_fd: int, temp: str, driver: int = 0, grace_s: float = 3.0) -> None:
    """Block until the driver's end of the pipe closes; then stop what is left of its Ray and
    remove the private directory. The driver itself is spared: after a clean shutdown it closes
    the pipe alive, still holding Ray's logs open in the directory."""
    while os.read(read_fd, 1):
        pass
    pids = processes_naming(temp, (driver,))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in pids):
        time.sleep(0.1)
    for pid in processes_naming(temp, (driver,)):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":  # the watchdog: python -m geosim.studies.sweep.local_ray FD DIR
    watch(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
