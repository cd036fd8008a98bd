"""The op-level kernel timer against rooflines computed by hand from the datasheet."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from geosim.inputs.scenario import gpu_catalog, model_catalog
from geosim.inputs.specs import ComputeConstants
from geosim.sim.compute import (KernelTimer, Gemm, MemoryOp, Work, architecture, block_backward,
                                block_forward, gemm_seconds, head_backward, head_forward, kernel_flops, kernels,
                                memory_seconds, op_seconds, sustained_tensor_tflops)

CATALOG = gpu_catalog()
RTX, T4, A30 = CATALOG["RTX6000"], CATALOG["T4"], CATALOG["A30"]
GPT2M = model_catalog()["gpt2m"]
# no ramp, no launch gap, full bandwidth: the bare roofline
BARE = ComputeConstants(gemm_fraction=0.5, gemm_half_s=0.0, memory_fraction=1.0, kernel_s=0.0)
# the kernel timer's priors (geosim/base/parameters.py): a set of constants unlike the shipped fit
PRIOR = ComputeConstants(gemm_fraction=0.7, gemm_half_s=20e-6, memory_fraction=0.8, kernel_s=5e-6)
REL = 1e-12


def test_large_gemm_runs_at_the_fraction_of_the_tensor_peak():
    op = Gemm("big", 8192, 8192, 8192)
    expected = 2 * 8192 ** 3 / (130.5e12 * 0.5)  # RTX 6000: 130.5 fp16 tensor TFLOP/s
    assert gemm_seconds(op, RTX, "fp16", BARE) == pytest.approx(expected, rel=REL)


def test_fp32_gemm_uses_the_fp32_peak_and_four_byte_values():
    op = Gemm("big", 4096, 4096, 4096)
    assert gemm_seconds(op, RTX, "fp32", BARE) == pytest.approx(2 * 4096 ** 3 / (16.3e12 * 0.5), rel=REL)
    skinny = Gemm("skinny", 8192, 8192, 8)
    assert gemm_seconds(skinny, RTX, "fp32", BARE) == pytest.approx(
        (8192 * 8 + 8 * 8192 + 8192 * 8192) * 4 / 672e9, rel=REL)


def test_skinny_gemm_is_bound_by_memory_bandwidth():
    # K = 16: 2*M*N*16 FLOPs over (M*K + K*N + M*N)*2 bytes = ~16 FLOP/byte, far below the
    # RTX 6000's ridge point (65 TFLOP/s / 672 GB/s = 97 FLOP/byte)
    op = Gemm("skinny", 8192, 8192, 16)
    nbytes = (8192 * 16 + 16 * 8192 + 8192 * 8192) * 2
    assert gemm_seconds(op, RTX, "fp16", BARE) == pytest.approx(nbytes / 672e9, rel=REL)
    assert nbytes / 672e9 > op.flops / (130.5e12 * 0.5)


def test_a_gemm_of_rate_times_half_s_flops_runs_at_half_rate():
    eff = ComputeConstants(gemm_fraction=0.5, gemm_half_s=20e-6, memory_fraction=1.0, kernel_s=0.0)
    rate = 130.5e12 * 0.5
    n = round((rate * 20e-6 / 2) ** (1 / 3))  # a cube of ~rate*half FLOPs
    op = Gemm("cube", n, n, n)
    achieved = op.flops / gemm_seconds(op, RTX, "fp16", eff)
    assert achieved == pytest.approx(rate * op.flops / (op.flops + rate * 20e-6), rel=1e-9)
    assert 0.45 < achieved / rate < 0.55


def test_memory_op_at_the_bandwidth_fraction_plus_a_launch():
    eff = replace(PRIOR, memory_fraction=0.8, kernel_s=5e-6)
    assert memory_seconds(MemoryOp("x", 1e9), A30, eff) == pytest.approx(1e9 / (933e9 * 0.8) + 5e-6, rel=REL)
    assert op_seconds(MemoryOp("x", 1e9), A30, "fp16", eff) == memory_seconds(MemoryOp("x", 1e9), A30, eff)


def test_block_gemm_flops_are_alpas_count():
    # Alpa's compute_gpt_tflops: forward = 24*B*S*H^2*(1 + S/(6H)) per block; backward twice that
    b, s = 4, 1024
    forward = kernel_flops(block_forward(GPT2M, b, s, "fp16"))
    assert forward == pytest.approx(GPT2M.layer_forward_flops(b * s, s), rel=REL)
    assert kernel_flops(block_backward(GPT2M, b, s, "fp16")) == pytest.approx(2 * forward, rel=REL)
    head = kernel_flops(head_forward(GPT2M, b, s, "fp16"))
    assert head == pytest.approx(GPT2M.head_forward_flops(b * s), rel=REL)
    assert kernel_flops(head_backward(GPT2M, b, s, "fp16")) == pytest.approx(2 * head, rel=REL)


def test_tensor_parallel_splits_gemm_flops_but_not_layer_norms():
    one = block_forward(GPT2M, 8, 1024, "fp16")
    four = block_forward(GPT2M, 8, 1024, "fp16", tensor_parallel=4)
    assert kernel_flops(four) == pytest.approx(kernel_flops(one) / 4, rel=REL)
    ln = [op.nbytes for op in one if op.label == "ln1"]
    assert ln == [op.nbytes for op in four if op.label == "ln1"] == [2 * 8 * 1024 * 1024 * 2]


def test_attention_memory_traffic_grows_with_the_square_of_sequence_length():
    def softmax_bytes(s):
        return next(op.nbytes for op in block_forward(GPT2M, 1, s, "fp16") if op.label == "mask+softmax")
    # 4 passes over batch x heads x S x S two-byte values
    assert softmax_bytes(1024) == 4 * 16 * 1024 * 1024 * 2
    assert softmax_bytes(1024) / softmax_bytes(512) == pytest.approx(4.0)


def test_one_block_on_a_hand_computed_roofline():
    """gpt2m, 1 sequence of 1024 tokens, RTX 6000, bare roofline: sum every kernel by hand."""
    T, h, a, s, e = 1024, 1024, 16, 1024, 2
    rate, bw = 130.5e12 * 0.5, 672e9

    def gemm(m, n, k, batch=1):
        return max(2 * m * n * k * batch / rate, (m * k + k * n + m * n) * batch * e / bw)

    d = h // a
    expected = (gemm(T, 3 * h, h) + gemm(s, s, d, a) + gemm(s, d, s, a) + gemm(T, h, h)
                + gemm(T, 4 * h, h) + gemm(T, h, 4 * h))
    memory_bytes = (2 * T * h * e + 2 * T * 3 * h * e + 4 * a * s * s * e + 2 * T * h * e + T * h * 3 * e
                    + 2 * T * h * e + 2 * T * 4 * h * e + T * h * 3 * e)
    expected += memory_bytes / bw
    work = Work("forward", GPT2M, 1, 1024, 1, dropout=False)
    assert KernelTimer(BARE).seconds(work, RTX, "fp16") == pytest.approx(expected, rel=1e-9)


def test_layers_are_timed_once_and_multiplied():
    model = KernelTimer(PRIOR)
    work = Work("backward", GPT2M, 4, 1024, GPT2M.n_layer, head=True, embedding=True)
    direct = sum(op_seconds(op, RTX, "fp16", model.constants) for op in kernels(work, "fp16"))
    assert model.seconds(work, RTX, "fp16") == pytest.approx(direct, rel=1e-9)


def test_remat_backward_adds_one_forward():
    model = KernelTimer(PRIOR)
    plain = Work("backward", GPT2M, 4, 1024, 6)
    assert model.seconds(plain._replace(remat=True), RTX, "fp16") == pytest.approx(
        model.seconds(plain, RTX, "fp16") + model.seconds(plain._replace(phase="forward"), RTX, "fp16"), rel=1e-9)


def test_optimizer_and_accumulation_by_bytes():
    eff = replace(PRIOR, memory_fraction=1.0, kernel_s=0.0)
    model = KernelTimer(eff)
    n = GPT2M.num_params
    assert model.seconds(Work("optimizer", GPT2M, params=n), RTX, "fp16") == pytest.approx(n * 32 / 672e9, rel=REL)
    assert model.seconds(Work("update", GPT2M, params=n), RTX, "fp16") == pytest.approx(n * 16 / 672e9, rel=REL)
    assert model.seconds(Work("update", GPT2M, params=n), RTX, "fp32") == pytest.approx(n * 12 / 672e9, rel=REL)


def test_architecture_from_the_catalog_name():
    assert architecture(RTX) == "turing" and architecture(A30) == "ampere"
    constants = replace(PRIOR, gemm_fraction=0.6, by_generation=(("ampere", (0.7, 0.5, 1e-5)), ("turing", None)))
    model = KernelTimer(constants)
    assert model.constants_for(A30).gemm_fraction == 0.7 and model.constants_for(A30).memory_fraction == 0.5
    assert model.constants_for(T4).gemm_fraction == 0.6  # an entry of the global constants (alpa's fit)
    # a generation without an entry: the runtime's estimate; a device of no GPU generation: the global constants
    estimated = replace(constants, by_generation=(), estimate=(0.8, 0.6, 2e-5))
    assert KernelTimer(estimated).constants_for(A30).gemm_fraction == 0.8
    cpu = replace(A30, name="CPU", architecture="cpu")
    assert KernelTimer(estimated).constants_for(cpu).gemm_fraction == 0.6


def step_seconds(gpu, eff: ComputeConstants) -> float:
    model = KernelTimer(eff)
    work = Work("backward", GPT2M, 4, 1024, GPT2M.n_layer, head=True, embedding=True)
    return model.seconds(work, gpu, "fp16") + model.seconds(work._replace(phase="forward"), gpu, "fp16")


def test_a_gpu_with_more_flops_and_bandwidth_is_never_slower():
    """Every ordered pair of the catalog where one GPU's sustained tensor TFLOP/s (its datasheet's, capped by
    its board power) and bandwidth are both at least the other's: it is at least as fast, under the shipped
    fractions and under very different ones."""
    dominated = 0
    for a, b in itertools.permutations(sorted(CATALOG), 2):
        ga, gb = CATALOG[a], CATALOG[b]
        if (sustained_tensor_tflops(ga, "fp16") >= sustained_tensor_tflops(gb, "fp16")
                and ga.memory_bandwidth_gbs >= gb.memory_bandwidth_gbs):
            dominated += 1
            for eff in (PRIOR, replace(PRIOR, gemm_fraction=0.2, memory_fraction=0.9, gemm_half_s=1e-4)):
                assert step_seconds(ga, eff) <= step_seconds(gb, eff), (a, b)
    assert dominated >= 10  # the check is not vacuous


def test_power_dense_cards_are_capped_at_their_generations_tflops_per_watt():
    # Turing's least power-dense card is the RTX 6000 (130.5 TFLOP/s in 295 W): the T4 (65 in 70 W) is capped
    assert sustained_tensor_tflops(RTX, "fp16") == 130.5
    assert sustained_tensor_tflops(T4, "fp16") == pytest.approx(70 * 130.5 / 295)
    # Ampere's is the A100 (312 in 400 W): the A30 (165 in 165 W) is capped at 128.7
    assert sustained_tensor_tflops(A30, "fp16") == pytest.approx(165 * 312 / 400)
    assert sustained_tensor_tflops(CATALOG["H100"], "fp16") == 989.0  # Hopper's least power-dense card
    # the PCIe H100 (756 in 350 W) is capped at Hopper's 989 / 700 TFLOP/s per W, its TF32 rate alike
    assert sustained_tensor_tflops(CATALOG["H100-PCIe"], "bf16") == pytest.approx(350 * 989 / 700)
    assert sustained_tensor_tflops(CATALOG["H100-PCIe"], "fp32", tf32=True) == pytest.approx(378 * 350 * 989 / 700 / 756)
    assert sustained_tensor_tflops(CATALOG["H100"], "fp32", tf32=True) == 494.0  # TF32 tensor cores
    assert sustained_tensor_tflops(T4, "fp32", tf32=True) == 8.1  # Turing has none
    assert sustained_tensor_tflops(T4, "fp32") == 8.1  # CUDA cores: not capped
    assert sustained_tensor_tflops(replace(T4, tdp_w=None), "fp16") == 65.0


def test_gpu_speed_ratio_follows_the_datasheet():
    # the T4: 31 capped tensor TFLOP/s against the RTX 6000's 130.5 (4.2x), 320 GB/s against 672 (2.1x): a step
    # between the two ratios, whatever the fractions
    for eff in (PRIOR, replace(PRIOR, gemm_fraction=0.3, memory_fraction=0.5)):
        ratio = step_seconds(T4, eff) / step_seconds(RTX, eff)
        assert 2.1 < ratio < 4.2
