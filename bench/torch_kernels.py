"""The PyTorch half of the device check: GEMM and attention sweeps and a GPT block step, as kernel records.

    python bench/torch_kernels.py --out docs/results/data/DATE-kernels-DEVICE.jsonl [--quick]

torch is not a geosim dependency: it is imported here only, and where it is missing (or has no CUDA
device) this script says so in one line and exits 3, writing nothing. bench/bench_gpu.py runs it in
its own process before jax starts (jax preallocates 75% of the GPU's memory). On an H100/H200 the
default sweeps take about 1-2 minutes:

- GEMMs, bf16: squares 1024-16384 and the GPT-block shapes (tokens x 3h x h, tokens x 4h x h, h = 2048, 4096);
- attention, bf16, causal, forward and backward, 2048 wide (32 heads of 64, 16 of 128), batch x S = 32k
  tokens (one sequence from 32k on), S 1k-32k: fused (F.scaled_dot_product_attention with the flash
  backend only) and unfused (scores = q k^T per head, masked softmax, probabilities @ v: the score
  matrices written) on 8k tokens a call up to S = 8k (at 16k one sequence's scores and their softmax and
  gradients pass 64 GiB);
- a GPT-2 block stack step (forward, backward, AdamW; bf16 autocast, SDPA attention): gpt2-medium's shape
  (24 x 1024, 16 heads) at batch 8 x 1024 and gpt3-1.3b's width (2048, 16 heads of 128) at 4 x 4096, 4 layers.

Each record is one JSON line (schema geosim.kernel/1: live/experiments/attention_kernels.py describes it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

SCHEMA = "geosim.kernel/1"
WIDTH = 2048


def attention_flops(batch, heads, seq_len, head_dim, backward, causal=True):
    """geosim's count (geosim/sim/compute.py): two products of 2 S^2 d, halved causal; backward 2.5x."""
    forward = 4.0 * seq_len * seq_len * head_dim * batch * heads * (0.5 if causal else 1.0)
    return forward * (2.5 if backward else 1.0)


def timed(torch, fn, repeats):
    """Median seconds of fn() on the GPU (CUDA events), after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def gemm_records(torch, device, quick):
    sizes = [(n, n, n) for n in (1024, 2048, 4096, 8192) + (() if quick else (16384,))]
    for h in (2048, 4096):
        sizes += [(8192, 3 * h, h), (8192, 4 * h, h), (8192, h, 4 * h)]
    out = []
    for m, n, k in sizes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        s = timed(torch, lambda: a @ b, 10)
        out.append({"schema": SCHEMA, "kind": "gemm", "framework": "torch", "device": device, "m": m, "n": n, "k": k,
                    "precision": "bf16", "seconds": s, "tflops": 2.0 * m * n * k / s / 1e12})
        del a, b
    return out


def unfused_attention(torch, q, k, v, mask):
    """Attention as eager PyTorch (and Megatron before its fused kernels) runs it: per-head batched GEMMs
    writing the B x heads x S x S scores, a masked softmax over them, then probabilities @ v."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def attention_records(torch, device, quick, log):
    import torch.nn.functional as F

    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        flash_only = lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)  # noqa: E731
    except ImportError:  # torch < 2.3
        flash_only = lambda: torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,  # noqa: E731
                                                            enable_mem_efficient=False)
    seqs = (1024, 4096, 16384) if quick else (1024, 2048, 4096, 8192, 16384, 32768)
    out = []
    for head_dim in (64, 128):
        heads = WIDTH // head_dim
        for seq_len in seqs:
            for kernel in ("fused", "unfused"):
                if kernel == "unfused" and seq_len > 8192:
                    continue
                batch = max(1, (32768 if kernel == "fused" else 8192) // seq_len)
                shape = (batch, heads, seq_len, head_dim)
                try:
                    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
                    if kernel == "fused":
                        def forward():
                            with flash_only():
                                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    else:
                        mask = torch.ones(seq_len, seq_len, device="cuda", dtype=torch.bool).triu(1)
                        forward = lambda: unfused_attention(torch, q, k, v, mask)  # noqa: E731
                    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
                    t_fwd = timed(torch, lambda: forward(), 5)
                    t_both = timed(torch, lambda: forward().backward(grad), 5)
                except (torch.cuda.OutOfMemoryError, RuntimeError) as exc:
                    log(f"  torch {kernel} S={seq_len} d={head_dim}: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
                    torch.cuda.empty_cache()
                    continue
                for direction, seconds in (("forward", t_fwd), ("backward", max(t_both - t_fwd, 1e-9))):
                    flops = attention_flops(batch, heads, seq_len, head_dim, direction == "backward")
                    out.append({"schema": SCHEMA, "kind": "attention", "framework": "torch", "kernel": kernel,
                                "direction": direction, "device": device, "batch": batch, "heads": heads,
                                "seq_len": seq_len, "head_dim": head_dim, "causal": True, "precision": "bf16",
                                "seconds": seconds, "flops": flops, "tflops": flops / seconds / 1e12})
                log(f"  torch {kernel} S={seq_len} d={head_dim}: forward {out[-2]['tflops']:.0f}, "
                    f"backward {out[-1]['tflops']:.0f} TFLOP/s")
                del q, k, v
                torch.cuda.empty_cache()
    return out


def block_step_records(torch, device, quick, log):
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):  # GPT-2's block, attention through SDPA (flash where it can)
        def __init__(self, h, a):
            super().__init__()
            self.a = a
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc, self.out = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
            q, k, v = (t.view(b, s, self.a, h // self.a).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    cases = [(24, 1024, 16, 8, 1024)] + ([] if quick else [(4, 2048, 16, 4, 4096)])
    out = []
    for layers, h, a, batch, seq_len in cases:
        model = nn.Sequential(*[Block(h, a) for _ in range(layers)]).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        x = torch.randn(batch, seq_len, h, device="cuda")

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        torch.cuda.reset_peak_memory_stats()
        seconds = timed(torch, step, 10)
        out.append({"schema": SCHEMA, "kind": "block_step", "framework": "torch", "device": device, "n_layer": layers,
                    "n_embd": h, "n_head": a, "batch": batch, "seq_len": seq_len, "precision": "bf16",
                    "seconds": seconds, "peak_memory_gib": torch.cuda.max_memory_allocated() / 2 ** 30})
        log(f"  torch block step {layers}x{h} a{a} batch {batch} S={seq_len}: {seconds * 1e3:.1f} ms")
        del model, opt, x
        torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="append the kernel records to this JSON Lines file")
    ap.add_argument("--quick", action="store_true", help="fewer sizes (a smoke test, ~30 s)")
    args = ap.parse_args(argv)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        import torch
    except ImportError:
        print("torch_kernels: torch is not installed here: the PyTorch part of the device check (GEMM and attention "
              "sweeps, a GPT block step) is skipped; nothing written", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print(f"torch_kernels: torch {torch.__version__} sees no CUDA device: the PyTorch part of the device check is "
              "skipped; nothing written", file=sys.stderr)
        return 3
    device = torch.cuda.get_device_name(0)
    log(f"torch {torch.__version__} on {device}")
    from geosim.base.fileio import append_lines  # one O_APPEND write of whole lines

    # each sweep's records land as soon as it ends: a device lease that runs out keeps what was measured
    count = 0
    for sweep in (gemm_records, attention_records, block_step_records):
        records = sweep(torch, device, args.quick) if sweep is gemm_records else sweep(torch, device, args.quick, log)
        append_lines(args.out, [json.dumps(r) for r in records])
        count += len(records)
    print(f"torch_kernels: {count} records appended to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
