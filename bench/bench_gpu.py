"""Device check: live's step on this machine's GPU, predicted against measured (issue 33).

    python bench/bench_gpu.py [--cases MODEL:BATCH:PRECISION,...] [--steps 20] [--out-dir docs/results/data]

Runs live's training step (technique data, one device, generated data, bytes tokenizer: nothing is
fetched) on each case, times three plain GEMMs, writes the run records to
OUT-DIR/DATE-gpu-<device>.jsonl, then prints geosim's prediction of each record beside what was
measured (time per step, TFLOP/s, peak memory) with the shipped parameters, and the generation's
constants fitted on these runs (python -m geosim.live.experiments.device_compute). The default
cases take about 4 minutes on an H200 (compiles included); the check is sized for 8.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CASES = "gpt2:8:bf16,gpt2-medium:4:bf16,gpt2-medium:8:bf16,gpt2-large:8:bf16,gpt2-medium:8:fp32"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=DEFAULT_CASES, help="MODEL:BATCH:PRECISION,... (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=20, help="steps a case (default: %(default)s)")
    ap.add_argument("--out-dir", default=str(ROOT / "docs/results/data"), help="where the records go")
    args = ap.parse_args(argv)
    import jax

    from geosim.calibrate.cases import load_cases
    from geosim.calibrate.check import check, summary
    from geosim.live.experiments import device_compute
    from geosim.params import default_params

    device = jax.devices()[0]
    if device.platform != "gpu":
        print(f"bench_gpu: no GPU here (jax's device is {device.platform}); the shipped H200 records stand in "
              "(geosim/data/gpu-h200-2026-11-26.jsonl: python -m geosim.live.experiments.device_compute --records h200-2026-11-26)", file=sys.stderr)
        return 2
    slug = re.sub(r"[^a-z0-9]+", "-", device.device_kind.lower()).strip("-")
    out = Path(args.out_dir) / f"{datetime.date.today().isoformat()}-gpu-{slug}.jsonl"
    started = time.perf_counter()
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    device_compute.measure_steps(device_compute.parse_list(args.cases, 3, "--cases"), args.steps, str(out), log)
    gemms = device_compute.time_gemms(device_compute.parse_list(device_compute.DEFAULT_GEMMS, 4, "--gemms"))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
