"""Public anchors for the kernel timer: published training throughput of open stacks, with their setups
stated, against geosim's prediction of the same setup (docs/results/2026-11-28-compute-anchors.md).

    python bench/compute_anchors.py            # every anchor: a table of published and predicted figures
    python bench/compute_anchors.py --fast     # the subset tests/test_compute_anchors.py runs
    python bench/compute_anchors.py --json     # the rows as JSON
    python bench/compute_anchors.py --fit pytorch:ampere   # the GEMM fraction its fit rows call for

Each anchor is a step time the source publishes or that follows from its figures (TFLOP/s per GPU or MFU
times the FLOPs it counts), on a cluster written here as a scenario (one host of NVLink GPUs, or DGX hosts:
NVLink inside, an InfiniBand port per GPU), predicted with the runtime that ran it, on the default network
model (fabric: NVLink and RDMA as NCCL drives them; `--network alpha-beta` or `tcp` to compare). Nothing here
is fitted: a change of an efficiency entry shows here as it is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's geosim, not an installed one


@dataclass(frozen=True)
class Anchor:
    name: str
    source: str
    runtime: str
    gpu: str  # a catalog key, or a GPU table written here (its key in EXTRA_GPUS)
    hosts: int
    gpus_per_host: int
    model: dict  # n_layer, n_embd, n_head, vocab
    seq_len: int
    global_batch: int
    microbatches: int
    technique: str
    layout: dict | None  # Pipeshard's tensor, pipeline and data degrees (predict --tensor/--pipeline/--data)
    checkpointing: bool
    published_step_s: float  # the step time the source gives or implies
    published: str  # the figure as published
    fast: bool = False
    precision: str = "fp16"
    nic_gbps: float = 200.0  # one HDR InfiniBand port per GPU (DGX A100)
    fit: bool = False  # the runtime's efficiency entry on this generation was fitted to this row (--fit): no check


# Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
# SC'21), Table 1: GPT models on DGX A100 (80 GB) nodes, seq 2048, vocabulary 51,200, fp16, full activation
# recomputation; achieved TFLOP/s per GPU counts 96 B s l h^2 (1 + s / 6h + V / 16 l h) per step.
def narayanan(params_b, heads, hidden, layers, tp, gpus, batch, tflops, fast=False) -> Anchor:
    flops = 96 * batch * 2048 * layers * hidden ** 2 * (1 + 2048 / (6 * hidden) + 51200 / (16 * layers * hidden))
    return Anchor(f"Megatron-LM GPT {params_b}B, TP {tp}, {gpus} A100", "Narayanan et al. 2021, Table 1", "megatron",
                  "A100-80GB", gpus // 8, 8, dict(n_layer=layers, n_embd=hidden, n_head=heads, vocab=51200), 2048,
                  batch, batch * tp // gpus, "pipeshard" if tp > 1 else "data",
                  dict(tensor=tp, pipeline=1, data=gpus // tp) if tp > 1 else None, True, flops / (tflops * 1e12 * gpus),
                  f"{tflops} TFLOP/s per GPU", fast)


# MosaicML llm-foundry, scripts/train/benchmarking/README.md: MPT models trained by Composer (PyTorch, FSDP
# FULL_SHARD, amp_bf16, flash attention) on one node of 8 GPUs, no activation checkpointing; the step is the
# global batch's tokens over the published throughput (T/s). MPT is GPT-shaped (4h MLP; ALiBi instead of learned
# positions, no biases): geosim's GPT of the same width and depth, vocabulary 50,368. FSDP is predicted as Data
# (each GPU a whole replica; FSDP's parameter gathers over NVLink are not counted until geosim has FSDP).
MPT = {"125m": (12, 768, 12), "350m": (24, 1024, 16), "760m": (24, 1536, 12), "1b": (24, 2048, 16)}


def mpt(size, gpu, seq, micro, accum, tokens_per_s, fast=False, fit=False) -> Anchor:
    layers, width, heads = MPT[size]
    batch = micro * accum * 8
    return Anchor(f"llm-foundry MPT-{size} (GPT-shaped), seq {seq}, 8 {gpu}", "MosaicML llm-foundry benchmarking "
                  "README (Composer, FSDP)", "pytorch", gpu, 1, 8,
                  dict(n_layer=layers, n_embd=width, n_head=heads, vocab=50368), seq, batch, accum, "data", None,
                  False, batch * seq / tokens_per_s, f"{tokens_per_s:,} tokens/s", fast, precision="bf16", fit=fit)


ANCHORS = [
    # fitted: pytorch's GEMM fraction on Ampere and on Hopper (runtimes.toml) is what makes these rows' median
    # error zero (python bench/compute_anchors.py --fit pytorch:ampere); the other rows check it
    mpt("125m", "A100-80GB", 2048, 40, 2, 1142641, fit=True),
    mpt("350m", "A100-80GB", 2048, 32, 2, 470263, fit=True),
    mpt("760m", "A100-80GB", 2048, 24, 2, 259472, fit=True),
    mpt("1b", "A100-80GB", 2048, 14, 4, 164109, fit=True),
    mpt("760m", "H100", 2048, 24, 2, 505177, fit=True),
    mpt("1b", "H100", 2048, 14, 1, 363645, fit=True),
    # checks: other sequence lengths (attention's share moves with it) and sizes of the same tables
    mpt("125m", "A100-80GB", 512, 128, 2, 1325455),
    mpt("350m", "A100-80GB", 8192, 8, 2, 292559),
    mpt("760m", "A100-80GB", 1024, 48, 2, 238122),
    mpt("760m", "A100-80GB", 4096, 12, 2, 218808, fast=True),
    mpt("760m", "A100-80GB", 8192, 6, 2, 167471),
    mpt("1b", "A100-80GB", 1024, 18, 4, 176898),
    mpt("1b", "A100-80GB", 4096, 7, 4, 142457),
    mpt("760m", "H100", 1024, 48, 2, 628648),
    mpt("760m", "H100", 4096, 12, 2, 443674),
    mpt("1b", "H100", 1024, 18, 4, 391287),
    mpt("1b", "H100", 4096, 7, 4, 308282, fast=True),
    mpt("1b", "H100", 8192, 3, 4, 233256),
    narayanan(1.7, 24, 2304, 24, 1, 32, 512, 137, fast=True),
    narayanan(3.6, 32, 3072, 30, 2, 64, 512, 138),
    narayanan(7.5, 32, 4096, 36, 4, 128, 512, 142),
    # Korthikanti et al. 2022 (selective recomputation + sequence parallelism; the Megatron-LM README's table):
    # 22B (48 layers, h 6144, 64 heads, seq 2048), TP 8 on one DGX A100, batch 4: MFU 41.5% of 312 TFLOP/s
    # (model FLOPs 72 B s l h^2 (1 + s / 6h + V / 12 l h), vocabulary 51,200)
    Anchor("Megatron-LM GPT 22B, TP 8, 8 A100", "Korthikanti et al. 2022; Megatron-LM README (MFU 41.5%)",
           "megatron", "A100-80GB", 1, 8, dict(n_layer=48, n_embd=6144, n_head=64, vocab=51200), 2048, 4, 1,
           "pipeshard", dict(tensor=8, pipeline=1, data=1), False,
           72 * 4 * 2048 * 48 * 6144 ** 2 * (1 + 2048 / (6 * 6144) + 51200 / (12 * 48 * 6144)) / (0.415 * 312e12 * 8),
           "MFU 41.5%", True),
    # Megatron-LM v1.0 (NVIDIA ADLR blog "MegatronLM's Supercharged V1.0", 2020): the 1.2B GPT-2 (40 layers,
    # h 1536, 16 heads, seq 1024) on one V100 of a DGX-2H, batch 8, activation checkpointing: 1288 ms a step
    # (62.4 TFLOP/s, 48% of that V100's peak)
    Anchor("Megatron-LM v1.0 GPT-2 1.2B, 1 V100 (DGX-2H)", "NVIDIA ADLR, MegatronLM's Supercharged V1.0 (2020)",
           "megatron-2020", "V100-SXM3-DGX2H", 1, 1, dict(n_layer=40, n_embd=1536, n_head=16, vocab=50304), 1024, 8, 1,
           "data", None, True, 1.288, "1288 ms a step", True),
]

# a runtime the anchors need that geosim does not ship, added as a user adds one: a parameters file
RUNTIMES_FILE = ROOT / "bench" / "anchors" / "megatron-2020.toml"

# GPUs the catalog lacks, written as a scenario would (a hand-written GPU names its generation)
EXTRA_GPUS = {
    # a DGX-2H's V100 SXM3 32 GB at 450 W: 130 TFLOP/s fp16 tensor (62.4 TFLOP/s is "48% of the theoretical
    # peak" in the blog above), HBM2 at 900 GB/s (NVIDIA DGX-2H datasheet)
    "V100-SXM3-DGX2H": {"architecture": "volta", "memory_gib": 32, "memory_bandwidth_gbs": 900,
                        "fp32_tflops": 16.3, "fp16_tensor_tflops": 130.0, "pcie_gen": 3},
}


def scenario_text(a: Anchor) -> str:
    lines = [f'name = "anchor"']
    if a.gpu in EXTRA_GPUS:
        lines += [f"[gpus.{a.gpu}]"] + [f"{k} = {json.dumps(v)}" for k, v in EXTRA_GPUS[a.gpu].items()]
    lines += ["[models.anchor]", f"n_ctx = {a.seq_len}"] + [f"{k} = {v}" for k, v in a.model.items()]
    # a DGX: NVLink inside, an InfiniBand port per GPU at nic_gbps (RDMA: NCCL's IB transport), every host on
    # the site's switch (a non-blocking fat tree)
    for i in range(a.hosts):
        lines += ["[[hosts]]", f'name = "n{i}"', 'site = "DC"', f"gpus = {json.dumps([a.gpu] * a.gpus_per_host)}",
                  'intra_host = "nvlink"', 'nic = "per-gpu"', 'transport = "rdma"', f"nic_gbps = {a.nic_gbps}"]
    return "\n".join(lines) + "\n"


def predict_anchor(a: Anchor, params=None, network: str | None = None) -> dict:
    from geosim.inputs.case import DEFAULT_NETWORK, Case
    from geosim.inputs.params import load_params
    from geosim.predict import predict
    from geosim.inputs.scenario import load_scenario
    from geosim.techniques import layout_options

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "anchor.toml"
        path.write_text(scenario_text(a))
        scenario = load_scenario(path)
    workload = replace(scenario.workload(), seq_len=a.seq_len, global_batch=a.global_batch,
                       microbatches=a.microbatches, precision=a.precision, checkpointing=a.checkpointing,
                       runtime=a.runtime, epochs=1, tokens_per_epoch=a.global_batch * a.seq_len * 3)
    network = network or DEFAULT_NETWORK
    if params is None:  # the shipped parameters, with the runtime bench/anchors/ adds (a user's own, in a file)
        params = load_params(RUNTIMES_FILE)
    case = Case(scenario.cluster, scenario.models["anchor"], workload, params, network=network)
    hosts = tuple(h.name for h in case.cluster.hosts)
    options = layout_options(a.technique, case, hosts, **a.layout) if a.layout else None
    p = predict(case, a.technique, hosts, options=options)
    step = p.iteration_time_s
    return {"anchor": a.name, "source": a.source, "runtime": a.runtime, "gpu": a.gpu, "gpus": a.hosts * a.gpus_per_host,
            "published": a.published, "published_step_s": a.published_step_s, "predicted_step_s": step,
            "error": None if step is None else step / a.published_step_s - 1, "status": p.status,
            "reason": p.reason, "estimated": p.estimated, "generation": generation_of(a),
            "fitted_to": a.fit, "network": network,
            "command": "python bench/compute_anchors.py" + (" --fast" if a.fast else "")
            + (f" --network {network}" if network != DEFAULT_NETWORK else "")}


def summary(rows: list[dict]) -> dict:
    """Over the rows that check (not the ones an entry was fitted to): median and worst |error|, and the runtimes
    and generations they cover."""
    checks = [r for r in rows if not r["fitted_to"] and r["error"] is not None]
    errors = [abs(r["error"]) for r in checks]
    return {"anchors": len(checks), "fitted_rows": sum(1 for r in rows if r["fitted_to"]),
            "median_abs_error": statistics.median(errors) if errors else None,
            "worst_abs_error": max(errors) if errors else None,
            "runtimes": sorted({r["runtime"] for r in checks}), "generations": sorted({r["generation"] for r in checks})}


def fit(runtime: str, generation: str) -> float:
    """The large-GEMM fraction of `runtime` on `generation` that makes the median log error of the rows marked
    fit=True for them zero (bisection; the entry's other numbers as shipped)."""
    import math

    from geosim.inputs.params import load_params
    from geosim.inputs.runtime import runtime_of
    from geosim.inputs.specs import Efficiency, Workload

    rows = [a for a in ANCHORS if a.fit and a.runtime == runtime and generation_of(a) == generation]
    if not rows:
        raise SystemExit(f"no anchor is marked fit=True for {runtime} on {generation}")
    base = load_params(RUNTIMES_FILE)
    rt = runtime_of(Workload(runtime=runtime), base)
    entry = dict(rt.efficiency).get(generation) or replace(rt.estimate(), generation=generation)

    def median_log_error(fraction: float) -> float:
        e = Efficiency(generation, "published", "fit", fraction, entry.memory_fraction, entry.gemm_half_s)
        eff = tuple(sorted({**dict(rt.efficiency), generation: e}.items()))
        params = replace(base, runtimes={**base.runtimes, runtime: replace(rt, efficiency=eff)})
        return statistics.median(math.log(predict_anchor(a, params)["predicted_step_s"] / a.published_step_s)
                                 for a in rows)

    low, high = 0.05, 1.0
    for _ in range(30):
        mid = (low + high) / 2
        low, high = (mid, high) if median_log_error(mid) > 0 else (low, mid)
    return (low + high) / 2


def generation_of(a: Anchor) -> str:
    from geosim.inputs.scenario import gpu_catalog

    return gpu_catalog()[a.gpu].architecture if a.gpu in gpu_catalog() else EXTRA_GPUS[a.gpu]["architecture"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/compute_anchors.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="only the anchors the test runs")
    ap.add_argument("--json", action="store_true", help="the rows and the summary as JSON")
    ap.add_argument("--network", choices=("fabric", "alpha-beta", "tcp", "ideal"), default=None,
                    help="the network backend (default: geosim's, fabric)")
    ap.add_argument("--fit", metavar="RUNTIME:GENERATION",
                    help="print the GEMM fraction that zeroes the median error of the rows marked fit=True")
    args = ap.parse_args(argv)
    if args.fit:
        runtime, _, generation = args.fit.partition(":")
        print(f"{runtime} on {generation}: gemm_fraction = {fit(runtime, generation):.3f}")
        return 0
    rows = [predict_anchor(a, network=args.network) for a in ANCHORS if a.fast or not args.fast]
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary(rows)}, indent=1, allow_nan=False))
        return 0
    print(f"{'anchor':<56} {'runtime':<13} {'GPU':<16} {'published':<22} {'step s':>8} {'predicted':>9} {'error':>7}")
    for r in rows:
        err = f"{r['error']:+.0%}" if r["error"] is not None else r["status"]
        pred = f"{r['predicted_step_s']:.3g}" if r["predicted_step_s"] else "-"
        role = "fitted" if r["fitted_to"] else ("estimated" if r["estimated"] else "")
        print(f"{r['anchor']:<56} {r['runtime']:<13} {r['gpu']:<16} {r['published']:<22} "
              f"{r['published_step_s']:>8.3g} {pred:>9} {err:>7}  {role}" + (f"  ({r['reason']})" if r["reason"] else ""))
    s = summary(rows)
    if s["median_abs_error"] is not None:
        print(f"checks (fitted rows left out): median |error| {s['median_abs_error']:.0%}, worst "
              f"{s['worst_abs_error']:.0%} over {s['anchors']} anchors; runtimes {', '.join(s['runtimes'])}; "
              f"generations {', '.join(s['generations'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
