"""Device check: both runtimes on this machine's GPU, predicted against measured (issues 33, 41).

    python bench/bench_gpu.py [--cases MODEL:BATCH:PRECISION,...] [--steps 20] [--out-dir docs/results/data]
                              [--parts torch,jax-steps,jax-attention] [--quick]

The one command for a lent H100/H200 (about 7 minutes; run from the repository root, torch installed there):

    timeout 560 python bench/bench_gpu.py

In one call, three parts, the PyTorch one first in its own process (jax preallocates 75% of the GPU):
- torch: bench/torch_kernels.py: GEMM sweeps, attention sweeps over S 1k-32k and head dimension 64/128,
  fused (SDPA, flash backend) and unfused (score matrices written), and a PyTorch GPT block step, as
  kernel records in OUT-DIR/DATE-kernels-<device>.jsonl. Where torch is missing it says so and is skipped.
- jax-steps: live's training step (technique data, one device, generated data, bytes tokenizer: nothing
  is fetched) on each case and three plain GEMMs; run records in OUT-DIR/DATE-gpu-<device>.jsonl, then
  geosim's prediction of each beside what was measured (time per step, TFLOP/s, peak memory) with the
  shipped parameters, and the generation's constants fitted on these runs
  (python -m geosim.live.experiments.device_compute). About 4 minutes on an H200 (compiles included).
- jax-attention: jax.nn.dot_product_attention, cudnn (fused) and xla (unfused), over the same sweep,
  appended to the kernel records.
Then the kernel records are read back and the fused-attention curve refitted per generation, the unfused
records set beside geosim's unfused kernels (python -m geosim.live.experiments.attention_kernels --records
FILE; add --write to put the curve in geosim/data/attention-kernels.toml).
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("torch", "jax-steps", "jax-attention")
DEFAULT_CASES = "gpt2:8:bf16,gpt2-medium:4:bf16,gpt2-medium:8:bf16,gpt2-large:8:bf16,gpt2-medium:8:fp32"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=DEFAULT_CASES, help="MODEL:BATCH:PRECISION,... (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=20, help="steps a case (default: %(default)s)")
    ap.add_argument("--out-dir", default=str(ROOT / "docs/results/data"), help="where the records go")
    ap.add_argument("--parts", default=",".join(PARTS), help="which parts to run (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="fewer sizes in the sweeps (a smoke test)")
    ap.add_argument("--child", choices=("step", "gemms"), help=argparse.SUPPRESS)  # one measurement, in a fresh process
    ap.add_argument("--child-out", help=argparse.SUPPRESS)  # the file the parent reads it from
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    parts = set(args.parts.split(","))
    if not parts <= set(PARTS):
        print(f"bench_gpu: --parts: each must be one of {', '.join(PARTS)}, got {args.parts!r}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    today = datetime.date.today().isoformat()
    out_dir = Path(args.out_dir)
    kernels_out = None
    if "torch" in parts:  # first, in its own process: jax would hold 75% of the GPU's memory
        pending = out_dir / f"{today}-kernels-pending.jsonl"
        pending.unlink(missing_ok=True)
        cmd = [sys.executable, str(ROOT / "bench" / "torch_kernels.py"), "--out", str(pending)] + (["--quick"] if args.quick else [])
        returncode = run_child(cmd, 300)
        kernels_out = pending if pending.exists() else None
        if returncode not in (0, 3):
            kept = "its finished sweeps are kept" if kernels_out else "nothing was written"
            print(f"bench_gpu: the PyTorch part failed ({returncode}; {kept}); going on with jax", file=sys.stderr)
    steps_pending, gemms_pending = out_dir / f"{today}-gpu-pending.jsonl", out_dir / f"{today}-gemms-pending.json"
    if "jax-steps" in parts:
        # each case in a fresh process: jax's peak_bytes_in_use never goes down, so a case run after another
        # (or after the attention sweep) would report the larger one's peak, and each starts on a cold allocator
        steps_pending.unlink(missing_ok=True)
        gemms_pending.unlink(missing_ok=True)
        for case in args.cases.split(","):
            code = run_child([sys.executable, __file__, "--child", "step", "--cases", case, "--steps", str(args.steps),
                              "--child-out", str(steps_pending)], 240)
            if code != 0:
                print(f"bench_gpu: live's step on {case} failed ({code}); going on", file=sys.stderr)
        code = run_child([sys.executable, __file__, "--child", "gemms", "--child-out", str(gemms_pending)], 120)
        if code != 0:
            print(f"bench_gpu: the GEMM timings failed ({code}); going on", file=sys.stderr)
    import os

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the measuring children are done; take only what is used
    import jax

    device = jax.devices()[0]
    if device.platform != "gpu":
        print(f"bench_gpu: no GPU here (jax's device is {device.platform}); the shipped H200 records stand in "
              "(geosim/data/gpu-h200-2026-11-26.jsonl: python -m geosim.live.experiments.device_compute --records h200-2026-11-26)", file=sys.stderr)
        return 2
    slug = re.sub(r"[^a-z0-9]+", "-", device.device_kind.lower()).strip("-")
    out = out_dir / f"{today}-gpu-{slug}.jsonl"
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    kernels_file = out_dir / f"{today}-kernels-{slug}.jsonl"
    from geosim.base.fileio import append_lines

    if kernels_out is not None:
        append_lines(kernels_file, kernels_out.read_text().splitlines())
        kernels_out.unlink()
    if steps_pending.exists():
        append_lines(out, steps_pending.read_text().splitlines())
        steps_pending.unlink()
    if "jax-attention" in parts:
        import json

        from geosim.live.experiments import attention_kernels

        sweep = attention_kernels.parse_sweep("1024:64,16384:64,1024:128,16384:128" if args.quick
                                              else attention_kernels.DEFAULT_SWEEP)
        append_lines(kernels_file, [json.dumps(r) for r in attention_kernels.measure_jax(sweep, log=log)])
    if out.exists():
        report_steps(device, out, gemms_pending, started)
    if kernels_file.exists():
        from geosim.live.experiments import attention_kernels

        print(f"kernel records in {kernels_file.name}:")
        attention_kernels.main(["--records", str(kernels_file)])
    print(f"bench_gpu: {time.perf_counter() - started:.0f} s in all")
    return 0


def run_child(cmd: list[str], timeout_s: int):
    """The child's exit status, or a few words when it ran past timeout_s (it is killed; what it wrote stays)."""
    try:
        return subprocess.run(cmd, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout_s} s"


