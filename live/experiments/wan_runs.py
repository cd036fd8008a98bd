"""Multi-host live runs over the emulated WAN (`geosim live run --hosts wan`).

One JAX process per emulated host, each started in its host's network namespace with
`ip netns exec` as a `geosim live run --coordinator HOST0:PORT --num-processes N
--process-id I --gloo-interface wan0 --json` child. Gloo is bound to the namespace's
interface (it would otherwise pick the interface of the machine's hostname, 127.0.0.1).
Process 0 prints its record on stdout; this module replaces the record's cluster with
the emulated slice in scenario-file form (one host and site per namespace, a link per
pair with the emulated RTT and bandwidth, the `[gpus.CPU]` table of live/record.py), so
`geosim calibrate fit` can simulate the run.

Children run in their own sessions and are killed (SIGTERM, then SIGKILL) when one of
them fails, on timeout, on SIGINT/SIGTERM and on any error in the parent; and the kernel
kills them (PR_SET_PDEATHSIG) if the parent itself dies, even by SIGKILL.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import geosim
from geosim.base.errors import GeosimError
from geosim.live.train import lowcomm
from geosim.inputs.records import append_record, validate

# With no bandwidth cap the link runs as fast as the forwarder moves frames: ~5.5 Gbit/s
# measured on an idle 2-core machine (docs/guide/wan-emulator.md), less when training competes for the CPU.
UNCAPPED_GBPS = 5.0
OPTION_FLAGS = (  # live.train.Options field -> flag of `geosim live run`
    ("technique", "--technique"), ("model", "--model"), ("steps", "--steps"), ("epochs", "--epochs"),
    ("batch", "--global-batch"), ("microbatches", "--microbatches"), ("stages", "--pipeline-parallel"), ("precision", "--precision"),
    ("seq_len", "--seq-len"), ("seed", "--seed"), ("learning_rate", "--lr"), ("data", "--data"),
    ("tokenizer", "--tokenizer"), ("warmup", "--warmup"), ("log_every", "--log-every"),
    ("memory_limit_gib", "--memory-limit-gib"),
)
PR_SET_PDEATHSIG = 1


@dataclass
class WanRun:
    """What process 0 reported, as a run record (dict, geosim.run/1) plus the per-step detail."""

    record: dict
    losses: list = field(default_factory=list)
    step_times: list = field(default_factory=list)
    wall_s: float = 0.0
    returncodes: list = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.record.get("status", "failed")


def require_wan(wan=None):
    """The running slice (or the one given), or a one-line error saying how to start one."""
    from geosim.live.wan.emulator import current

    wan = wan or current()
    if wan is None:
        raise GeosimError("no WAN slice is up: start one with `geosim live wan up --rtt-ms 40 --host-count 2` "
                          "(root), or set GEOSIM_WAN_STATE to its state file", key="--hosts")
    if len(wan.hosts) < 2:
        raise GeosimError("the WAN slice has fewer than 2 hosts", key="--hosts")
    return wan


def child_argv(opts, *, coordinator: str, num_processes: int, process_id: int, cpu_devices: int,
               interface: str) -> list[str]:
    argv = [sys.executable, "-m", "geosim", "live", "run"]
    for name, flag in OPTION_FLAGS:
        value = getattr(opts, name)
        if name == "warmup" and value >= (opts.steps or value + 1):
            continue  # more warm-up than steps: each process times what is left (an explicit --warmup is refused)
        if value is not None:
            argv += [flag, str(value)]
    for name, value in (opts.lowcomm or {}).items():  # as arguments: every process gets the same options
        if value is not None:
            argv += [lowcomm.FLAGS[name], str(value)]
    return argv + ["--gpus-per-host", str(cpu_devices), "--coordinator", coordinator, "--num-processes",
                   str(num_processes), "--process-id", str(process_id), "--gloo-interface", interface, "--json"]


def wan_cluster(wan, per_host: list[int], gpu_table: dict | None = None) -> dict:
    """The emulated slice in scenario-file form: host i = namespace i at its own site, one
    link per pair with the emulated RTT and the egress cap (or the forwarder's nominal rate)."""
    from geosim.live.train.record import cpu_gpu_table

    n = len(per_host)
    bandwidth = wan.bandwidth_mbit / 1000 if wan.bandwidth_mbit else UNCAPPED_GBPS
    rtt = wan.rtt_ms[0][1]
    name = f"wan-rtt{rtt:g}ms" + (f"-{wan.bandwidth_mbit:g}mbit" if wan.bandwidth_mbit else "")
    window_kib = (getattr(wan, "extra", None) or {}).get("tcp_window_kib")
    cluster = {"name": name, "hosts": [], "links": [], "gpus": gpu_table or cpu_gpu_table(max(per_host))}
    for i in range(n):
        cluster["hosts"].append({"name": wan.hosts[i].hostname, "site": f"wan-site{i}", "gpus": ["CPU"] * per_host[i]})
    for i in range(n):
        for j in range(i + 1, n):
            link = {"between": [wan.hosts[i].hostname, wan.hosts[j].hostname],
                    "rtt_ms": float(wan.rtt_ms[i][j]), "bandwidth_gbps": float(bandwidth)}
            if window_kib:  # the emulator's TCP buffer cap: the simulator limits each flow to it
                link["window_mib"] = float(window_kib) / 1024
            else:  # buffers sized for the path: the window they allow (never the bottleneck by design)
                link["window_mib"] = round(uncapped_window_bytes(wan) / 2**20, 4)
            if wan.bandwidth_mbit:  # the cap is a tbf on each host's egress: a token bucket, not a line
                link["shaper"] = shaper_table(wan)
            if getattr(wan, "loss", 0.0):  # the forwarder drops each frame with this probability
                link["loss"] = float(wan.loss)
            cluster["links"].append(link)
    return cluster


# The window a socket gets out of its buffer: the kernel keeps part of each buffer for its own skb
# overhead; measured on this machine's slices, a 128 KiB cap gave ~93 KiB in flight
# (live/experiments/validate.effective_window_mib).
WINDOW_PER_BUFFER = 0.73


def uncapped_window_bytes(wan) -> float:
    """The TCP window of a slice without --tcp-window-kib: its hosts' buffer maximum x WINDOW_PER_BUFFER."""
    from geosim.live.wan.emulator import socket_buffer_bytes

    return socket_buffer_bytes(wan.bandwidth_mbit, wan.rtt_ms) * WINDOW_PER_BUFFER


def shaper_table(wan) -> dict:
    """The slice's tbf as a scenario link's `shaper` table (geosim.inputs.specs.Shaper)."""
    from geosim.live.wan.netns import TBF_LATENCY_MS, tbf_burst_bytes

    offload = bool((getattr(wan, "extra", None) or {}).get("offload"))
    burst = tbf_burst_bytes(wan.bandwidth_mbit, wan.mtu, offload)
    # the emulator's tbf is each namespace's own egress: its senders are held back, never dropped
    return {"burst_kib": round(burst / 1024, 4), "queue_ms": TBF_LATENCY_MS, "mtu": int(wan.mtu), "at_sender": True}


def _die_with_parent() -> None:
    """In the child between fork and exec: SIGKILL when the parent dies. `ip netns exec`
    execs the command in place and neither is set-user-ID, so the setting reaches it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before prctl: do not outlive it
        os._exit(1)


def _kill(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """SIGTERM every child's process group, then SIGKILL what is left; reap them all."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
            time.sleep(0.05)
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _pump(stream, keep: list[str], log=None) -> None:
    """A child's stderr: the last lines kept (for error messages), process 0's passed to log."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        keep.append(line)
        if len(keep) > 200:
            del keep[:100]
        if log:
            log(line)
    stream.close()


def run_on_wan(opts, *, wan=None, cpu_devices: int = 1, timeout_s: float = 900.0, log=None,
               port: int | None = None) -> WanRun:
    """Train with opts on every host of the slice (one process per host, cpu_devices each);
    return process 0's record with the slice as its cluster. Raises GeosimError when the
    processes fail without a record (then the stderr tails are in the message)."""
    from geosim.live.train import interrupts

    wan = require_wan(wan)
    if os.geteuid() != 0:
        raise GeosimError("running inside the WAN's namespaces needs root (ip netns exec)", key="--hosts")
    n = len(wan.hosts)
    port = port or random.randint(20000, 59999)
    coordinator = f"{wan.hosts[0].address}:{port}"
    from geosim.live.wan.netns import child_env

    env = child_env({k: v for k, v in os.environ.items() if k != "XLA_FLAGS"})
    env["PYTHONUNBUFFERED"] = "1"
    # the processes run from a temporary directory: let them import the geosim this one runs
    # (a checkout or worktree first on sys.path), not whichever one is installed
    here = str(Path(geosim.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    procs: list[subprocess.Popen] = []
    tails: list[list[str]] = [[] for _ in range(n)]
    pumps = []
    started = time.monotonic()
    from geosim.live.wan.connections import ConnectionSampler

    sampler = ConnectionSampler(wan).start()  # the window the run's own connections get
    with tempfile.TemporaryFile() as out0:
        try:
            for i in range(n):
                argv = wan.exec_argv(i, child_argv(opts, coordinator=coordinator, num_processes=n, process_id=i,
                                                   cpu_devices=cpu_devices, interface=wan.hosts[i].interface))
                p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out0 if i == 0 else subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env, cwd=tempfile.gettempdir(),
                                     start_new_session=True,  # own group: killed as a whole, not by the tty's ^C
                                     preexec_fn=_die_with_parent)
                procs.append(p)
                t = threading.Thread(target=_pump, args=(p.stderr, tails[i], log if i == 0 else None), daemon=True)
                t.start()
                pumps.append(t)
            deadline = started + timeout_s
            while any(p.poll() is None for p in procs):
                failed = [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]
                if failed and procs[0].poll() is None:
                    # a peer died: process 0 would wait for it until gloo's timeout
                    time.sleep(2.0)  # let it report, if it is about to
                    if procs[0].poll() is None:
                        raise GeosimError(f"process {failed[0]} on {wan.hosts[failed[0]].hostname} exited with "
                                          f"{procs[failed[0]].returncode}: {_tail(tails[failed[0]])}")
                if time.monotonic() > deadline:
                    raise GeosimError(f"the run did not finish within {timeout_s:g} s: {_tail(tails[0])}",
                                      key="--timeout")
                interrupts.check()  # SIGINT/SIGTERM to this process: stop the children (finally)
                time.sleep(0.1)
        finally:
            sampler.stop()
            _kill(procs)
            for t in pumps:
                t.join(timeout=2)
        out0.seek(0)
        text = out0.read().decode(errors="replace")
    codes = [p.returncode for p in procs]
    try:
        doc = json.loads(text[text.index("{"):]) if "{" in text else None
    except ValueError:
        doc = None
    if doc is None:
        bad = next((i for i, c in enumerate(codes) if c), 0)
        raise GeosimError(f"process 0 reported no record (exit codes {codes}); host {bad}: {_tail(tails[bad])}")
    losses = doc.pop("losses", [])
    step_times = doc.pop("step_times_s", [])
    connections = sampler.summary()
    if connections is None and (wan.extra or {}).get("tcp_window_kib"):
        why = sampler.errors[-1] if sampler.errors else "no sample caught data moving"
        print(f"geosim: note: the run's TCP window was not measured ({why[:120]}); its link keeps the slice's "
              "buffer cap as its window", file=sys.stderr)
    doc = to_wan_record(doc, wan, connections)
    return WanRun(record=doc, losses=losses, step_times=step_times, wall_s=time.monotonic() - started,
                  returncodes=codes)


def to_wan_record(doc: dict, wan, connections: dict | None = None) -> dict:
    """Process 0's record (its inline cluster says the devices per host) -> the same run on the slice.
    connections: ConnectionSampler.summary(); under a TCP buffer cap the window the run's own
    connections were given becomes its links' window_mib (the cap's share of it depends on how
    the run drains its sockets: live/wan/connections.py)."""

    local = doc.get("cluster") or {}
    per_host = [len(h["gpus"]) for h in local.get("hosts", [])] or [1] * len(wan.hosts)
    if len(per_host) != len(wan.hosts):
        raise GeosimError(f"process 0 saw {len(per_host)} host(s), the slice has {len(wan.hosts)}")
    doc = dict(doc)
    doc["cluster"] = wan_cluster(wan, per_host, (local.get("gpus") or None))
    doc.pop("scenario", None)
    window_note = ""
    if connections:
        window_kib = connections["window_bytes"] / 1024
        doc["measured"] = dict(doc.get("measured") or {}, tcp_window_kib=round(window_kib, 3))
        if (wan.extra or {}).get("tcp_window_kib"):
            for link in doc["cluster"]["links"]:
                link["window_mib"] = round(window_kib / 1024, 6)
            window_note = f"; window_mib: the run's own connections' ({window_kib:.1f} KiB, read with ss)"
    bw = f"{wan.bandwidth_mbit:g} Mbit/s per host" if wan.bandwidth_mbit else "no bandwidth cap"
    note = (f"emulated WAN slice {wan.id}: {len(wan.hosts)} namespaces, RTT {wan.rtt_ms[0][1]:g} ms, {bw}"
            + (f", jitter {wan.jitter_ms:g} ms" if wan.jitter_ms else "") + (f", loss {wan.loss:g}" if wan.loss else "")
            + (f", TCP window {wan.extra['tcp_window_kib']:g} KiB" if (wan.extra or {}).get("tcp_window_kib") else ""))
    note += window_note
    doc["note"] = f"{doc['note']}; {note}" if doc.get("note") else note
    validate(doc, "geosim live run --hosts wan")  # the record must be one calibrate can read
    return doc


def append(path: str, doc: dict) -> None:

    append_record(path, validate(doc, path))


def _tail(lines: list[str], n: int = 3) -> str:
    useful = [line for line in lines if line.strip()][-n:]
    return " | ".join(useful)[-600:] or "(no output)"
