"""XLA's own buffer assignment for live's GPT-2 train step, compiled and never run.

`jax.jit(step).lower(...).compile().memory_analysis()` gives, per device, the bytes of the
arguments (weights, optimizer state, batch), of the outputs, of the outputs aliased onto
donated arguments, and of the temporaries (one heap, packed by XLA's liveness analysis).
A device's peak is arguments + outputs - aliased + temporaries.

Two compilers:
- "gpu": XLA's CUDA compiler, ahead of time for a GPU that is not here (the jax-cuda12
  plugin with a target config: an A100's description, below). No CUDA driver is needed to
  compile. This is the layout a GPU run gets.
- "cpu": the host backend on N virtual devices (XLA_FLAGS=--xla_force_host_platform_device_count).
  It differs from the GPU's: 16-bit dots and reductions are widened to fp32 (the CPU has no
  16-bit GEMMs), there is no reduce-scatter (all-reduce, then a slice), and fusion differs.

Nothing is allocated: the state and the batch are abstract (shape, dtype, sharding), so
gpt2-large compiles on a laptop. Run one configuration of devices per process (the device
count is fixed when JAX starts): `python -m geosim.live.train.compiled_memory` reads cases
as JSON lines on stdin and prints one JSON line per case (bench/bench_memory.py drives it).
"""

from __future__ import annotations

import json
import os
import sys
import time

def xla_target(description: str, *, sms: int, fpus_per_sm: int, shared_per_sm: int, shared_optin: int,
               l2_bytes: int, bandwidth: int, clock_ghz: float, memory_bytes: int, compute_major: int) -> str:
    """A GPU as XLA's GPU compiler describes its target (GpuTargetConfigProto, text form): the fields
    XLA's own gpu_specs/*.txtpb list. Only the figures below differ between the cards used here."""
    return f"""gpu_device_info {{
  threads_per_block_limit: 1024 threads_per_warp: 32 shared_memory_per_block: 49152
  shared_memory_per_core: {shared_per_sm} threads_per_core_limit: 2048 core_count: {sms} fpus_per_core: {fpus_per_sm}
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535
  memory_bandwidth: {bandwidth} l2_cache_size: {l2_bytes} clock_rate_ghz: {clock_ghz:g}
  device_memory_size: {memory_bytes} shared_memory_per_block_optin: {shared_optin}
  cuda_compute_capability {{ major: {compute_major} }} registers_per_core_limit: 65536 registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 1 patch: 0 }}
device_description_str: "{description}"
"""


# An A100-SXM4-40GB: the datasheet's 108 SMs, 40 MiB L2, 1555 GB/s, compute capability 8.0 (gpu_specs/a100_sxm_40)
A100_TARGET = xla_target("NVIDIA A100-SXM4-40GB", sms=108, fpus_per_sm=64, shared_per_sm=167936, shared_optin=166912,
                         l2_bytes=41943040, bandwidth=1555200000000, clock_ghz=1.41, memory_bytes=42331013120,
                         compute_major=8)
# An H100-SXM5-80GB (sm_90, Hopper), as gpu_specs/h100_sxm lists it: 132 SMs, 50 MiB L2, 3.35 TB/s. XLA fuses
# differently for it (live's 16-bit softmax keeps less), and its buffer assignment of live's gpt2 and gpt2-medium
# step matched an H200's allocator peak within 0.2%.
H100_TARGET = xla_target("NVIDIA H100 80GB HBM3", sms=132, fpus_per_sm=128, shared_per_sm=233472,
                         shared_optin=232448, l2_bytes=52428800, bandwidth=3352320000000, clock_ghz=1.98,
                         memory_bytes=84987740160, compute_major=9)
# backend -> (target name, target, the catalog GPU it is: geosim's model is told its generation, gpu_generation):
# "gpu" is the A100 the grid was first run on
GPU_TARGETS = {"gpu": ("a100", A100_TARGET, "A100-40GB"), "gpu-h100": ("h100", H100_TARGET, "H100")}


def gpu_generation(backend: str) -> str:
    """The GPU generation of a backend's compile target (the catalog's), '' for the CPU backend."""
    if backend not in GPU_TARGETS:
        return ""
    from geosim.inputs.scenario import gpu_catalog

    return gpu_catalog()[GPU_TARGETS[backend][2]].architecture


