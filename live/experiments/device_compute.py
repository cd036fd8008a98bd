"""A GPU generation's compute constants, measured: cpu_compute's method on any jax device.

The simulator times a step as an op-level roofline (geosim/sim/compute.py): each GEMM at the
GPU's tensor peak x a fraction (with a saturation ramp), each streaming kernel at its bandwidth
x a fraction. Those three constants are a runtime's efficiency on a GPU generation
(geosim/data/runtimes.toml, [RUNTIME.efficiency.GENERATION]) and are measured here:

- `--measure` (on the machine with the GPU): live's own training step (`geosim live run`'s loop,
  technique data, bytes tokenizer, generated data: nothing fetched) at the cases given by
  `--cases MODEL:BATCH:PRECISION,...`, each written as a run record (`--records-out`), and a
  few plain GEMMs timed with jax (`--gemms M:N:K:PRECISION,...`);
- then, from those records and GEMMs (or from records measured before, `--records FILE`, and GEMMs
  given as `--gemm-tflops M:N:K:PRECISION:TFLOPS`), the three constants are fitted on log time
  through the simulator's own prediction of each record (`geosim calibrate check`'s path), with
  the runtime's kernel gap (runtimes.toml's kernel_us) held as declared.

    python -m geosim.live.experiments.device_compute --measure [--cases ...] [--gemms ...] [--records-out F] [--out P]
    python -m geosim.live.experiments.device_compute --records F|h200-2026-11-26 [--gemm-tflops ...] [--out P] [--json]

prints each record's and GEMM's measured and modelled time and the constants; --out writes them as
a parameters file that `--params` takes. The shipped Hopper constants come from the H200 records of
2026-11-26 and their two GEMMs (docs/results/2026-11-27-gpu-compute.md).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import replace

from geosim.base.errors import GeosimError
from geosim.live.experiments.cpu_compute import print_rows

DEFAULT_CASES = "gpt2:8:bf16,gpt2-medium:8:bf16,gpt2-medium:4:bf16,gpt2-medium:8:fp32"
DEFAULT_GEMMS = "8192:8192:8192:bf16,4096:4096:4096:fp32,2048:2048:2048:bf16"
FIT_KEYS = ("gemm_fraction", "memory_fraction", "gemm_half_us")
# Measurements shipped with geosim, by name: --records NAME fits them (records in geosim/data, with the plain
# GEMMs timed on the same GPU the same day). h200-2026-11-26: live's step on one H200, jax 0.11.2, CUDA 13
# (issue 33); 8192^3 bf16 ran at 879 TFLOP/s and 4096^3 fp32 (TF32) at 391.
SHIPPED = {"h200-2026-11-26": ("gpu-h200-2026-11-26.jsonl", "8192:8192:8192:bf16:879,4096:4096:4096:fp32:391")}
REFIT = "python -m geosim.live.experiments.device_compute --records RECORDS [--gemm-tflops M:N:K:PRECISION:TFLOPS,...]"


def parse_list(text: str, fields: int, key: str) -> list[list[str]]:
    """'a:b:c,d:e:f' -> [[a, b, c], [d, e, f]], each with `fields` parts, or one GeosimError naming the flag."""
    items = [item.split(":") for item in text.split(",") if item]
    if not items or any(len(item) != fields for item in items):
        raise GeosimError(f"must be a comma-separated list of {fields} ':'-separated fields, got {text!r}", key=key)
    return items


def _precision(text: str, key: str) -> str:
    if text not in ("fp32", "bf16", "fp16"):
        raise GeosimError(f"precision must be fp32, bf16 or fp16, got {text!r}", key=key)
    return text


def gemms_given(text: str, key: str = "--gemm-tflops") -> list[dict]:
    out = []
    for m, n, k, precision, tflops in parse_list(text, 5, key):
        try:
            dims, rate = [int(m), int(n), int(k)], float(tflops)
        except ValueError:
            raise GeosimError(f"M, N, K must be whole numbers and TFLOPS a number, got {m}:{n}:{k}:{tflops}",
                              key=key) from None
        if min(dims) < 1 or not 0 < rate < 1e6:
            raise GeosimError(f"M, N, K must be >= 1 and TFLOPS in (0, 1e6), got {m}:{n}:{k}:{tflops}", key=key)
        out.append({"m": dims[0], "n": dims[1], "k": dims[2], "precision": _precision(precision, key),
                    "seconds": 2.0 * dims[0] * dims[1] * dims[2] / (rate * 1e12)})
    return out


# -- measuring, on the device ---------------------------------------------------------------

def time_gemms(specs: list[list[str]], repeats: int = 20) -> list[dict]:
    """Median seconds of each M x N x K matmul in its precision on jax's default device."""
    import jax
    import jax.numpy as jnp

    dtypes = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}
    out = []
    for m, n, k, precision in specs:
        m, n, k = int(m), int(n), int(k)
        a = jnp.ones((m, k), dtypes[_precision(precision, "--gemms")])
        b = jnp.ones((k, n), a.dtype)
        matmul = jax.jit(jnp.matmul)
        matmul(a, b).block_until_ready()
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            matmul(a, b).block_until_ready()
            times.append(time.perf_counter() - t)
        seconds = statistics.median(times)
        out.append({"m": m, "n": n, "k": k, "precision": precision, "seconds": seconds,
                    "tflops": 2.0 * m * n * k / seconds / 1e12})
    return out


