"""The jax runtime's fixed costs, measured: what one jitted step and one gloo collective inside it
cost on this machine, with no network in the way (two processes on loopback).

The simulator's `jax` runtime (geosim/data/runtimes.toml) charges every step `iteration_s` and every
collective `collective_launch_s` on top of compute and the link's transfer. Fitting those two to
runs far apart in RTT cannot identify them (there a step is seconds of round trips and they are
1-4% of it), so they are measured here directly:

- a jitted step that does almost nothing (one tiny add) and returns a scalar: `iteration_s`, the
  dispatch, the host sync and the Python around `technique.step`;
- the same step with K small all-reduces inside one program (shard_map + psum over the 2
  processes' devices, each on its own value so XLA cannot merge them), K = 0 and K = 32: the
  slope is the cost of one small collective through XLA:CPU and gloo on loopback, which is what
  Shard's compiled step makes ~100 of;
- the same 32 psums chained (each one's input depends on the previous result), and 32 of an
  activation's size, both ways: whether the program's independent collectives overlap;
- one all-reduce of S bytes for a few sizes: the cost per byte beyond loopback's transfer (the
  reduction and copies on the CPU).

What the simulator charges for such a collective besides its launch cost (the TCP model's per-message
cost, its round trips and bytes) is already inside the measured figure: a collective on loopback goes
through the same socket calls. So `collective_launch_s` is the measured cost per small collective net
of what the simulator's TCP model charges for that same collective (transport_share_s: the
measurement's own 32 psums of 256 values between two ranks, simulated over a loopback link); the
gross figure is printed beside it (`collective_launch_gross_s`).

On a loaded machine every collective waits for both processes to be scheduled (at load 6 on 2
cores a small one took 3.4-7.3 ms, against 0.26 ms at load 1.3): measure on a quiet one.

`python -m geosim.live.train.collective_costs` runs both processes and prints one JSON object
(the medians of `--repeat` timed programs after warm-up); each process is one CPU device.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

SIZES = (1024, 262_144, 1_048_576, 6_616_064)  # bytes: a bias, an activation, 1 MiB, small-wan's gradient
SMALL_COUNT = 32
SMALL_ELEMENTS = 256  # values in each of the small psums (1 KiB of fp32)
# loopback as the simulator's TCP model sees it: a round trip of 12 us (TCP_NODELAY ping-pong between two
# Python sockets on 127.0.0.1, median of 2,000, this machine) and a rate that makes 1 KiB's serialization
# negligible (0.4 us at 20 Gbit/s); the per-message cost is the model's own (transport.per_message_overhead_us)
LOOPBACK_RTT_S = 12e-6
LOOPBACK_BPS = 20e9


def _worker(process_id: int, coordinator: str, repeat: int) -> dict:
    from geosim.live.train.distributed import configure_cpu_devices, initialize

    configure_cpu_devices(1)
    initialize(coordinator, 2, process_id)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    sharding = NamedSharding(mesh, P("x"))

    def program(count: int, elements: int, chained: bool = False):
        def body(x):
            # count separate psums, each on its own slice (a different value), so none are merged;
            # chained: each psum's input depends on the previous one's result, so none can run beside another
            outs, carry = [], 0.0
            for i in range(count):
                outs.append(jax.lax.psum(x[i:i + elements] * (i + 1) + carry, "x"))
                if chained:
                    carry = outs[-1][0] * 1e-9
            return sum(o.sum() for o in outs) + x.sum() if outs else x.sum()

        mapped = jax.shard_map(lambda x: body(x)[None], mesh=mesh, in_specs=P("x"), out_specs=P("x"))
        return jax.jit(mapped)

    def timed(count: int, elements: int, chained: bool = False) -> float:
        fn = program(count, elements, chained)
        local = np.ones((count + elements,), np.float32)
        x = jax.make_array_from_process_local_data(sharding, local)
        float(fn(x).addressable_data(0)[0])  # compile, first run
        times = []
        for _ in range(3 + repeat):
            t = time.perf_counter()
            float(fn(x).addressable_data(0)[0])
            times.append(time.perf_counter() - t)
        return statistics.median(times[3:])

    out = {"step_s": timed(0, 1), f"step_{SMALL_COUNT}_small_s": timed(SMALL_COUNT, 256),
           f"step_{SMALL_COUNT}_small_chained_s": timed(SMALL_COUNT, 256, chained=True),
           f"step_{SMALL_COUNT}_activation_s": timed(SMALL_COUNT, 65536),
           f"step_{SMALL_COUNT}_activation_chained_s": timed(SMALL_COUNT, 65536, chained=True)}
    for size in SIZES:
        out[f"allreduce_{size}_s"] = timed(1, size // 4)
    return out


def transport_share_s(params=None, count: int = SMALL_COUNT, elements: int = SMALL_ELEMENTS) -> float:
    """Seconds per collective the simulator's TCP model charges for the measurement's own small psums: `count`
    all-reduces of `elements` fp32 values between two ranks on two hosts joined by loopback, the jax
    runtime's round trips applied, no launch cost. The part of a measured loopback collective the model
    already prices; the rest is the runtime's launch cost."""
    from geosim.inputs.params import load_params
    from geosim.inputs.runtime import shipped_runtimes
    from geosim.sim.engine import run_schedule
    from geosim.sim.network import network_backend
    from geosim.sim.schedule import Collective, Device, Schedule
    from geosim.inputs.specs import GPU, Cluster, Host, Link, Workload

    params = shipped_runtimes()["jax"].applied_to(params or load_params(None))
    gpu = GPU("CPU", memory_gib=1.0, memory_bandwidth_gbs=20.0, fp32_tflops=0.1, fp16_tensor_tflops=0.1, pcie_gen=3)
    hosts = tuple(Host(name, "loopback", (gpu,)) for name in ("a", "b"))  # no compute runs: the device is a label
    cluster = Cluster("loopback", hosts, (Link("a", "b", LOOPBACK_RTT_S, LOOPBACK_BPS),))
    devices = [Device(i, h.name, 0, gpu) for i, h in enumerate(hosts)]
    program = [Collective("allreduce", (0, 1), elements * 4.0, "ring", ("psum", i), "psum") for i in range(count)]
    schedule = Schedule("loopback psums", devices, {d.rank: list(program) for d in devices}, {0: 0.0, 1: 0.0})
    workload = Workload(global_batch=2, microbatches=1, runtime="jax")
    result = run_schedule(schedule, cluster, params, workload, iterations=3, network=network_backend("tcp"))
    return result.iteration_time(2) / count


