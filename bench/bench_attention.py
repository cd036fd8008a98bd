"""Attention as its kernels run: one GPU's compute-only step and MFU against sequence length (issue 41 item 3).

    python bench/bench_attention.py [--gpu H100] [--model gpt3-6.7b] [--tokens 32768] [--runtime pytorch]

For each sequence length, one GPU's forward + backward of the whole model on `--tokens` tokens (as many
sequences as fit in them), timed by geosim's op-level kernel timer under the runtime (fused attention
under pytorch: flash attention at its own fraction of the peak, geosim/data/attention-kernels.toml;
unfused under alpa and jax: the score GEMMs and passes per head), and beside it the time if the fused
kernel ran at the generation's GEMM fraction (what geosim did before: `as GEMM`). MFU counts the
model's FLOPs as 6 x params x tokens + 6 x layers x width x S x tokens (PaLM's count with the causal
mask's half of the attention products: the work done),
over the GPU's 16-bit dense peak. Also the 16- vs 32-head comparison at equal width, unfused.
No GPU needed: this prints the model's figures.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from geosim.inputs.params import default_params
from geosim.inputs.runtime import shipped_runtimes
from geosim.inputs.scenario import get_model, gpu_catalog
from geosim.sim import compute
from geosim.sim.compute import KernelTimer, Work, kernel_timer


def step_seconds(model, gpu, runtime: str, seq_len: int, tokens: int, as_gemm: bool = False) -> float:
    params = shipped_runtimes()[runtime].applied_to(default_params())
    cm = kernel_timer(params)
    work = Work("forward", model, max(1, tokens // seq_len), seq_len, model.n_layer, head=True, embedding=True)
    if as_gemm:  # the fused kernel at the GEMM roofline (the model before flash attention had its own fraction)
        eff = cm.constants_for(gpu)
        ops = compute.kernels(work, "bf16", True) + compute.kernels(work._replace(phase="backward"), "bf16", True)
        return sum(compute.roofline_seconds(op.flops, op.nbytes, gpu, "bf16", eff) if type(op) is compute.FusedAttention
                   else compute.op_seconds(op, gpu, "bf16", eff) for op in ops)
    return cm.seconds(work, gpu, "bf16") + cm.seconds(work._replace(phase="backward"), gpu, "bf16")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--model", default="gpt3-6.7b")
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--runtime", default="pytorch")
    args = ap.parse_args(argv)
    gpu = gpu_catalog()[args.gpu]
    base = get_model(args.model)
    peak = gpu.peak_tflops("bf16", False) * 1e12
    print(f"{args.model} on one {args.gpu} ({gpu.architecture}), {args.tokens} tokens a step, runtime {args.runtime}, bf16")
    print(f"  {'S':>6} {'step s':>8} {'MFU':>6} {'as GEMM s':>10} {'MFU':>6} {'attention share':>16}")
    for s in (1024, 2048, 4096, 8192, 16384, 32768):
        model = replace(base, n_ctx=max(base.n_ctx, s))
        t = step_seconds(model, gpu, args.runtime, s, args.tokens)
        t_gemm = step_seconds(model, gpu, args.runtime, s, args.tokens, as_gemm=True)
        tokens = max(1, args.tokens // s) * s
        flops = 6 * model.num_params * tokens + 6 * model.n_layer * model.n_embd * s * tokens
        params = shipped_runtimes()[args.runtime].applied_to(default_params())
        cm = kernel_timer(params)
        work = Work("backward", model, max(1, args.tokens // s), s, 1)
        parts = cm.breakdown(work, gpu, "bf16")
        fwd = cm.breakdown(work._replace(phase="forward"), gpu, "bf16")
        attn = sum(v for k, v in {**{k + "f": v for k, v in fwd.items()}, **parts}.items()
                   if "attention" in k and "out" not in k or "scores" in k or "probs@v" in k or "softmax" in k)
        total = sum(parts.values()) + sum(fwd.values())
        print(f"  {s:>6} {t:8.3f} {flops / t / peak:6.1%} {t_gemm:10.3f} {flops / t_gemm / peak:6.1%} {attn / total:16.1%}")
    width = 2048
    print(f"\n  unfused (runtime alpa), width {width}, 24 layers, S 2048, {args.gpu}: heads change the score passes")
    for heads in (16, 32):
        model = replace(base, name=f"w{width}a{heads}", n_layer=24, n_embd=width, n_head=heads, n_ctx=2048)
        print(f"    {heads} heads of {width // heads}: {step_seconds(model, gpu, 'alpa', 2048, args.tokens):.4f} s a step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