def measure_steps(cases: list[list[str]], steps: int, records_out: str | None, log) -> list:
    """live's step (technique data, one device) for each MODEL:BATCH:PRECISION: run records, appended to
    records_out when given."""
    from geosim.live.train.loop import Options, run
    from geosim.live.train.record import build_record
    from geosim.inputs.records import append_records
    from geosim.techniques import data as data_parallel  # one device: the plainest step live runs

    records = []
    for model, batch, precision in cases:
        opts = Options(technique=data_parallel.NAME, model=model, steps=steps, batch=int(batch),
                       precision=_precision(precision, "--cases"), data="generated", tokenizer="bytes")
        log(f"live step: {model}, batch {batch}, {precision}")
        result = run(opts, log=log)
        record = build_record(result, opts, backend="jax", collective_impl="none (one device)")
        records.append(record)
        if records_out:
            append_records(records_out, [record])
        if result.status != "ok":
            log(f"  {result.status}: {result.error}")
    return records


# -- fitting ---------------------------------------------------------------------------------

def fit(cases, gemms: list[dict], params, architecture: str, gpu) -> dict:
    """The generation's three constants that best predict the records' step times and the GEMMs (log time)."""
    from scipy.optimize import least_squares

    from geosim.calibrate.check import check
    from geosim.inputs.runtime import runtime_of, shipped_runtimes
    from geosim.sim.compute import Gemm, kernel_timer, gemm_seconds
    from geosim.inputs.specs import Efficiency

    timed = [c for c in cases if c.metric]
    if not timed and not gemms:
        raise GeosimError("nothing to fit: no record measured a step time and no GEMM was given", key="--records")

    # the records' runtime (live's: jax) is what was measured: its efficiency on this generation is fitted
    runtime = runtime_of(timed[0].workload, params) if timed else shipped_runtimes()["jax"]

    def with_constants(x) -> object:
        g, m, half_us = x
        entry = Efficiency(architecture, "measured", "this fit", g, m, half_us * 1e-6, refit=REFIT)
        efficiency = tuple(sorted({**dict(runtime.efficiency), architecture: entry}.items()))
        return replace(params, runtimes={**(params.runtimes or {}), runtime.name: replace(runtime, efficiency=efficiency)})

    def rows(x) -> list[dict]:
        p = with_constants(x)
        out = [{"what": f"{r.model} {r.label}", "measured_s": r.measured["time_per_iteration_s"],
                "model_s": r.predicted["time_per_iteration_s"]}
               for r in check(timed, p) if "time_per_iteration_s" in r.predicted and "time_per_iteration_s" in r.measured]
        if gemms:
            runtime = runtime_of(timed[0].workload, p) if timed else None
            applied = runtime.applied_to(p) if runtime else p
            eff = kernel_timer(applied).constants_for(gpu)
            for gm in gemms:
                op = Gemm("gemm", gm["m"], gm["n"], gm["k"])
                out.append({"what": f"GEMM {gm['m']}x{gm['n']}x{gm['k']} {gm['precision']}", "measured_s": gm["seconds"],
                            "model_s": gemm_seconds(op, gpu, gm["precision"], eff)})
        return out

    def residuals(x):
        return [math.log(r["model_s"] / r["measured_s"]) for r in rows(x)]

    known = dict(runtime.efficiency).get(architecture)
    start = list(known.fractions) if known is not None and known.fractions is not None else [0.8, 0.7, 20e-6]
    start[2] *= 1e6
    best = least_squares(residuals, start, bounds=([1e-3, 1e-3, 0.0], [1.0, 1.0, 1e4]))
    final = rows(best.x)
    for r in final:
        r["error"] = r["model_s"] / r["measured_s"] - 1
    rms = math.sqrt(statistics.fmean(math.log(1 + r["error"]) ** 2 for r in final))
    return {"architecture": architecture, "runtime": runtime.name, "gemm_fraction": float(best.x[0]), "memory_fraction": float(best.x[1]),
            "gemm_half_us": float(best.x[2]), "rms_log_error": rms, "rows": final}


