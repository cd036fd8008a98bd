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

A cluster meant to be reached from other machines is started deliberately with `ray start`
(docs/guide/sweeps.md, "A Ray cluster"); geosim then only attaches to it (--ray-address HOST:PORT).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def loopback_ray_env() -> None:
    """Before (or, failing that, after) `import ray`: the node address Ray picks is the loopback."""
    os.environ.update(LOOPBACK_ENV)
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # imported earlier in this process: the module read the old value
        constants.ENABLE_RAY_CLUSTER = False


def init_local(ray, num_cpus: int | None = None) -> str:
    """Start a fresh single-node Ray on loopback with a private temp directory; returns that directory
    (remove it with `remove_temp_dir` after ray.shutdown())."""
    loopback_ray_env()
    temp = tempfile.mkdtemp(prefix="geosim-ray-")  # short: Ray's socket paths have a length limit
    kwargs = {"num_cpus": num_cpus} if num_cpus else {}
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
