"""Attention and GEMM kernels on a device, measured, and the fused-attention table refitted from them.

The simulator prices fused (flash) attention at a fraction of the tensor peak that depends on the
head dimension and the sequence length (geosim/sim/attention.py, geosim/data/attention-kernels.toml),
and unfused attention as its kernels (score GEMMs per head, the softmax passes). The device check
(bench/bench_gpu.py) writes kernel records, one JSON object a line (schema geosim.kernel/1):

    {"schema": "geosim.kernel/1", "kind": "attention", "framework": "torch" | "jax",
     "kernel": "fused" | "unfused", "direction": "forward" | "backward", "device": "NVIDIA H200",
     "batch": 1, "heads": 16, "seq_len": 4096, "head_dim": 128, "causal": true, "precision": "bf16",
     "seconds": 0.0012, "flops": ..., "tflops": ...}
    {"schema": "geosim.kernel/1", "kind": "gemm", "framework": ..., "device": ..., "m": ..., "n": ..., "k": ...,
     "precision": "bf16", "seconds": ..., "tflops": ...}
    {"schema": "geosim.kernel/1", "kind": "block_step", "framework": "torch", "device": ..., "n_layer": ...,
     "n_embd": ..., "n_head": ..., "batch": ..., "seq_len": ..., "precision": ..., "seconds": ..., "peak_memory_gib": ...}

FLOPs are geosim's count: forward 4 S^2 d a sequence and head, halved when causal; backward 2.5x.

    python -m geosim.live.experiments.attention_kernels --measure [--sweep S:D,...] [--records-out F]
    python -m geosim.live.experiments.attention_kernels --records F [--write] [--json]

--measure times jax's attention on this machine's device (jax.nn.dot_product_attention: 'xla', the
unfused kernels, everywhere; 'cudnn', fused, on a GPU); --records reads records measured before (the
device check's torch and jax ones). Then, per GPU generation, the fused records' curve is fitted
(at[d] per head dimension and one seq_half per generation and framework, least squares on log time), the
unfused records are set beside geosim's unfused prediction, and the GEMMs beside their fraction of the peak;
--write puts the torch (SDPA) curve in geosim/data/attention-kernels.toml as a measured entry (jax's
cudnn kernel is another kernel: fitted and shown, not written).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from importlib import resources
from pathlib import Path

from geosim.base.errors import GeosimError
from geosim.base.generations import generations
from geosim.sim.attention import TABLE_FILE

SCHEMA = "geosim.kernel/1"
DEFAULT_SWEEP = "1024:64,4096:64,16384:64,32768:64,1024:128,4096:128,16384:128,32768:128"
WIDTH = 2048  # heads x head dimension of the sweeps (GPT-3 XL's width): 32 heads of 64, 16 of 128
TABLE = Path(str(resources.files("geosim.data").joinpath(TABLE_FILE)))  # the shipped table (an editable install's)
TABLE_FRAMEWORK = "torch"  # the table is SDPA's kernel: what a fused runtime (pytorch) runs
ATTENTION_KEYS = {"framework": str, "kernel": str, "direction": str, "device": str, "batch": int, "heads": int,
                  "seq_len": int, "head_dim": int, "causal": bool, "precision": str, "seconds": float}


def attention_flops(batch: int, heads: int, seq_len: int, head_dim: int, backward: bool, causal: bool = True) -> float:
    """geosim's count (geosim/sim/compute.py): two products of 2 S^2 d, halved causal; backward 2.5x."""
    forward = 4.0 * seq_len * seq_len * head_dim * batch * heads * (0.5 if causal else 1.0)
    return forward * (2.5 if backward else 1.0)


def attention_record(framework: str, kernel: str, direction: str, device: str, batch: int, heads: int, seq_len: int,
                     head_dim: int, seconds: float, precision: str = "bf16", causal: bool = True) -> dict:
    flops = attention_flops(batch, heads, seq_len, head_dim, direction == "backward", causal)
    return {"schema": SCHEMA, "kind": "attention", "framework": framework, "kernel": kernel, "direction": direction,
            "device": device, "batch": batch, "heads": heads, "seq_len": seq_len, "head_dim": head_dim,
            "causal": causal, "precision": precision, "seconds": seconds, "flops": flops, "tflops": flops / seconds / 1e12}


def parse_sweep(text: str, key: str = "--sweep") -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 2 or not all(p.isdigit() for p in parts) or not (16 <= int(parts[0]) <= 1 << 20) \
                or int(parts[1]) not in (32, 64, 80, 96, 128, 256):
            raise GeosimError(f"must be SEQ:HEAD_DIM,... (SEQ 16..1048576, HEAD_DIM one of 32, 64, 80, 96, 128, 256), "
                              f"got {item!r}", key=key)
        out.append((int(parts[0]), int(parts[1])))
    return out


