"""Multi-host runs: one JAX process per host (jax.distributed), launched as Ray actors
pinned one to each node, or started by hand with --coordinator/--process-id.

Collectives: NCCL between GPUs (XLA's GPU backend), gloo over TCP between CPU
processes. Gloo binds to the interface of the machine's hostname unless told
otherwise; on multi-homed VMs (FABRIC: a management NIC and a dataplane NIC) pass
--gloo-interface (and NCCL_SOCKET_IFNAME for NCCL) to pick the dataplane.
"""

from __future__ import annotations

import os
import socket
import time
from geosim.base.errors import GeosimError, require


def configure_cpu_devices(count: int | None):
    """Virtual CPU devices per process; must run before JAX creates its backends."""
    if count:
        import jax

        jax.config.update("jax_num_cpu_devices", count)


def split_address(address: str) -> tuple[str, int]:

    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise GeosimError(f"must be HOST:PORT, got {address!r}", key="--coordinator")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def initialize(coordinator: str, num_processes: int, process_id: int, gloo_interface: str | None = None):
    """Join the run. Process 0 serves the coordinator on exactly HOST:PORT of --coordinator
    (jax's default would be every interface). Gloo listens on --gloo-interface's address,
    or on loopback when the coordinator is on loopback (a one-machine run), else on the
    address of the machine's hostname (gloo's default)."""
    import jax

    host, port = split_address(coordinator)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    gloo = {"interface": gloo_interface} if gloo_interface else {"hostname": host} if is_loopback(host) else {}
    if gloo:
        # jax creates gloo's TCP collectives without these arguments; pin them here.
        from functools import partial

        from jax._src.lib import _jax

        original = getattr(_jax.make_gloo_tcp_collectives, "_geosim_original", _jax.make_gloo_tcp_collectives)
        patched = partial(original, **gloo)
        patched._geosim_original = original
        _jax.make_gloo_tcp_collectives = patched
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id,
                               initialization_timeout=120,
                               coordinator_bind_address=bind if process_id == 0 else None)


def collective_impl(platform: str, processes: int) -> str:
    if platform == "gpu":
        return "nccl"
    return "gloo" if processes > 1 else "xla-cpu"


def free_port(address: str = "127.0.0.1") -> int:
    """A port free on `address` (the one the coordinator will then bind), loopback by default."""
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:
        return socket.gethostbyname(socket.gethostname())


class Worker:
    """One per node (a Ray actor): the host's JAX process."""

    def __init__(self, env: dict):
        os.environ.update(env)  # NCCL_SOCKET_IFNAME etc., before JAX loads

    def where(self):
        ip = node_ip()
        return {"ip": ip, "hostname": socket.gethostname(), "port": free_port(ip)}

    def train(self, opts_dict: dict, coordinator: str, num_processes: int, process_id: int, cpu_devices, gloo_interface):
        from geosim.live.train.loop import Options, run

        configure_cpu_devices(cpu_devices)
        initialize(coordinator, num_processes, process_id, gloo_interface)
        try:
            result = run(Options(**opts_dict), log=print if process_id == 0 else None)
        finally:
            import jax

            jax.distributed.shutdown()
        return result.to_dict()


def ray_nodes(ray, hosts: int | None):
    """Alive nodes, the driver's node first; `hosts` limits how many are used."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    here = ray.get_runtime_context().get_node_id()
    nodes.sort(key=lambda n: (n["NodeID"] != here, n["NodeManagerAddress"], n["NodeID"]))
    return nodes[:hosts] if hosts else nodes


def pinned(ray, cls, node_id: str, **options):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    # num_cpus=0: the actor must not wait for CPUs a Ray task elsewhere is holding
    return ray.remote(num_cpus=0, scheduling_strategy=strategy, **options)(cls)


def run_on_ray(address: str, opts, hosts: int | None, cpu_devices, gloo_interface, env: dict, timeout_s: float):
    """Start one worker per node, run the same training everywhere, return (result of
    process 0, host names)."""
    from geosim.live.train import interrupts

    ray = require("ray", extra="live", command="geosim live run --ray-address")
    ray.init(address=address, log_to_driver=True, ignore_reinit_error=True)
    try:
        nodes = ray_nodes(ray, hosts)
        if hosts and len(nodes) < hosts:
            raise GeosimError(f"the Ray cluster has {len(nodes)} alive node(s), {hosts} requested", key="--host-count")
        actors = [pinned(ray, Worker, n["NodeID"]).remote(env) for n in nodes]
        where = ray.get([a.where.remote() for a in actors], timeout=timeout_s)
        coordinator = f"{where[0]['ip']}:{where[0]['port']}"
        names = [w["hostname"] for w in where]
        if len(set(names)) < len(names):  # several Ray nodes on one machine (tests, small setups)
            names = [f"{w['hostname']}-{i}" for i, w in enumerate(where)]
        from dataclasses import asdict

        futures = [a.train.remote(asdict(opts), coordinator, len(actors), i, cpu_devices, gloo_interface)
                   for i, a in enumerate(actors)]
        deadline = time.monotonic() + timeout_s
        while len(ray.wait(futures, num_returns=len(futures), timeout=0.5)[0]) < len(futures):
            interrupts.check()  # SIGINT/SIGTERM: KeyboardInterrupt, the actors are killed below
            if time.monotonic() > deadline:
                raise TimeoutError(f"the workers did not finish within {timeout_s:g} s")
        results = ray.get(futures)
        return results[0], names
    finally:
        for a in locals().get("actors", []):
            ray.kill(a)
        ray.shutdown()