def prepare_environment(backend: str, devices: int) -> None:
    """Before JAX starts: N host devices (cpu), or the CUDA plugin without a driver (gpu)."""
    if "jax" in sys.modules:
        raise RuntimeError("prepare_environment must run before JAX is imported")
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
    os.environ["JAX_PLATFORMS"] = "cpu"  # run nothing on a GPU; the CUDA plugin still compiles for one
    if backend in GPU_TARGETS:
        os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"  # no CUDA runtime here: compile only


def gpu_devices(count: int, backend: str = "gpu") -> list:
    """Compile-only devices of `count` GPUs of the backend's target (A100 or H100) on one host, or ImportError
    saying what is missing."""
    from jax.experimental import topologies

    name, target, _ = GPU_TARGETS[backend]
    try:
        topology = topologies.get_topology_desc(platform="cuda", topology_name=name,
                                                target_config=target, topology=f"1x1x{count}")
    except Exception as exc:  # no plugin: "Unknown backend", or an older plugin without deviceless topologies
        raise ImportError(f"XLA's GPU compiler is not available here ({type(exc).__name__}: {str(exc)[:200]}); "
                          f"install the xla-gpu extra (jax-cuda12-plugin, jax-cuda12-pjrt)") from exc
    return list(topology.devices)


def _state_shardings(technique, mesh):
    """The shardings live gives the state: the technique's own (shard, pipeshard, zero2), else replicated."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    replicated = NamedSharding(mesh, P())
    params = getattr(technique, "_param_shardings", None)
    opt = getattr(technique, "_opt_shardings", None)
    if opt is None and getattr(technique, "_opt_in_specs", None) is not None:
        opt = jax.tree.map(lambda spec: NamedSharding(mesh, spec), technique._opt_in_specs)
    return params, opt, replicated


def compile_case(case: dict, devices: list) -> dict:
    """Compile one case ({technique, model, precision, remat, global_batch, microbatches, stages,
    seq_len}) on `devices`; XLA's figures per device, in bytes."""
    started = time.perf_counter()
    compiled = compiled_step(case, devices)
    m = compiled.memory_analysis()
    peak = m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes
    return {"argument": m.argument_size_in_bytes, "output": m.output_size_in_bytes, "alias": m.alias_size_in_bytes,
            "temp": m.temp_size_in_bytes, "peak": peak, "compile_s": round(time.perf_counter() - started, 2)}


def compiled_step(case: dict, devices: list):
    """live's train step for one case, lowered and compiled on `devices` (abstract state: nothing allocated);
    also what live/train/compiled_collectives.py reads the collectives from."""
    import jax
    import jax.numpy as jnp

    from geosim.live.train import techniques
    from geosim.live.train.model import GPT, GPTConfig, optimizer
    from geosim.inputs.scenario import get_model
    from geosim.inputs.specs import Model

    spec = Model(name=case["model"], **case["dims"]) if case.get("dims") else get_model(case["model"])
    n_ctx = case.get("seq_len") or spec.n_ctx
    cfg = GPTConfig(spec.n_layer, spec.n_embd, spec.n_head, spec.vocab, n_ctx, case["precision"],
                    remat=bool(case.get("remat")))
    setup = techniques.Setup(cfg, optimizer(), case["global_batch"], case["microbatches"],
                             stages=case.get("stages"), devices=devices)
    technique = techniques.get(case["technique"], setup)
    params = jax.eval_shape(lambda: GPT(cfg).init(jax.random.PRNGKey(0), jnp.zeros((1, n_ctx), jnp.int32))["params"])
    state = jax.eval_shape(technique.init, params)  # sets the technique's layout, allocates nothing
    param_sh, opt_sh, replicated = _state_shardings(technique, technique.mesh)
    place = lambda tree, sh: jax.tree.map(  # noqa: E731
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree,
        sh if sh is not None else jax.tree.map(lambda _: replicated, tree))
    state = (place(state[0], param_sh), place(state[1], opt_sh))
    batch = jax.ShapeDtypeStruct((case["global_batch"], n_ctx + 1), jnp.int32, sharding=technique.batch_sharding())
    return technique.step_fn().lower(*state, batch).compile()


