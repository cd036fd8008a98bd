"""XLA:CPU's speed on this machine, measured: what the `jax` runtime's CPU compute constants are.

The simulator times a step as an op-level roofline (geosim/sim/compute.py): each GEMM at a rate,
each streaming kernel at a bandwidth, each kernel paying a fixed gap. On live's CPU devices those
three constants are measured here, not fitted to the training runs they then predict:

- N worker processes (default 2, as a 2-host slice of the WAN emulator puts two hosts on this
  machine) each jit live's own train step (live/train/model.py: value_and_grad of the loss, then
  AdamW) on one CPU device, and Adam's update alone;
- all workers time the same thing in the same wall-clock window, so each has the share of the cores
  an emulated host has while every host computes (a live step on a slice computes on every host at
  once: Data's and ZeRO-2's halves of the batch, Shard's halves of each layer, and live's GPipe scan,
  where every stage computes on every tick);
- the median step at each batch size and the update's median are fitted with the op-level model's
  kernels for that step (Work: embedding, blocks, head, forward and backward, then Adam): the GEMM
  fraction, the memory fraction and the per-kernel gap, on log time. gemm_half_us stays 0: a fixed
  cost per GEMM and one per kernel cannot be told apart from batch sizes.

    python -m geosim.live.experiments.cpu_compute [--processes 2] [--batches 1,2,4,8,16] [--out FILE] [--json]

prints the table and the constants; --out writes them as a parameters file ([runtime.jax.device_compute.CPU])
that `--params` takes. geosim/data/runtimes.toml ships the values measured on the machine named in
docs/results/2026-11-26-cpu-compute.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import statistics
import subprocess
import sys
import time
from dataclasses import replace

from geosim.base.errors import GeosimError

DEFAULT_BATCHES = (1, 2, 4, 8, 16)
WINDOW_S = 2.0  # each measurement's wall-clock window, the same for every worker
SETTLE_S = 0.2  # a window's first part is left out: the workers start their loops at slightly different times
# live's generated data is tokenized as bytes (live/train/corpus.py): the model's vocabulary is 257, not the
# catalog's 50257, and the head's GEMM is that much smaller
BYTES_VOCAB = 257


# -- a worker: one process, one CPU device ------------------------------------------------

def _worker(model_name: str, batches: list[int], seq_len: int | None, vocab: int) -> None:
    import jax
    import jax.numpy as jnp
    import optax

    from geosim.live.train.model import GPTConfig, init_params, loss_fn, optimizer
    from geosim.inputs.scenario import get_model

    spec = get_model(model_name)
    cfg = GPTConfig(spec.n_layer, spec.n_embd, spec.n_head, vocab, seq_len or spec.n_ctx)
    tx = optimizer()
    params = init_params(cfg, 0)
    state = tx.init(params)

    @jax.jit
    def step(p, s, batch):
        loss, grads = jax.value_and_grad(lambda q: loss_fn(cfg, q, batch))(p)
        updates, s = tx.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    @jax.jit
    def update(p, s, grads):
        updates, s = tx.update(grads, s, p)
        return optax.apply_updates(p, updates), s

    grads = jax.tree.map(jnp.ones_like, params)
    work = [("step", b, lambda p, s, x=jnp.zeros((b, cfg.n_ctx + 1), jnp.int32): step(p, s, x)) for b in batches]
    work.append(("update", 0, lambda p, s: (*update(p, s, grads), None)))
    for _, _, run in work:  # compile and warm every program before the first window
        for _ in range(3):
            params, state, _ = run(params, state)
            jax.block_until_ready(params)
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    out = []
    for i, (kind, batch, run) in enumerate(work):
        begin, end = start + i * WINDOW_S + SETTLE_S, start + (i + 1) * WINDOW_S
        while time.time() < begin:
            time.sleep(0.0005)
        times = []
        while True:
            t0 = time.perf_counter()
            wall = time.time()
            params, state, _ = run(params, state)
            jax.block_until_ready(params)
            dt = time.perf_counter() - t0
            if wall + dt > end:
                break
            times.append(dt)
        out.append({"kind": kind, "batch": batch, "median_s": statistics.median(times) if times else None,
                    "count": len(times)})
    print(json.dumps(out), flush=True)


# -- the parent: start the workers, align their windows, collect ---------------------------

def measure(processes: int = 2, batches=DEFAULT_BATCHES, model: str = "small-wan", seq_len: int | None = None,
            vocab: int = BYTES_VOCAB, timeout_s: float = 600.0, log=lambda line: None) -> dict:
    """{"steps": {batch: median seconds}, "update_s": ..., "per_worker": [...]}: each figure the median over
    the workers of each worker's median in the shared window."""
    argv = [sys.executable, "-m", "geosim.live.experiments.cpu_compute", "--worker", "--model", model,
            "--batches", ",".join(str(b) for b in batches), "--vocab", str(vocab)] + (["--seq-len", str(seq_len)] if seq_len else [])
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)  # one CPU device a process, as a host of an emulated slice runs
    workers = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
               for _ in range(processes)]
    try:
        deadline = time.monotonic() + timeout_s
        for w in workers:  # each compiles its programs, then says so
            if not select.select([w.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise GeosimError(f"workers not ready within {timeout_s:g} s", key="cpu_compute")
            line = w.stdout.readline().strip()
            if line != "ready":
                raise GeosimError(f"a worker did not start (said {line!r}; exit {w.poll()})", key="cpu_compute")
        log(f"{processes} worker(s) compiled; timing {len(batches) + 1} windows of {WINDOW_S:g} s")
        start = time.time() + 0.5
        for w in workers:
            w.stdin.write(f"{start!r}\n")
            w.stdin.flush()
        results = []
        for w in workers:
            try:
                out, _ = w.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise GeosimError(f"a worker did not finish within {timeout_s:g} s", key="cpu_compute") from None
            if w.returncode != 0:
                raise GeosimError(f"a worker failed (exit {w.returncode})", key="cpu_compute")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    steps = {}
    for b in batches:
        found = [r["median_s"] for res in results for r in res if r["kind"] == "step" and r["batch"] == b]
        if None in found:
            raise GeosimError(f"batch {b}: a step did not fit in a {WINDOW_S:g} s window", key="--batches")
        steps[b] = statistics.median(found)
    update = statistics.median(r["median_s"] for res in results for r in res if r["kind"] == "update")
    return {"steps": steps, "update_s": update, "per_worker": results, "processes": processes, "model": model,
            "seq_len": seq_len, "vocab": vocab}


# -- the fit: the op-level model's constants for this device --------------------------------

def step_seconds(eff, model, batch: int, seq_len: int, gpu) -> tuple[float, float]:
    """(one device's whole train step, Adam's update alone) as geosim.sim.compute times them."""
    from geosim.sim.compute import KernelTimer, Work

    timer = KernelTimer(eff)
    passes = sum(timer.seconds(Work(phase, model, batch, seq_len, model.n_layer, head=True, embedding=True), gpu, "fp32")
                 for phase in ("forward", "backward"))
    update = timer.seconds(Work("optimizer", model, params=model.num_params), gpu, "fp32")
    return passes + update, update


def fit_constants(steps: dict, update_s: float, model, seq_len: int, gpu) -> dict:
    """Least squares on log(model / measured) over the steps and the update: the constants and each point's error."""
    from scipy.optimize import least_squares

    from geosim.inputs.specs import ComputeConstants

    def eff(x):
        return ComputeConstants(gemm_fraction=x[0], gemm_half_s=0.0, memory_fraction=x[1], kernel_s=x[2] * 1e-6)

    def residuals(x):
        e = eff(x)
        out = [math.log(step_seconds(e, model, b, seq_len, gpu)[0] / t) for b, t in steps.items()]
        return out + [math.log(step_seconds(e, model, 1, seq_len, gpu)[1] / update_s)]

    best = None
    for start in ((0.5, 0.5, 5.0), (1.0, 1.0, 20.0), (2.0, 2.0, 1.0)):
        r = least_squares(residuals, start, bounds=([1e-4, 1e-4, 0.0], [10.0, 10.0, 1e4]))
        if best is None or r.cost < best.cost:
            best = r
    e = eff(best.x)
    rows = [{"batch": b, "measured_s": t, "model_s": step_seconds(e, model, b, seq_len, gpu)[0]} for b, t in steps.items()]
    rows.append({"batch": "update", "measured_s": update_s, "model_s": step_seconds(e, model, 1, seq_len, gpu)[1]})
    for row in rows:
        row["error"] = row["model_s"] / row["measured_s"] - 1
    rms = math.sqrt(statistics.fmean(v * v for v in best.fun))
    return {"gemm_fraction": float(best.x[0]), "gemm_half_us": 0.0, "memory_fraction": float(best.x[1]),
            "kernel_us": float(best.x[2]), "rms_log_error": rms, "rows": rows}


def cpu_device():
    """The CPU device a live record of one device a host describes (live/train/record.py): the
    constants are fractions of its nominal figures, so they apply to the records' [gpus.CPU]."""
    from geosim.live.train.record import cpu_gpu_table
    from geosim.inputs.specs import GPU

    table = dict(cpu_gpu_table(1)["CPU"])
    table.pop("name")
    return GPU(name="CPU", **table)


def params_text(constants: dict, measured: dict, gpu_name: str) -> str:
    """A parameters file setting the jax runtime's CPU constants (what `--params` reads)."""
    keys = ("gemm_fraction", "gemm_half_us", "memory_fraction", "kernel_us")
    lines = [f"# measured by python -m geosim.live.experiments.cpu_compute: {measured['processes']} process(es), "
             f"{measured['model']} (vocab {measured['vocab']}), steps at batch {', '.join(str(b) for b in measured['steps'])}",
             "[runtime.jax.device_compute.CPU]"]
    lines += [f"{k} = {constants[k]:.4g}" for k in keys]
    return "\n".join(lines) + "\n"


def print_rows(rows: list[dict], label: str, *, width: int, digits: int, indent: str = "") -> None:
    """A fit's table: each row's label (its `label` key), measured and model time in ms, and the error."""
    print(f"{indent}{label:<{width}} {'measured ms':>12} {'model ms':>9} {'error':>7}")
    for row in rows:
        print(f"{indent}{str(row[label])[:width]:<{width}} {row['measured_s'] * 1e3:12.{digits}f} "
              f"{row['model_s'] * 1e3:9.{digits}f} {row['error']:+7.1%}")

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m geosim.live.experiments.cpu_compute", description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=2, help="workers timing at once (default: %(default)s)")
    ap.add_argument("--batches", default=",".join(str(b) for b in DEFAULT_BATCHES),
                    help="batch sizes (sequences) to time (default: %(default)s)")
    ap.add_argument("--model", default="small-wan", help="a built-in model (default: %(default)s)")
    ap.add_argument("--seq-len", type=int, default=None, help="tokens a sequence (default: the model's context)")
    ap.add_argument("--vocab", type=int, default=BYTES_VOCAB,
                    help="vocabulary size (default: %(default)s, the byte tokenizer's, what live runs on generated data)")
    ap.add_argument("--out", default=None, help="write the constants as a parameters file here")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",")]
        if not batches or min(batches) < 1 or len(set(batches)) != len(batches):
            raise ValueError
    except ValueError:
        print(f"geosim: error: --batches: must be distinct positive whole numbers, got {args.batches!r}", file=sys.stderr)
        return 2
    if args.worker:
        _worker(args.model, batches, args.seq_len, args.vocab)
        return 0
    try:
        from geosim.base.fileio import check_output_path, write_atomic
        from geosim.inputs.scenario import get_model

        if args.out:
            check_output_path(args.out, "--out")  # before the minutes of timing, not after

        if not 1 <= args.processes <= 64:
            raise GeosimError(f"must be in 1..64, got {args.processes}", key="--processes")
        if not 2 <= args.vocab <= 1_000_000:
            raise GeosimError(f"must be in 2..1000000, got {args.vocab}", key="--vocab")
        model = replace(get_model(args.model), vocab=args.vocab)
        seq_len = args.seq_len or model.n_ctx
        gpu = cpu_device()
        log = (lambda line: None) if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
        measured = measure(args.processes, batches, args.model, args.seq_len, args.vocab, log=log)
        constants = fit_constants(measured["steps"], measured["update_s"], model, seq_len, gpu)
        if args.out:
            write_atomic(args.out, params_text(constants, measured, gpu.name))
    except GeosimError as exc:
        print(f"geosim: error: {exc}", file=sys.stderr)
        return 2
    report = {"processes": args.processes, "model": args.model, "seq_len": seq_len, "vocab": args.vocab,
              "device": gpu.name,
              "load": os.getloadavg()[0], **{k: constants[k] for k in ("gemm_fraction", "gemm_half_us",
                                                                     "memory_fraction", "kernel_us", "rms_log_error")},
              "rows": constants["rows"], "out": args.out}
    if args.json:
        print(json.dumps(report, allow_nan=False))
        return 0
    print(f"XLA:CPU on {gpu.name}, {args.processes} process(es) at once, {args.model} (seq {seq_len}, vocab {args.vocab}), "
          f"load {report['load']:.2f}")
    print_rows(constants["rows"], "batch", width=7, digits=2)
    print(f"fitted: gemm_fraction {constants['gemm_fraction']:.4g}, memory_fraction {constants['memory_fraction']:.4g}, "
          f"kernel_us {constants['kernel_us']:.4g} (gemm_half_us 0); rms log error {constants['rms_log_error']:.3f}")
    if args.out:
        print(f"wrote {args.out}: pass it as --params")
    return 0


if __name__ == "__main__":
    sys.exit(main())