# -- measuring with jax (any device: CPU here, a GPU in the device check) ----------------------

def measure_jax(sweep: list[tuple[int, int]], repeats: int = 5, tokens: int = 16384, log=lambda line: None,
                max_unfused: int = 8192) -> list[dict]:
    """jax.nn.dot_product_attention, causal, bf16, forward and backward, per (S, d): 'xla' (unfused, up to
    S = max_unfused: its scores grow as S^2) always, 'cudnn' (fused) on a GPU. `tokens` = batch x S (at least
    one sequence), WIDTH / d heads."""
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    name = getattr(device, "device_kind", device.platform)
    kernels = [("unfused", "xla")] + ([("fused", "cudnn")] if device.platform == "gpu" else [])
    out = []
    for seq_len, head_dim in sweep:
        heads, batch = WIDTH // head_dim, max(1, tokens // seq_len)
        shape = (batch, seq_len, heads, head_dim)
        q, k, v = (jax.random.normal(jax.random.key(i), shape, jnp.bfloat16) for i in range(3))
        for kernel, implementation in kernels:
            if kernel == "unfused" and seq_len > max_unfused:
                continue

            def forward(q, k, v, implementation=implementation):
                return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=implementation)

            fwd = jax.jit(forward)
            both = jax.jit(jax.grad(lambda q, k, v: forward(q, k, v).astype(jnp.float32).sum(), argnums=(0, 1, 2)))
            try:
                t_fwd = _median_seconds(lambda: fwd(q, k, v), repeats)
                t_both = _median_seconds(lambda: both(q, k, v), repeats)
            except Exception as exc:  # an implementation this device or shape lacks (cudnn's limits), out of memory
                log(f"  jax {kernel} S={seq_len} d={head_dim}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
                continue
            # the gradient's program runs the forward too: the backward is the difference
            out.append(attention_record("jax", kernel, "forward", name, batch, heads, seq_len, head_dim, t_fwd))
            out.append(attention_record("jax", kernel, "backward", name, batch, heads, seq_len, head_dim,
                                        max(t_both - t_fwd, 1e-9)))
            log(f"  jax {kernel} S={seq_len} d={head_dim}: forward {out[-2]['tflops']:.3g}, backward "
                f"{out[-1]['tflops']:.3g} TFLOP/s")
    return out


def _median_seconds(call, repeats: int) -> float:
    import jax

    jax.block_until_ready(call())  # compile
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# -- reading and fitting ---------------------------------------------------------------------

def load_records(path: str) -> list[dict]:
    """The kernel records of a JSON Lines file; other lines (run records) are skipped; a bad kernel record is
    one GeosimError naming the file, the line and the key."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise GeosimError(f"cannot read: {exc.strerror}", source=path) from None
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GeosimError(f"line {number} is not JSON ({exc.msg})", source=path) from None
        if not isinstance(record, dict) or record.get("schema") != SCHEMA:
            continue
        where = f"line {number}"
        if record.get("kind") == "attention":
            for key, kind in ATTENTION_KEYS.items():
                value = record.get(key)
                ok = isinstance(value, kind) or (kind is float and isinstance(value, int) and not isinstance(value, bool))
                if not ok or (kind in (int, float) and not isinstance(value, bool) and not value > 0):
                    raise GeosimError(f"{where}: must be a {'positive ' if kind in (int, float) else ''}{kind.__name__}, "
                                      f"got {value!r}", source=path, key=key)
            if record["kernel"] not in ("fused", "unfused") or record["direction"] not in ("forward", "backward"):
                raise GeosimError(f"{where}: kernel must be fused or unfused and direction forward or backward",
                                  source=path, key="kernel")
        elif record.get("kind") not in ("gemm", "block_step"):
            raise GeosimError(f"{where}: kind must be attention, gemm or block_step, got {record.get('kind')!r}",
                              source=path, key="kind")
        out.append(record)
    return out


def generation_of(device: str) -> tuple[str | None, str]:
    """(catalog GPU name or None, its generation or 'cpu'/'unknown')."""
    from geosim.inputs.gpu_names import catalog_gpu
    from geosim.inputs.scenario import gpu_catalog

    name = catalog_gpu(device)
    if name:
        return name, gpu_catalog()[name].architecture
    return None, "cpu" if "cpu" in device.lower() else "unknown"


def fit_curve(records: list[dict]) -> dict:
    """One generation's fused records -> {forward: {d: at}, backward: {d: at}, seq_half, rms_log_error}:
    at[d] * S / (S + seq_half) against each record's measured fraction of the peak, least squares on log;
    for a given seq_half each at[d] is the geometric mean, so one dimension is searched (log grid, then refined)."""
    if not records:
        raise GeosimError("no fused attention records to fit", key="--records")

    def at_for(half: float):
        groups: dict[tuple[str, int], list[float]] = {}
        for r in records:
            groups.setdefault((r["direction"], r["head_dim"]), []).append(
                math.log(r["fraction"]) + math.log((r["seq_len"] + half) / r["seq_len"]))
        return {key: math.exp(statistics.fmean(v)) for key, v in groups.items()}

    def error(half: float) -> float:
        at = at_for(half)
        return sum((math.log(r["fraction"]) - math.log(at[(r["direction"], r["head_dim"])] * r["seq_len"]
                                                        / (r["seq_len"] + half))) ** 2 for r in records)

    grid = [0.0] + [2 ** (i / 4) for i in range(0, 4 * 16 + 1)]  # 1 .. 65536 tokens
    best = min(grid, key=error)
    lo, hi = best / 1.2, best * 1.2 + 1e-9
    for _ in range(40):  # golden-section refinement around the grid's best
        a, b = lo + 0.382 * (hi - lo), lo + 0.618 * (hi - lo)
        lo, hi = (lo, b) if error(a) <= error(b) else (a, hi)
    half = (lo + hi) / 2 if error((lo + hi) / 2) <= error(best) else best
    at = at_for(half)
    rms = math.sqrt(error(half) / len(records))
    return {"forward": {d: f for (direction, d), f in sorted(at.items()) if direction == "forward"},
            "backward": {d: f for (direction, d), f in sorted(at.items()) if direction == "backward"},
            "seq_half": half, "rms_log_error": rms, "records": len(records)}


def analyse(records: list[dict]) -> dict:
    """Per generation: the fused curve fitted, the unfused records against geosim's unfused prediction, the
    GEMMs' fractions of the peak."""
    from geosim.inputs.params import default_params
    from geosim.inputs.runtime import shipped_runtimes
    from geosim.inputs.scenario import gpu_catalog
    from geosim.sim.compute import attention_ops, block_backward, kernel_timer, op_seconds, sustained_tensor_tflops
    from geosim.inputs.specs import Model

    by_generation: dict[str, dict] = {}
    for r in records:
        gpu_name, generation = generation_of(r["device"])
        entry = by_generation.setdefault(generation, {"gpu": gpu_name, "fused": [], "unfused": [], "gemms": [],
                                                      "block_steps": []})
        gpu = gpu_catalog()[gpu_name] if gpu_name else None
        # the peak the simulator prices at (the datasheet's, capped by board power where the catalog says so)
        peak = sustained_tensor_tflops(gpu, r.get("precision", "bf16")) if gpu else None
        if r["kind"] == "attention":
            row = {**r, "fraction": r["tflops"] / peak if peak else None}
            if r["kernel"] == "fused":
                entry["fused"].append(row)
            else:
                if gpu:  # geosim's unfused kernels for this shape, under the jax runtime's constants
                    params = shipped_runtimes()["jax"].applied_to(default_params())
                    eff = kernel_timer(params).constants_for(gpu)
                    model = Model("sweep", 1, r["heads"] * r["head_dim"], r["heads"], n_ctx=r["seq_len"])
                    forward = attention_ops(r["batch"], r["seq_len"], r["head_dim"], r["heads"], 2, False, False)
                    ops = forward if r["direction"] == "forward" else [
                        op for op in block_backward(model, r["batch"], r["seq_len"], r["precision"], dropout=False)
                        if op.label.split(" ")[0] in ("scores", "probs@v", "mask+softmax")]
                    row["model_s"] = sum(op_seconds(op, gpu, r["precision"], eff) for op in ops)
                entry["unfused"].append(row)
        elif r["kind"] == "gemm":
            entry["gemms"].append({**r, "fraction": r["tflops"] / peak if peak else None})
        else:
            entry["block_steps"].append(r)
    for generation, entry in by_generation.items():
        # one curve per framework: SDPA's FlashAttention-2 (torch) is what the table prices for a fused runtime;
        # jax's cudnn kernel is another kernel, fitted and shown, never written into the table
        entry["fits"] = {framework: fit_curve(rows) for framework in sorted({r["framework"] for r in entry["fused"]})
                         if (rows := [r for r in entry["fused"] if r["fraction"] and r["framework"] == framework])}
        entry["fit"] = entry["fits"].get(TABLE_FRAMEWORK)
    return by_generation


def table_entry(generation: str, fit: dict, source: str, kernel: str) -> str:
    forward = ", ".join(f"{d} = {f:.3f}" for d, f in fit["forward"].items())
    backward = ", ".join(f"{d} = {f:.3f}" for d, f in fit["backward"].items())
    return (f"[{generation}]\nkernel = {json.dumps(kernel)}\nforward = {{ {forward} }}\nbackward = {{ {backward} }}\n"
            f"seq_half = {fit['seq_half']:.0f}\nkind = \"measured\"\nsource = {json.dumps(source)}\n")


def write_entry(path: Path, generation: str, entry_text: str) -> None:
    """Replace (or add) one generation's table in the attention table file, keeping the rest as it is."""
    from geosim.base.fileio import write_atomic
    from geosim.sim.attention import parse_table

    lines = path.read_text().splitlines(keepends=True)
    out, skipping = [], False
    for line in lines:
        if line.startswith("["):
            skipping = line.strip() == f"[{generation}]"
        if not skipping:
            out.append(line)
    text = "".join(out).rstrip("\n") + "\n\n" + entry_text
    parse_table(text, str(path))  # the file must still read
    write_atomic(str(path), text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m geosim.live.experiments.attention_kernels",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", action="store_true", help="time jax's attention on this machine's device")
    ap.add_argument("--sweep", default=DEFAULT_SWEEP, help="with --measure: SEQ:HEAD_DIM,... (default: %(default)s)")
    ap.add_argument("--tokens", type=int, default=16384, help="with --measure: batch x sequence length (default: %(default)s)")
    ap.add_argument("--records", help="kernel records (JSON Lines) measured before")
    ap.add_argument("--records-out", help="with --measure: append the records here")
    ap.add_argument("--write", action="store_true", help="put each fitted generation's curve in the attention table")
    ap.add_argument("--table", default=str(TABLE), help="with --write: the table file (default: the shipped one)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)
    log = (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        if args.measure == bool(args.records):
            raise GeosimError("give --measure or --records FILE, one of them", key="--measure")
        if not 16 <= args.tokens <= 1 << 24:
            raise GeosimError(f"must be in 16..16777216, got {args.tokens}", key="--tokens")
        from geosim.base.fileio import append_lines

        if args.measure:
            records = measure_jax(parse_sweep(args.sweep), tokens=args.tokens, log=log)
            if args.records_out:
                append_lines(args.records_out, [json.dumps(r) for r in records])
            source = "measured here"
        else:
            records = load_records(args.records)
            source = args.records
        if not records:
            raise GeosimError("no kernel records", source=source)
        result = analyse(records)
        written = []
        if args.write:
            for generation, entry in result.items():
                if entry["fit"] and generation in generations():  # a GPU generation of generations.toml
                    kernel = "FlashAttention-2 as PyTorch SDPA dispatches it (torch fused records)"
                    text = table_entry(generation, entry["fit"], f"measured: {Path(source).name}, refit with "
                                       f"python -m geosim.live.experiments.attention_kernels --records FILE --write",
                                       kernel)
                    write_entry(Path(args.table), generation, text)
                    written.append(generation)
    except GeosimError as exc:
        print(f"geosim: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"generations": result, "written": written}, allow_nan=False, default=str))
        return 0
    for generation, entry in result.items():
        print(f"{generation} ({entry['gpu'] or 'not in the catalog'}):")
        for r in entry["fused"] + entry["unfused"]:
            fraction = f"{r['fraction']:6.1%}" if r.get("fraction") else "     -"
            model = f"  geosim {r['model_s'] * 1e3:9.3f} ms ({r['model_s'] / r['seconds'] - 1:+.0%})" if "model_s" in r else ""
            print(f"  {r['framework']:<5} {r['kernel']:<7} {r['direction']:<8} S={r['seq_len']:<6} d={r['head_dim']:<4} "
                  f"{r['seconds'] * 1e3:9.3f} ms {r['tflops']:8.3g} TFLOP/s {fraction}{model}")
        for g in entry["gemms"]:
            fraction = f" ({g['fraction']:.1%} of peak)" if g.get("fraction") else ""
            print(f"  {g['framework']:<5} GEMM {g['m']}x{g['n']}x{g['k']} {g['precision']}: {g['tflops']:.1f} TFLOP/s{fraction}")
        for b in entry["block_steps"]:
            print(f"  {b['framework']:<5} block step {b['n_layer']}x{b['n_embd']} a{b['n_head']} batch {b['batch']} "
                  f"S={b['seq_len']}: {b['seconds'] * 1e3:.2f} ms, peak {b.get('peak_memory_gib', 0):.2f} GiB")
        for framework, fit in entry["fits"].items():
            at = lambda d: ", ".join(f"d{k} {v:.3f}" for k, v in d.items())  # noqa: E731
            use = "the table's" if framework == TABLE_FRAMEWORK else "shown only"
            print(f"  {framework} fused fitted ({use}): forward {at(fit['forward'])}; backward {at(fit['backward'])}; "
                  f"seq_half {fit['seq_half']:.0f}; rms log error {fit['rms_log_error']:.3f} over {fit['records']} records")
    for generation in written:
        print(f"wrote [{generation}] in {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