def params_text(constants: dict, what: str) -> str:
    """A parameters file setting the generation's constants (what `--params` reads)."""
    lines = [f"# measured by python -m geosim.live.experiments.device_compute: {what}",
             f"[runtime.{constants.get('runtime', 'jax')}.efficiency.{constants['architecture']}]"]
    lines += [f"{key} = {constants[key]:.4g}" for key in FIT_KEYS]
    lines += ['kind = "measured"', f"source = {json.dumps(what)}", f"refit = {json.dumps(REFIT)}", ""]
    return "\n".join(lines)


def device_of(cases):
    """The one GPU the records ran on (a catalog GPU, or the record's own table)."""
    gpus = {g for c in cases for h in c.cluster.hosts for g in h.gpus}
    if len({g.architecture for g in gpus}) != 1:
        raise GeosimError(f"the records ran on GPUs of several generations ({', '.join(sorted({g.architecture for g in gpus}))}): "
                          "fit one generation at a time", key="--records")
    return max(gpus, key=lambda g: g.memory_bandwidth_gbs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m geosim.live.experiments.device_compute",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", action="store_true", help="run live's step and the GEMMs on this machine's jax device")
    ap.add_argument("--cases", default=DEFAULT_CASES, help="with --measure: MODEL:BATCH:PRECISION,... (default: %(default)s)")
    ap.add_argument("--gemms", default=DEFAULT_GEMMS, help="with --measure: M:N:K:PRECISION,... (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=20, help="with --measure: steps a case (default: %(default)s)")
    ap.add_argument("--records", help="fit these run records (JSON Lines) instead of measuring, or a shipped set: "
                                      + ", ".join(SHIPPED))
    ap.add_argument("--gemm-tflops", default="", help="with --records: GEMMs measured before, M:N:K:PRECISION:TFLOPS,...")
    ap.add_argument("--records-out", help="with --measure: append the records here")
    ap.add_argument("--params", help="parameters file to start from (default: the shipped one)")
    ap.add_argument("--out", help="write the fitted constants as a parameters file here")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)
    log = (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        from geosim.calibrate.cases import cases_from_records, load_cases
        from geosim.base.fileio import write_atomic
        from geosim.inputs.params import load_params

        if args.measure == bool(args.records):
            raise GeosimError("give --measure (run on this machine's device) or --records FILE (fit runs measured "
                              "before), one of them", key="--measure")
        if not 1 <= args.steps <= 10_000:
            raise GeosimError(f"must be in 1..10000, got {args.steps}", key="--steps")
        params = load_params(args.params) if args.params else load_params()
        if args.measure:
            records = measure_steps(parse_list(args.cases, 3, "--cases"), args.steps, args.records_out, log)
            gemms = time_gemms(parse_list(args.gemms, 4, "--gemms"))
            cases = cases_from_records(records, "measured here")
        elif args.records in SHIPPED:
            from importlib import resources

            name, shipped_gemms = SHIPPED[args.records]
            cases = load_cases(resources.files("geosim.data").joinpath(name))
            gemms = gemms_given(args.gemm_tflops or shipped_gemms)
        else:
            cases = load_cases(args.records)
            gemms = gemms_given(args.gemm_tflops) if args.gemm_tflops else []
        gpu = device_of(cases)
        constants = fit(cases, gemms, params, gpu.architecture, gpu)
        if args.out:
            write_atomic(args.out, params_text(constants, f"{gpu.name}, {len(cases)} record(s), {len(gemms)} GEMM(s)"))
    except GeosimError as exc:
        print(f"geosim: error: {exc}", file=sys.stderr)
        return 2
    report = {"device": gpu.name, **{k: constants[k] for k in (*FIT_KEYS, "architecture", "runtime", "rms_log_error", "rows")},
              "gemms": gemms, "out": args.out}
    if args.json:
        print(json.dumps(report, allow_nan=False))
        return 0
    print(f"{gpu.name} ({gpu.architecture}): {len(cases)} record(s), {len(gemms)} GEMM(s)")
    print_rows(constants["rows"], "what", width=44, digits=3, indent="  ")
    print(f"fitted ({constants['runtime']} on {gpu.architecture}): gemm_fraction {constants['gemm_fraction']:.4g}, memory_fraction "
          f"{constants['memory_fraction']:.4g}, gemm_half_us {constants['gemm_half_us']:.4g}; rms log error "
          f"{constants['rms_log_error']:.3f}")
    if args.out:
        print(f"wrote {args.out}: pass it as --params")
    return 0


if __name__ == "__main__":
    sys.exit(main())
