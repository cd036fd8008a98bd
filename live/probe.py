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
import statistics
import struct
import subprocess
import threading
import time
from pathlib import Path

CHUNK = 1 << 20


def _recv_exact(conn, n):
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise ConnectionError("peer closed")
        data += part
    return data


class Agent:
    """A TCP server (ping echo and byte sink) and the client side of the measurements."""

    def __init__(self):
        self.server = socket.create_server(("", 0), backlog=64)
        threading.Thread(target=self._serve, daemon=True).start()

    def where(self):
        from geosim.live.distributed import node_ip

        return {"ip": node_ip(), "port": self.server.getsockname()[1], "hostname": socket.gethostname(),
                "gpus": local_gpus()}

    def _serve(self):
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            mode = _recv_exact(conn, 1)
            if mode == b"p":  # echo fixed-size messages until the client closes
                while True:
                    try:
                        conn.sendall(_recv_exact(conn, 64))
                    except ConnectionError:
                        return
            else:  # sink: count bytes until EOF, answer with the count
                total = 0
                while part := conn.recv(CHUNK):
                    total += len(part)
                conn.sendall(struct.pack("!Q", total))

    def ping(self, ip, port, count):
        with socket.create_connection((ip, port), timeout=30) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(b"p")
            rtts, msg = [], b"x" * 64
            for _ in range(count + 2):
                t = time.perf_counter()
                s.sendall(msg)
                _recv_exact(s, 64)
                rtts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(rtts[2:])  # the first round trips include connection warm-up

    def throughput(self, ip, port, streams, seconds):
        """Gbit/s over `streams` parallel connections, each sending for `seconds`."""
        totals = [0] * streams
        payload = b"\0" * CHUNK

        def send(i):
            with socket.create_connection((ip, port), timeout=60) as s:
                s.sendall(b"s")
                end = time.perf_counter() + seconds
                while time.perf_counter() < end:
                    s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                totals[i] = struct.unpack("!Q", _recv_exact(s, 8))[0]  # bytes that arrived

        start = time.perf_counter()
        threads = [threading.Thread(target=send, args=(i,)) for i in range(streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(totals) * 8 / (time.perf_counter() - start) / 1e9


def local_gpus() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def probe(address: str, *, seconds=3.0, streams=4, pings=20, log=print) -> dict:
    from geosim.errors import GeosimError, require
    from geosim.live.distributed import pinned, ray_nodes

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
        hosts = [{"name": n, "ip": w["ip"], "gpus": w["gpus"]} for n, w in zip(names, where)]
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


def gpu_name(device_name: str) -> str | None:
    from geosim.live.record import GPU_NAMES

    return next((v for k, v in GPU_NAMES.items() if k in device_name), None)


def scenario_text(result: dict, name: str) -> str:
    """Scenario-file TOML (the format of scenarios/*.toml), with the measurements as comments."""
    from geosim.scenario import gpu_catalog
    from geosim.live.record import cpu_gpu_table

    lines = [f"# Measured by `geosim live probe` at {result['when']}.", f'name = "{name}"', ""]
    tables = {}
    for h in result["hosts"]:
        gpus = [gpu_name(g) or g for g in h["gpus"]]
        unknown = [g for g in gpus if g not in gpu_catalog()]
        if not gpus:
            gpus = ["CPU"]
            tables["CPU"] = cpu_gpu_table(1)["CPU"]
        elif unknown:
            lines.append(f"# {h['name']}: GPU {unknown[0]!r} is not in geosim's catalog: fill in its [gpus] table")
            for g in unknown:
                tables[g] = {"name": g, "memory_gib": 16, "memory_bandwidth_gbs": 500, "fp32_tflops": 10,
                             "fp16_tensor_tflops": 60, "pcie_gen": 3}
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


def write_scenario(result: dict, out: str, name: str | None = None) -> None:
    """Write atomically, then check the file loads as a scenario (what `geosim predict` reads)."""
    import os

    from geosim.scenario import load_scenario

    path = Path(out)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(scenario_text(result, name or path.stem))
    os.replace(tmp, path)
    load_scenario(path)
