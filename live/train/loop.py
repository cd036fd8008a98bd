"""One measured training run: data, model, technique, timed steps -> a Result.

Runs the same in a single process and in each process of a multi-host run (every
process executes this with the same options; process 0 reports). Failures are results,
not crashes: out-of-memory and other runtime errors come back with a status, and
Ctrl-C keeps the steps measured so far.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

from geosim.base.errors import GeosimError, require
from geosim.inputs.scenario import get_model


@dataclass
class Options:
    technique: str = "data"
    model: str = "tiny"
    steps: int | None = None  # None: epochs * steps per epoch (20 steps if epochs is None too)
    epochs: int | None = None
    batch: int = 8  # global batch, sequences
    microbatches: int = 1
    stages: int | None = None
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    seq_len: int | None = None  # None: the model's context
    seed: int = 0
    learning_rate: float = 3e-4
    data: str = "auto"
    tokenizer: str = "auto"
    warmup: int = 2  # steps excluded from the timing (after the compiled first step)
    log_every: int = 10
    memory_limit_gib: float | None = None  # per device; None: the device's own limit (CPU: the host's free memory)
    lowcomm: dict = field(default_factory=dict)  # diloco / sparseloco options (live/train/lowcomm.py)


# What a result says about the devices when the run stopped before JAX could tell.
UNKNOWN_DEVICES = {"platform": "cpu", "kind": "unknown", "count": 1, "processes": 1}
# live techniques whose step is the whole model's loss (shard and pipeshard cut GPT-2's blocks by their names)
LLAMA_TECHNIQUES = ("data", "zero2", "fsdp", "diloco", "sparseloco")


@dataclass
class Result:
    status: str = "ok"
    error: str | None = None
    losses: list = field(default_factory=list)
    step_times: list = field(default_factory=list)
    cpu_times: list = field(default_factory=list)  # the process's CPU seconds per step (all its threads)
    load_before: float | None = None  # 1-minute load average when the steps began / ended
    load_after: float | None = None
    cores: int | None = None
    fastest_iteration_s: float | None = None
    cpu_per_iteration_s: float | None = None
    compile_time_s: float | None = None
    total_time_s: float | None = None
    peak_memory_gib: float | None = None
    tokens_per_s: float | None = None
    time_per_iteration_s: float | None = None
    tflops_per_gpu: float | None = None
    model_dims: dict = field(default_factory=dict)
    workload: dict = field(default_factory=dict)
    devices: dict = field(default_factory=dict)  # platform, kind, count, processes, per-host counts
    data: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def is_out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text


def resolve_precision(precision: str, platform: str, device_kind: str) -> str:
    """auto: float32 on CPU; bfloat16 on GPUs whose generation has it (geosim/data/generations.toml: Ampere
    and newer); float16 on the others (the study's RTX 6000 and T4, the V100). A GPU the catalog does not
    know: bfloat16."""
    if precision != "auto":
        return precision
    if platform != "gpu":
        return "fp32"
    from geosim.base.generations import generation

    facts = generation(gpu_generation({"platform": platform, "kind": device_kind}))
    return "fp16" if facts is not None and not facts.bf16 else "bf16"


def device_summary(jax) -> dict:
    devices = jax.devices()
    per_host = {}
    for d in devices:
        per_host[d.process_index] = per_host.get(d.process_index, 0) + 1
    summary = {"platform": devices[0].platform, "kind": devices[0].device_kind, "count": len(devices),
               "processes": jax.process_count(), "per_host": [per_host[i] for i in sorted(per_host)]}
    try:  # the GPU's memory picks its size in the catalog (A100 40 or 80 GB)
        limit = (jax.local_devices()[0].memory_stats() or {}).get("bytes_limit")
    except Exception:
        limit = None
    if limit:
        summary["memory_gib"] = round(limit / 2**30, 2)
    return summary


def peak_memory_gib(jax) -> float | None:
    """GPUs: the allocator's peak on the busiest local device. CPU: the process's peak RSS
    (the CPU 'devices' share one address space)."""
    stats = [d.memory_stats() for d in jax.local_devices()]
    peaks = [s.get("peak_bytes_in_use") for s in stats if s]
    if peaks and all(p is not None for p in peaks):
        return max(peaks) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30


def device_limit_gib(jax, override: float | None) -> float | None:
    """Per device: the override, the accelerator's own limit, or on CPU this host's free
    memory shared by the process's CPU devices."""
    if override is not None:
        return override
    stats = jax.local_devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return stats["bytes_limit"] / 2**30
    if jax.local_devices()[0].platform == "cpu":
        from geosim.live.train.memory import host_available_gib

        free = host_available_gib()
        return free / len(jax.local_devices()) if free else None
    return None


def check_estimate(opts: Options, cfg, technique, limit_gib: float | None, architecture: str = "") -> float:
    """Refuse a run that the simulator's memory model says does not fit, before any weight is allocated
    (within the model's margin of the limit it may fit: the compiled step is checked again)."""
    from geosim.live.train.memory import estimate_gib, verdict

    need = estimate_gib(opts.technique, n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head, vocab=cfg.vocab,
                        n_ctx=cfg.n_ctx, precision=cfg.precision, global_batch=opts.batch,
                        microbatches=opts.microbatches, devices=technique.n,
                        stages=getattr(technique, "stages", None), remat=getattr(cfg, "remat", False),
                        architecture=architecture)
    if limit_gib is not None and verdict(need, limit_gib).status == "out-of-memory":
        raise MemoryError(f"RESOURCE_EXHAUSTED: out of memory: the step needs about {need:.3g} GiB per device "
                          f"(geosim's memory model, before allocating), the limit is {limit_gib:.3g} GiB")
    return need


def check_memory(compiled, limit_gib: float | None):
    """Refuse a step that cannot fit before running it: on CPU an oversized step would
    meet the kernel's OOM killer (no error to record); on GPUs XLA would fail anyway."""
    if limit_gib is None:
        return
    try:
        m = compiled.memory_analysis()
        need = (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes) / 2**30
    except Exception:  # not every backend reports it
        return
    if need > limit_gib:
        raise MemoryError(f"RESOURCE_EXHAUSTED: out of memory: the compiled step needs {need:.3g} GiB per device, "
                          f"the limit is {limit_gib:.3g} GiB")


@contextlib.contextmanager
def still_compiling(log, every_s: float = 15.0):
    """While the block runs, `log` a line every `every_s` seconds saying it is still compiling."""
    if not log:
        yield
        return
    done = threading.Event()
    started = time.perf_counter()

    def tick():
        while not done.wait(every_s):
            log(f"still compiling ({time.perf_counter() - started:.0f} s)")

    ticker = threading.Thread(target=tick, name="still-compiling", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()


def gpu_generation(devices: dict) -> str:
    """The catalog's generation of this run's GPU (a name of geosim/data/generations.toml), '' on CPU or for a GPU the catalog lacks."""
    if devices.get("platform") != "gpu":
        return ""
    from geosim.inputs.gpu_names import catalog_gpu
    from geosim.inputs.scenario import gpu_catalog

    key = catalog_gpu(devices["kind"], devices.get("memory_gib"))
    return gpu_catalog()[key].architecture if key else ""


def tf32_matmul(jax, platform: str, device_kind: str) -> bool | None:
    """Whether this run's fp32 matmuls ran on TF32 tensor cores: XLA's default precision does on GPUs of
    Ampere and newer (jax_default_matmul_precision unset or "default"/"bfloat16"/"tensorfloat32"); None on CPU."""
    if platform != "gpu":
        return None
    from geosim.base.generations import generation

    facts = generation(gpu_generation({"platform": platform, "kind": device_kind}))
    if facts is not None and not facts.tf32_tensor_cores:
        return False
    setting = str(getattr(jax.config, "jax_default_matmul_precision", None) or "default").lower()
    return setting in ("default", "bfloat16", "tensorfloat32", "fastest")


def run(opts: Options, log=print) -> Result:
    """Train and measure. SIGINT/SIGTERM (live/train/interrupts.py, when the CLI installed
    its handlers) and Ctrl-C stop the run at the next safe point with status interrupted."""

    from geosim.live.train import interrupts

    if opts.steps is not None and opts.steps <= 0:
        raise GeosimError(f"must be > 0, got {opts.steps}", key="--steps")
    if opts.epochs is not None and opts.epochs <= 0:
        raise GeosimError(f"must be > 0, got {opts.epochs}", key="--epochs")
    if opts.batch <= 0 or opts.microbatches <= 0:
        raise GeosimError("--global-batch and --microbatches must be > 0", key="--global-batch")
    spec = get_model(opts.model)
    if not spec.gpt2_shaped and opts.technique not in LLAMA_TECHNIQUES:
        raise GeosimError(f"{opts.model} is not GPT-2 shaped: live trains its Llama block with "
                          f"{', '.join(LLAMA_TECHNIQUES)} (whole-model steps); {opts.technique} cuts GPT-2's "
                          "blocks by their parameter names", key="--technique")
    n_ctx = opts.seq_len or spec.n_ctx
    result = Result(devices=dict(UNKNOWN_DEVICES))
    start = time.perf_counter()
    jax = None
    try:
        jax = require("jax", extra="live", command="geosim live run")
        from geosim.live.train import corpus
        from geosim.live.train.model import GPTConfig, alpa_flops_per_iter, init_params, optimizer
        from geosim.live.train.techniques import Setup, get

        devices = device_summary(jax)
        result.devices = devices
        precision = resolve_precision(opts.precision, devices["platform"], devices["kind"])
        dataset = corpus.load(opts.data, n_ctx, opts.tokenizer, opts.seed)
        cfg = GPTConfig(spec.n_layer, spec.n_embd, spec.n_head, dataset.vocab, n_ctx, precision,
                        shape=None if spec.gpt2_shaped else spec)
        technique = get(opts.technique, Setup(cfg, optimizer(opts.learning_rate), opts.batch, opts.microbatches,
                                              opts.stages), **(opts.lowcomm or {}))
        per_epoch = dataset.steps_per_epoch(opts.batch)
        steps = opts.steps or (opts.epochs * per_epoch if opts.epochs else 20)
        result.data = f"{dataset.source} ({dataset.tokenizer} tokens, {dataset.sequences.shape[0]} sequences)"
        result.model_dims = cfg.spec.shape_table()  # the shape the run trained (GQA, SwiGLU, ...), as records keep it
        result.devices["tf32_matmul"] = tf32_matmul(jax, devices["platform"], devices["kind"])
        result.workload = {"global_batch": opts.batch, "microbatches": opts.microbatches, "seq_len": n_ctx,
                           "tokens_per_epoch": per_epoch * opts.batch * n_ctx, "precision": precision,
                           "runtime": "jax"}  # its fixed costs: geosim/data/runtimes.toml [jax]
        if opts.epochs:
            result.workload["epochs"] = opts.epochs
        if getattr(technique, "stages", None):
            result.devices["stages"] = technique.stages
        flops = alpa_flops_per_iter(cfg, opts.batch)
        limit = device_limit_gib(jax, opts.memory_limit_gib)
        check_estimate(opts, cfg, technique, limit, gpu_generation(devices))  # before any weight exists
        interrupts.check()
        start = time.perf_counter()
        state = interrupts.call(lambda: technique.init(init_params(cfg, opts.seed)))
        batch = technique.place_batch(dataset.batch(0, opts.batch, opts.seed))
        interrupts.check()
        if log:
            log(f"compiling {opts.technique} for {devices['count']} device(s)")
        t0 = time.perf_counter()
        with still_compiling(log):  # seconds to minutes (gpt2-xl: 152 s on an H200): a line every 15 s
            compiled = interrupts.call(technique.compile, state, batch)  # a signal stops the wait
        check_memory(compiled, limit)
        interrupts.check()
        result.cores = os.cpu_count()
        result.load_before = os.getloadavg()[0]
        for step in range(steps):
            if step:
                batch = technique.place_batch(dataset.batch(step, opts.batch, opts.seed))
            t, cpu = time.perf_counter(), time.process_time()
            state, loss = technique.step(state, batch)
            loss = float(loss)  # waits for the step
            elapsed = time.perf_counter() - t
            result.cpu_times.append(time.process_time() - cpu)
            if step == 0:
                result.compile_time_s = time.perf_counter() - t0  # compilation + first step
            result.losses.append(loss)
            result.step_times.append(elapsed)
            if not math.isfinite(loss):
                raise FloatingPointError(f"loss became {loss} at step {step}")
            if log and ((step + 1) % opts.log_every == 0 or step + 1 == steps):
                log(f"step {step + 1}/{steps}  loss {loss:.4f}  {elapsed * 1e3:.1f} ms")
            interrupts.check()
    except KeyboardInterrupt:
        result.status = "interrupted"
        result.error = f"stopped by {interrupts.requested() or 'SIGINT'}"
    except GeosimError:
        raise
    except Exception as exc:  # a failed run is a measurement too (the selector probes and reads status)
        result.status = "out-of-memory" if is_out_of_memory(exc) else "failed"
        result.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:500]
    result.total_time_s = time.perf_counter() - start
    if jax is not None:
        try:
            result.peak_memory_gib = peak_memory_gib(jax)
        except Exception:
            pass
    if result.load_before is not None:
        result.load_after = os.getloadavg()[0]
    # steady state: drop the first (compiling) step and the warm-up steps, when there are more
    first = 1 + opts.warmup if len(result.step_times) > 1 + opts.warmup else 1 if len(result.step_times) > 1 else 0
    timed = result.step_times[first:]
    if timed:
        result.time_per_iteration_s = statistics.median(timed)
        result.fastest_iteration_s = min(timed)
        result.cpu_per_iteration_s = statistics.median(result.cpu_times[first:]) if result.cpu_times[first:] else None
        result.tokens_per_s = opts.batch * n_ctx / result.time_per_iteration_s
        result.tflops_per_gpu = flops / result.time_per_iteration_s / result.devices["count"] / 1e12
    if result.status == "ok" and len(result.step_times) < 1 + opts.warmup + 1:
        print(f"note: only {len(result.step_times)} steps; warm-up could not be fully excluded", file=sys.stderr)
    return result
