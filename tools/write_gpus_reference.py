"""Write the generated tables of docs/reference/gpus.md from the GPU catalog and the runtimes.

    python tools/write_gpus_reference.py            # rewrite the tables in docs/reference/gpus.md
    python tools/write_gpus_reference.py --check    # exit 1 if they are out of date (tests/test_gpu_catalog.py)

The GPU table comes from geosim/data/gpus.toml (each figure's source beside it) with the compute
constants each generation runs with (geosim/data/params-default.toml); the runtime table from
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
    from geosim.params import load_params
    from geosim.sim.compute import sustained_tensor_tflops

    raw = tomllib.loads((ROOT / "geosim/data/gpus.toml").read_text())
    from geosim.scenario import gpu_catalog

    from geosim.runtime import shipped_runtimes

    params = load_params()
    fitted = {gpu: name for name, rt in shipped_runtimes().items() for gpu in rt.fitted_devices}
    rows = ["| key | GPU | generation | memory GiB | GB/s | fp32 | fp16 | bf16 | TF32 | sustained 16-bit | board W | "
            "GEMM fraction | memory fraction | source |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, gpu in gpu_catalog().items():
        gen = gpu.architecture
        gemm = params.gemm_fraction_by_architecture.get(gen)
        memory = params.memory_fraction_by_architecture.get(gen)
        constants = [f"{gemm:g} ({gen})" if gemm is not None else f"{params.gemm_fraction:g} (global, fitted)",
                     f"{memory:g} ({gen})" if memory is not None else f"{params.memory_fraction:g} (global, fitted)"]
        if key in fitted and gemm is not None:  # the runtime whose fit describes this GPU keeps the global constants
            constants[0] += f"; {params.gemm_fraction:g} under {fitted[key]}"
            constants[1] += f"; {params.memory_fraction:g} under {fitted[key]}"
        rows.append(f"| `{key}` | {raw[key]['name']} | {gen} | {_n(gpu.memory_gib)} | {_n(gpu.memory_bandwidth_gbs)} | "
                    f"{_n(gpu.fp32_tflops)} | {_n(gpu.fp16_tensor_tflops)} | {_n(gpu.bf16_tensor_tflops)} | "
                    f"{_n(gpu.tf32_tensor_tflops)} | {sustained_tensor_tflops(gpu, 'fp16'):.4g} | {_n(gpu.tdp_w)} | "
                    f"{constants[0]} | {constants[1]} | {raw[key].get('source', '')} |")
    return "\n".join(rows) + "\n"


def runtime_table() -> str:
    from geosim.runtime import shipped_runtimes

    rows = ["| runtime | fp32 matmuls on TF32 | fused attention | memory layout | allocator share | "
            "fitted devices (global constants) | kernel gap us |", "|---|---|---|---|---|---|---|"]
    for name, rt in shipped_runtimes().items():
        share = "memory.usable_fraction" if rt.usable_memory_fraction is None else f"{rt.usable_memory_fraction:g}"
        gap = "compute.kernel_us" if rt.kernel_s is None else f"{rt.kernel_s * 1e6:g}"
        rows.append(f"| `{name}` | {'yes' if rt.tf32_matmul else 'no'} | {'yes' if rt.fused_attention else 'no'} | "
                    f"{rt.memory_layout} | {share} | {', '.join(rt.fitted_devices) or '-'} | {gap} |")
    return "\n".join(rows) + "\n"


def render(text: str) -> str:
    generated = {"gpus": gpu_table(), "runtimes": runtime_table()}
    return BLOCK.sub(lambda m: m.group(1) + generated[m.group(2)] + m.group(4), text)


def main(argv: list[str]) -> int:
    return write_or_check(PAGE, render(PAGE.read_text()), argv, "write_gpus_reference.py")[0]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