def measure(repeat: int = 30, timeout_s: float = 300.0) -> dict:
    """Both processes on loopback; process 0's figures, derived costs beside them (seconds)."""
    from geosim.live.train.distributed import free_port

    coordinator = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = [subprocess.Popen([sys.executable, "-m", "geosim.live.train.collective_costs", "--worker", str(i),
                               coordinator, str(repeat)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for i in range(2)]
    try:
        outs = [p.communicate(timeout=timeout_s) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        raise RuntimeError("collective cost workers failed: " + " | ".join(e[-400:] for _, e in outs))
    raw = json.loads(outs[0][0].strip().splitlines()[-1])
    gross = (raw[f"step_{SMALL_COUNT}_small_s"] - raw["step_s"]) / SMALL_COUNT
    share = transport_share_s()
    small = max(0.0, gross - share)
    big, little = SIZES[-1], SIZES[0]
    per_mib = max(0.0, (raw[f"allreduce_{big}_s"] - raw[f"allreduce_{little}_s"]) / ((big - little) / 2**20))
    chained = (raw[f"step_{SMALL_COUNT}_small_chained_s"] - raw["step_s"]) / SMALL_COUNT
    return {**raw, "iteration_s": raw["step_s"], "collective_launch_s": small, "collective_launch_gross_s": gross,
            "transport_share_s": share, "collective_launch_chained_s": chained,
            "collective_s_per_mib": per_mib,
            "load": os.getloadavg()[0], "cores": os.cpu_count()}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        print(json.dumps(_worker(int(argv[1]), argv[2], int(argv[3]))), flush=True)
        return 0
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 30
    before = os.getloadavg()[0]
    result = measure(repeat)
    print(json.dumps(result, indent=1))
    if max(before, result["load"]) > (os.cpu_count() or 1):
        # measured at load 6 on 2 cores: 3.4-7.3 ms a small collective, against 0.26 ms at load 1.3
        print(f"warning: the 1-minute load ({max(before, result['load']):.1f}) was above the {os.cpu_count()} cores: "
              f"every collective waits for both processes to be scheduled; measure on a quiet machine",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