def main() -> int:
    """`python -m geosim.live.train.compiled_memory BACKEND DEVICES`: XLA's memory figures of the cases
    read as JSON lines on stdin, one JSON line each."""
    return serve(sys.argv[1], int(sys.argv[2]), compile_case)


def serve(backend: str, count: int, answer) -> int:
    """The worker's loop: `count` devices of `backend`, then answer(case, devices) for each case read as
    a JSON line on stdin, printed as one JSON line (also compiled_collectives' worker)."""
    prepare_environment(backend, count)
    import warnings

    warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
    if backend in GPU_TARGETS:
        try:
            devices = gpu_devices(count, backend)
        except ImportError as exc:
            print(json.dumps({"error": str(exc)}), flush=True)
            return 3
    else:
        import jax

        devices = jax.devices()[:count]
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        try:
            result = answer(case, devices)
        except Exception as exc:  # one case failing (a shape that does not divide) must not lose the others
            result = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(json.dumps({**case, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --- beside geosim's model ------------------------------------------------------------------------

def geosim_bytes(case: dict, devices: int, architecture: str = "") -> dict[str, float]:
    """geosim's memory model for the same case, by part, without the workspace (XLA's figure does not
    hold the CUDA context or the allocator's slack either), for the GPU generation compiled for."""
    from geosim.live.train.memory import layout
    from geosim.inputs.scenario import get_model
    from geosim.inputs.specs import Model

    model = Model(name=case["model"], **case["dims"]) if case.get("dims") else get_model(case["model"])
    return layout(case["technique"], n_layer=model.n_layer, n_embd=model.n_embd, n_head=model.n_head,
                  vocab=model.vocab, n_ctx=case.get("seq_len") or model.n_ctx, precision=case["precision"],
                  global_batch=case["global_batch"], microbatches=case["microbatches"], devices=devices,
                  stages=case.get("stages"), remat=bool(case.get("remat")), architecture=architecture)


def cpu_correction(case: dict, devices: int) -> float:
    """Bytes the CPU backend's layout holds beyond the GPU's, added to geosim's figure when comparing with
    a CPU compile (the model itself is the GPU's). Only for fp32 cases: the CPU widens 16-bit dots to
    fp32, which no correction per part captures, so 16-bit cases are compared on the GPU compiler only.
    ZeRO-2: the CPU has no reduce-scatter; it all-reduces the whole flat gradient and slices it, so the
    whole reduced gradient (fp32) is live beside the slice."""
    from geosim.inputs.scenario import get_model
    from geosim.inputs.specs import Model

    if case["precision"] != "fp32":
        raise ValueError("16-bit cases are compared on XLA's GPU compiler only (the CPU widens them to fp32)")
    from geosim.live.registry import placement as placement_of

    model = Model(name=case["model"], **case["dims"]) if case.get("dims") else get_model(case["model"])
    placement = placement_of(case["technique"])(model, case["global_batch"], case["microbatches"], devices, case.get("stages"))
    if not placement.tree_accumulator and devices > 1:  # a reduce-scatter into a flat shard, on GPUs
        return 4.0 * placement.microbatch_grads * (1 - 1 / devices)
    return 0.0


def run_cases(backend: str, devices: int, cases: list[dict], timeout_s: float = 3600.0, each=None,
              worker: str = "geosim.live.train.compiled_memory") -> list[dict]:
    """Compile `cases` in a fresh process with `devices` devices of `backend`; XLA's figures per case
    (or what another `worker` module's serve() answers: compiled_collectives') or {"error": ...}, each
    also handed to `each` as it comes. The device count is fixed when JAX starts, hence the process."""
    import subprocess
    import tempfile

    rows = []
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen([sys.executable, "-m", worker, backend, str(devices)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True)
        try:
            proc.stdin.write("".join(json.dumps(c) + "\n" for c in cases))
            proc.stdin.close()
            started = time.monotonic()
            for line in proc.stdout:
                if line.startswith("{"):
                    rows.append(json.loads(line))
                    if each is not None:
                        each(rows[-1])
                if time.monotonic() - started > timeout_s:
                    raise subprocess.TimeoutExpired(proc.args, timeout_s)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if proc.returncode and not rows:
            errors.seek(0)
            raise RuntimeError(f"compile process failed ({proc.returncode}): {errors.read()[-500:]}")
    return rows
