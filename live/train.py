"""One measured training run: data, model, technique, timed steps -> a Result.

Runs the same in a single process and in each process of a multi-host run (every
process executes this with the same options; process 0 reports). Failures are results,
not crashes: out-of-memory and other runtime errors come back with a status, and
Ctrl-C keeps the steps measured so far.
"""

from __future__ import annotations

import math
import resource
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field

from geosim.errors import GeosimError


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
    memory_limit_gib: float | None = None  # per device; None: the device's own limit


@dataclass
class Result:
    status: str = "ok"
    error: str | None = None
    losses: list = field(default_factory=list)
    step_times: list = field(default_factory=list)
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
    """auto: float32 on CPU; bfloat16 on GPUs that have it (Ampere and newer); float16 on
    older GPUs (Turing: the study's RTX 6000 and T4)."""
    if precision != "auto":
        return precision
    if platform != "gpu":
        return "fp32"
    return "fp16" if any(k in device_kind for k in ("T4", "RTX 6000", "RTX6000", "V100", "Turing")) else "bf16"


def device_summary(jax) -> dict:
    devices = jax.devices()
    per_host = {}
    for d in devices:
        per_host[d.process_index] = per_host.get(d.process_index, 0) + 1
    return {"platform": devices[0].platform, "kind": devices[0].device_kind, "count": len(devices),
            "processes": jax.process_count(), "per_host": [per_host[i] for i in sorted(per_host)]}


def peak_memory_gib(jax) -> float | None:
    """GPUs: the allocator's peak on the busiest local device. CPU: the process's peak RSS
    (the CPU 'devices' share one address space)."""
    stats = [d.memory_stats() for d in jax.local_devices()]
    peaks = [s.get("peak_bytes_in_use") for s in stats if s]
    if peaks and all(p is not None for p in peaks):
        return max(peaks) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30


def device_limit_gib(jax, override: float | None) -> float | None:
    if override is not None:
        return override
    stats = jax.local_devices()[0].memory_stats() or {}
    return stats["bytes_limit"] / 2**30 if "bytes_limit" in stats else None


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


def run(opts: Options, log=print) -> Result:
    from geosim.errors import require
    from geosim.scenario import get_model

    jax = require("jax", extra="live", command="geosim live run")
    from geosim.live import corpus
    from geosim.live.model import GPTConfig, alpa_flops_per_iter, init_params, optimizer
    from geosim.live.techniques import Setup, get

    if opts.steps is not None and opts.steps <= 0:
        raise GeosimError(f"must be > 0, got {opts.steps}", key="--steps")
    if opts.epochs is not None and opts.epochs <= 0:
        raise GeosimError(f"must be > 0, got {opts.epochs}", key="--epochs")
    if opts.batch <= 0 or opts.microbatches <= 0:
        raise GeosimError("--global-batch and --microbatches must be > 0", key="--global-batch")
    spec = get_model(opts.model)
    n_ctx = opts.seq_len or spec.n_ctx
    devices = device_summary(jax)
    precision = resolve_precision(opts.precision, devices["platform"], devices["kind"])
    result = Result(devices=devices)
    dataset = corpus.load(opts.data, n_ctx, opts.tokenizer, opts.seed)
    cfg = GPTConfig(spec.n_layer, spec.n_embd, spec.n_head, dataset.vocab, n_ctx, precision)
    technique = get(opts.technique, Setup(cfg, optimizer(opts.learning_rate), opts.batch, opts.microbatches, opts.stages))
    per_epoch = dataset.steps_per_epoch(opts.batch)
    steps = opts.steps or (opts.epochs * per_epoch if opts.epochs else 20)
    result.data = f"{dataset.source} ({dataset.tokenizer} tokens, {dataset.sequences.shape[0]} sequences)"
    result.model_dims = {"n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "n_head": cfg.n_head, "vocab": cfg.vocab, "n_ctx": cfg.n_ctx}
    result.workload = {"global_batch": opts.batch, "microbatches": opts.microbatches, "seq_len": n_ctx,
                       "tokens_per_epoch": per_epoch * opts.batch * n_ctx, "precision": precision}
    if opts.epochs:
        result.workload["epochs"] = opts.epochs
    if getattr(technique, "stages", None):
        result.devices["stages"] = technique.stages
    flops = alpa_flops_per_iter(cfg, opts.batch)

    start = time.perf_counter()
    try:
        state = technique.init(init_params(cfg, opts.seed))
        batch = technique.place_batch(dataset.batch(0, opts.batch, opts.seed))
        t0 = time.perf_counter()
        compiled = technique.compile(state, batch)
        check_memory(compiled, device_limit_gib(jax, opts.memory_limit_gib))
        for step in range(steps):
            if step:
                batch = technique.place_batch(dataset.batch(step, opts.batch, opts.seed))
            t = time.perf_counter()
            state, loss = technique.step(state, batch)
            loss = float(loss)  # waits for the step
            elapsed = time.perf_counter() - t
            if step == 0:
                result.compile_time_s = time.perf_counter() - t0  # compilation + first step
            result.losses.append(loss)
            result.step_times.append(elapsed)
            if not math.isfinite(loss):
                raise FloatingPointError(f"loss became {loss} at step {step}")
            if log and ((step + 1) % opts.log_every == 0 or step + 1 == steps):
                log(f"step {step + 1}/{steps}  loss {loss:.4f}  {elapsed * 1e3:.1f} ms")
    except KeyboardInterrupt:
        result.status = "interrupted"
    except GeosimError:
        raise
    except Exception as exc:  # a failed run is a measurement too (the selector probes and reads status)
        result.status = "out-of-memory" if is_out_of_memory(exc) else "failed"
        result.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:500]
    result.total_time_s = time.perf_counter() - start
    try:
        result.peak_memory_gib = peak_memory_gib(jax)
    except Exception:
        pass
    # steady state: drop the first (compiling) step and the warm-up steps, when there are more
    timed = result.step_times[1 + opts.warmup:] or result.step_times[1:] or result.step_times
    if timed:
        result.time_per_iteration_s = statistics.median(timed)
        result.tokens_per_s = opts.batch * n_ctx / result.time_per_iteration_s
        result.tflops_per_gpu = flops / result.time_per_iteration_s / devices["count"] / 1e12
    if result.status == "ok" and len(result.step_times) < 1 + opts.warmup + 1:
        print(f"note: only {len(result.step_times)} steps; warm-up could not be fully excluded", file=sys.stderr)
    return result
