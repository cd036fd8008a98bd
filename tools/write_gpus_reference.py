"""Write the generated tables of docs/reference/gpus.md from the GPU catalog and the runtimes.

    python tools/write_gpus_reference.py            # rewrite the tables in docs/reference/gpus.md
    python tools/write_gpus_reference.py --check    # exit 1 if they are out of date (tests/test_gpu_catalog.py)

The GPU table comes from geosim/data/gpus.toml (each figure's source beside it), the generation table
from geosim/data/generations.toml, the efficiency table (every runtime on every generation, its entry
or its estimate, with the source kind) and the runtime table from
geosim/data/runtimes.toml (kernel choices: TF32, fused attention; memory layout; allocator share).
Everything between a `<!-- generated: NAME -->` line and the next `<!-- end generated -->` is replaced.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's geosim, not an installed one

from _generated import write_or_check  # noqa: E402 (tools/_generated.py)

PAGE = ROOT / "docs" / "reference" / "gpus.md"
BLOCK = re.compile(r"(<!-- generated: (\w+) -->\n)(.*?)(<!-- end generated -->)", re.S)


def _n(value) -> str:
    return "-" if value is None else f"{value:g}"


def gpu_table() -> str:
    from geosim.inputs.scenario import gpu_catalog
    from geosim.sim.compute import sustained_tensor_tflops

    raw = tomllib.loads((ROOT / "geosim/data/gpus.toml").read_text())
    rows = ["| key | GPU | generation | memory GiB | GB/s | fp32 | fp16 | bf16 | TF32 | sustained 16-bit | board W | "
            "source |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, gpu in gpu_catalog().items():
        rows.append(f"| `{key}` | {raw[key]['name']} | {gpu.architecture} | {_n(gpu.memory_gib)} | "
                    f"{_n(gpu.memory_bandwidth_gbs)} | {_n(gpu.fp32_tflops)} | {_n(gpu.fp16_tensor_tflops)} | "
                    f"{_n(gpu.bf16_tensor_tflops)} | {_n(gpu.tf32_tensor_tflops)} | "
                    f"{sustained_tensor_tflops(gpu, 'fp16'):.4g} | {_n(gpu.tdp_w)} | {raw[key].get('source', '')} |")
    return "\n".join(rows) + "\n"


def generation_table() -> str:
    from geosim.base.generations import generations

    rows = ["| generation | TF32 tensor cores | bf16 | live's 16-bit values per attention score | source |",
            "|---|---|---|---|---|"]
    for name, g in generations().items():
        score = "fp32 softmax + 16-bit cast" if g.jax_score_16bit_values is None else _n(g.jax_score_16bit_values)
        rows.append(f"| `{name}` | {'yes' if g.tf32_tensor_cores else 'no'} | {'yes' if g.bf16 else 'no'} | {score} | "
                    f"{g.source} |")
    return "\n".join(rows) + "\n"


def efficiency_table() -> str:
    """Every (runtime, generation): its entry, or the runtime's estimate, with the source kind."""
    from geosim.base.generations import generations
    from geosim.inputs.params import load_params
    from geosim.inputs.runtime import shipped_runtimes

    params = load_params()
    rows = ["| runtime | generation | GEMM fraction | memory fraction | GEMM half us | kind | source |",
            "|---|---|---|---|---|---|---|"]
    for name, rt in shipped_runtimes().items():
        entries, estimate = dict(rt.efficiency), rt.estimate()
        for gen in generations():
            e = entries.get(gen, estimate)
            g, m, h = e.fractions or (params.gemm_fraction, params.memory_fraction, params.gemm_half_s)
            fitted = " (the parameters file's fit)" if e.fractions is None else ""
            refit = f"; refit: `{e.refit}`" if e.refit else ""
            rows.append(f"| `{name}` | {gen} | {g:.3g}{fitted} | {m:.3g} | {h * 1e6:.3g} | {e.kind} | "
                        f"{e.source}{refit} |")
    return "\n".join(rows) + "\n"


def runtime_table() -> str:
    from geosim.inputs.runtime import shipped_runtimes

    rows = ["| runtime | fp32 matmuls on TF32 | fused attention | memory layout | allocator share | "
            "generations with an entry | kernel gap us |", "|---|---|---|---|---|---|---|"]
    for name, rt in shipped_runtimes().items():
        share = "memory.usable_fraction" if rt.usable_memory_fraction is None else f"{rt.usable_memory_fraction:g}"
        gap = "compute.kernel_us" if rt.kernel_s is None else f"{rt.kernel_s * 1e6:g}"
        entries = ", ".join(f"{g} ({e.kind})" for g, e in rt.efficiency) or "-"
        rows.append(f"| `{name}` | {'yes' if rt.tf32_matmul else 'no'} | {'yes' if rt.fused_attention else 'no'} | "
                    f"{rt.memory_layout} | {share} | {entries} | {gap} |")
    return "\n".join(rows) + "\n"


def render(text: str) -> str:
    generated = {"gpus": gpu_table(), "generations": generation_table(), "efficiency": efficiency_table(),
                 "runtimes": runtime_table()}
    return BLOCK.sub(lambda m: m.group(1) + generated[m.group(2)] + m.group(4), text)


def main(argv: list[str]) -> int:
    return write_or_check(PAGE, render(PAGE.read_text()), argv, "write_gpus_reference.py")[0]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
