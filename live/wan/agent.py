"""`geosim live probe`: RTT and TCP throughput between every pair of Ray nodes -> a scenario.

One agent (a Ray actor) per node runs a small TCP server. For each pair, the first node
measures against the second: RTT as the median of small request/response round trips
(TCP_NODELAY, so it is the network's RTT plus a little user-space time), throughput with
one stream and with several parallel streams (what NCCL's socket transport and gloo see).
The scenario file records the multi-stream figure as the link bandwidth and both in a
comment; the GPUs of each node come from nvidia-smi, or a CPU table when there are none.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from geosim.live.wan.probe import TcpServer, tcp_gbps, tcp_rtt_ms
from geosim.base.errors import GeosimError, require
from geosim.base.fileio import write_atomic
from geosim.inputs.scenario import load_scenario


class Agent:
    """A Ray actor on one node: a TcpServer on the node's address and the client side of
    the measurements (live/wan/probe.py)."""

    def __init__(self, bind: str | None = None):
        from geosim.live.train.distributed import node_ip

        self.ip = bind or node_ip()
        self.server = TcpServer(self.ip)  # the node's own address (Ray's), not every interface

    def where(self):
        gpus = local_gpus()
        return {"ip": self.ip, "port": self.server.port, "hostname": socket.gethostname(),
                "gpus": [g["name"] for g in gpus], "gpu_memory_gib": [g["memory_gib"] for g in gpus]}

    def ping(self, ip, port, count):
        return tcp_rtt_ms(ip, port, count)

    def throughput(self, ip, port, streams, seconds):
        return tcp_gbps(ip, port, streams, seconds)


def local_gpus() -> list[dict]:
    """This node's GPUs as nvidia-smi names them, with their memory (GiB): [] without GPUs."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        name, _, mib = line.rpartition(",")
        try:
            gpus.append({"name": name.strip(), "memory_gib": float(mib) / 1024})
        except ValueError:
            gpus.append({"name": line.strip(), "memory_gib": None})
    return [g for g in gpus if g["name"]]


def probe(address: str, *, seconds=3.0, streams=4, pings=20, log=print) -> dict:
    from geosim.live.train.distributed import pinned, ray_nodes

    ray = require("ray", extra="live", command="geosim live probe")
    ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    agents = []
    try:
        nodes = ray_nodes(ray, None)
        if len(nodes) < 2:
            raise GeosimError(f"the Ray cluster has {len(nodes)} node(s): a probe needs at least 2", key="--ray-address")
        agents = [pinned(ray, Agent, n["NodeID"]).remote() for n in nodes]
        where = ray.get([a.where.remote() for a in agents], timeout=120)
        names = [w["hostname"] for w in where]
        if len(set(names)) < len(names):
            names = [f"{w['hostname']}-{i}" for i, w in enumerate(where)]
        hosts = [{"name": n, "ip": w["ip"], "gpus": w["gpus"], "gpu_memory_gib": w["gpu_memory_gib"]}
                 for n, w in zip(names, where)]
        links = []
        for i in range(len(agents)):
            for j in range(i + 1, len(agents)):
                ip, port = where[j]["ip"], where[j]["port"]
                log(f"probing {names[i]} -> {names[j]} ({ip})")
                rtt = ray.get(agents[i].ping.remote(ip, port, pings), timeout=120)
                single = ray.get(agents[i].throughput.remote(ip, port, 1, seconds), timeout=seconds * 10 + 60)
                multi = ray.get(agents[i].throughput.remote(ip, port, streams, seconds), timeout=seconds * 10 + 60)
                links.append({"a": names[i], "b": names[j], "rtt_ms": rtt, "single_gbps": single,
                              "multi_gbps": multi, "streams": streams})
        return {"hosts": hosts, "links": links, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    finally:
        for a in agents:
            ray.kill(a)
        ray.shutdown()


def scenario_text(result: dict, name: str) -> str:
    """Scenario-file TOML (the format of scenarios/*.toml), with the measurements as comments."""
    from geosim.live.train.record import catalog_gpu, cpu_gpu_table, unknown_gpu_table

    lines = [f"# Measured by `geosim live probe` at {result['when']}.", f'name = "{name}"', ""]
    tables = {}
    for h in result["hosts"]:
        gpus = []
        memory = h.get("gpu_memory_gib") or [None] * len(h["gpus"])
        for device, mem in zip(h["gpus"], memory):
            known = catalog_gpu(device, mem)
            if known is None:
                known = _table_key(device)
                lines.append(f"# {h['name']}: GPU {device!r} is not in geosim's catalog: fill in its [gpus] table, "
                             "its architecture (a generation of geosim/data/generations.toml) first")
                tables[known] = unknown_gpu_table(device, mem)
            gpus.append(known)
        if not gpus:
            gpus = ["CPU"]
            tables["CPU"] = cpu_gpu_table(1)["CPU"]
        lines += ["[[hosts]]", f'name = "{h["name"]}"', f'site = "{h["name"]}"   # one site per VM; rename to group them',
                  "gpus = [" + ", ".join(f'"{g}"' for g in gpus) + "]", f"# address {h['ip']}", ""]
    for link in result["links"]:
        bandwidth = max(link["single_gbps"], link["multi_gbps"], 1e-3)
        lines += ["[[links]]", f'between = ["{link["a"]}", "{link["b"]}"]', f"rtt_ms = {link['rtt_ms']:.6g}",
                  f"bandwidth_gbps = {bandwidth:.6g}   # measured: 1 stream {link['single_gbps']:.4f}, "
                  f"{link['streams']} streams {link['multi_gbps']:.4f} Gbit/s", ""]
    for gname, table in tables.items():
        lines.append(f"[gpus.{gname}]")
        lines += [f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in table.items()]
        lines.append("")
    return "\n".join(lines)


def _table_key(device_name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in device_name).strip("-") or "GPU"


def write_scenario(result: dict, out: str, name: str | None = None) -> None:
    """Write atomically (a unique temporary file beside it, renamed over it), then check the
    file loads as a scenario (what `geosim predict` reads)."""

    path = Path(out)
    write_atomic(path, scenario_text(result, name or path.stem))
    load_scenario(path)