def child(args) -> int:
    """One measurement in this fresh process, into the file the parent named (--child-out): live's step on
    one case (its record appended), or the three GEMMs (written as JSON)."""
    import json

    from geosim.live.experiments import device_compute

    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if args.child == "step":
        device_compute.measure_steps(device_compute.parse_list(args.cases, 3, "--cases"), args.steps, args.child_out, log)
        return 0
    gemms = device_compute.time_gemms(device_compute.parse_list(device_compute.DEFAULT_GEMMS, 4, "--gemms"))
    Path(args.child_out).write_text(json.dumps(gemms))
    return 0


def report_steps(device, out: Path, gemms_file: Path, started: float) -> None:
    """live's JAX step on each case and three GEMMs: predicted against measured, the generation's constants fitted."""
    import json

    from geosim.calibrate.cases import load_cases
    from geosim.calibrate.check import check, summary
    from geosim.live.experiments import device_compute
    from geosim.inputs.params import default_params

    gemms = json.loads(gemms_file.read_text()) if gemms_file.exists() else []
    cases = load_cases(out)
    rows = check(cases, default_params())
    print(f"{device.device_kind}: {len(rows)} case(s), records in {out.name}, {time.perf_counter() - started:.0f} s")
    print(f"  {'model':<12} {'step meas ms':>12} {'pred':>8} {'err':>6} {'TFLOP/s meas':>12} {'pred':>6} "
          f"{'mem meas GiB':>12} {'pred':>6} {'err':>6}")
    for r in rows:
        m, p = r.measured, r.predicted
        print(f"  {r.model:<12} {m.get('time_per_iteration_s', 0) * 1e3:12.1f} {p.get('time_per_iteration_s', 0) * 1e3:8.1f} "
              f"{(r.error('time_per_iteration_s') or 0):+6.1%} {m.get('tflops_per_gpu', 0):12.0f} {p.get('tflops_per_gpu', 0):6.0f} "
              f"{m.get('peak_memory_gib', 0):12.2f} {p.get('peak_memory_gib', 0):6.2f} {(r.error('peak_memory_gib') or 0):+6.1%}")
    for g in gemms:
        print(f"  GEMM {g['m']}x{g['n']}x{g['k']} {g['precision']}: {g['tflops']:.0f} TFLOP/s")
    s = summary(rows)
    for metric in ("time_per_iteration_s", "peak_memory_gib"):
        if metric in s:
            print(f"  {metric}: median |error| {s[metric]['median_abs_error']:.1%}, worst {s[metric]['worst_error']:+.1%}")
    gpu = device_compute.device_of(cases)
    fitted = device_compute.fit(cases, gemms, default_params(), gpu.architecture, gpu)
    print(f"  fitted on these runs ({gpu.architecture}): gemm_fraction {fitted['gemm_fraction']:.3f}, memory_fraction "
          f"{fitted['memory_fraction']:.3f}, gemm_half_us {fitted['gemm_half_us']:.1f}; rms log error {fitted['rms_log_error']:.3f}")
    if gemms:
        print(f"  GEMMs: {gemms_file.name} (give them to device_compute --records as --gemm-tflops "
              + ",".join(f"{g['m']}:{g['n']}:{g['k']}:{g['precision']}:{g['tflops']:.1f}" for g in gemms) + ")")


if __name__ == "__main__":
    sys.exit(main())
