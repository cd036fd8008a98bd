"""Attention as its kernels run (issue 41 item 3): fused (flash) attention at its own fraction of the tensor
peak by head dimension and sequence length, its backward's recomputation counted, the causal half; unfused
attention per head. Formulas by hand; properties with hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from geosim.base.errors import GeosimError
from geosim.inputs.scenario import gpu_catalog
from geosim.sim.attention import flash_curve, flash_curves, flash_fraction, interpolate, parse_table
from geosim.sim.compute import (KernelTimer, FusedAttention, Gemm, MemoryOp, Work, attention_ops, block_backward,
                                block_forward, op_seconds)
from geosim.inputs.specs import ComputeConstants, Model

EFF = ComputeConstants(gemm_fraction=0.8, gemm_half_s=20e-6, memory_fraction=0.7, kernel_s=3e-6)


def test_fused_forward_and_backward_flops_and_bytes_by_hand():
    b, s, d, a, e = 2, 1024, 64, 16, 2
    (fwd,) = attention_ops(b, s, d, a, e, dropout=False, fused=True)
    assert fwd.flops == pytest.approx(4 * s * s * d * b * a / 2)  # two products, causal half
    assert fwd.nbytes == pytest.approx(4 * b * s * d * a * e)  # q, k, v, o
    model = Model("m", 1, d * a, a)
    (bwd,) = [op for op in block_backward(model, b, s, "bf16", fused_attention=True) if type(op) is FusedAttention]
    assert bwd.flops == pytest.approx(2.5 * fwd.flops)  # recomputed scores: 5 products to the forward's 2
    assert bwd.nbytes == pytest.approx(2 * fwd.nbytes) and bwd.backward and not fwd.backward


def test_fused_time_at_the_generations_own_fraction_by_hand():
    h100 = gpu_catalog()["H100"]
    op = FusedAttention("fa", 1e12, 1e6, 64, 1024)
    fraction = flash_curve("hopper").forward[0][1] * 1024 / (1024 + flash_curve("hopper").seq_half)
    expected = 1e12 / (h100.peak_tflops("bf16", False) * 1e12 * fraction) + EFF.kernel_s
    assert op_seconds(op, h100, "bf16", EFF) == pytest.approx(expected)
    # backward runs at its own (lower) fraction; fp32 (no flash kernel) falls back to the GEMM roofline
    assert op_seconds(op._replace(backward=True), h100, "bf16", EFF) > op_seconds(op, h100, "bf16", EFF)


def test_unfused_attention_per_head_by_hand():
    b, s, d, a, e = 2, 512, 64, 16, 2
    scores, softmax, probs = attention_ops(b, s, d, a, e, dropout=False, fused=False)
    assert scores == Gemm("scores", s, s, d, b * a) and probs == Gemm("probs@v", s, d, s, b * a)
    assert scores.flops == pytest.approx(2 * s * s * d * b * a)  # every score: the mask only zeroes them
    assert softmax == MemoryOp("mask+softmax", 4 * b * a * s * s * e)


def test_sixteen_and_thirty_two_heads_of_one_width_differ_unfused_not_fused_flops():
    h100 = gpu_catalog()["H100"]
    wide, narrow = Model("a16", 24, 2048, 16), Model("a32", 24, 2048, 32)
    work = lambda m: Work("backward", m, 4, 2048, 24)  # noqa: E731
    unfused = KernelTimer(EFF)
    assert unfused.seconds(work(narrow), h100, "bf16") > 1.05 * unfused.seconds(work(wide), h100, "bf16")
    # fused: the same FLOPs and bytes, but head dim 64 runs at a lower fraction than 128
    fused = KernelTimer(ComputeConstants(**{**EFF.__dict__, "fused_attention": True}))
    assert fused.seconds(work(narrow), h100, "bf16") > fused.seconds(work(wide), h100, "bf16")


def test_grouped_query_heads_change_only_the_bytes():
    (mha,) = attention_ops(1, 4096, 128, 32, 2, False, True)
    (gqa,) = attention_ops(1, 4096, 128, 32, 2, False, True, kv_heads=8)
    assert gqa.flops == mha.flops and gqa.nbytes == pytest.approx(mha.nbytes * (2 * 32 + 2 * 8) / (4 * 32))


def test_the_table_published_figures_and_interpolation():
    ampere = flash_curve("ampere")
    assert dict(ampere.forward)[128] == 0.73 and dict(ampere.backward)[128] == 0.63  # FlashAttention-2 on A100
    assert ampere.kind == "published" and "2307.08691" in ampere.source
    assert interpolate(((64, 0.5), (128, 0.7)), 90.5) == pytest.approx(0.6, abs=1e-3)  # log2 midpoint
    assert interpolate(((64, 0.5), (128, 0.7)), 32) == 0.5 and interpolate(((64, 0.5), (128, 0.7)), 256) == 0.7
    assert flash_curve("no-such-generation") == flash_curves()["default"]
    for curve in flash_curves().values():
        assert curve.kind in ("published", "measured", "estimated") and curve.source


@pytest.mark.parametrize("text, key", [
    ('[x]\nforward = {64 = 1.5}\nbackward = {64 = 0.5}\nseq_half = 1\nkind = "published"', "x.forward"),
    ('[x]\nforward = {64 = 0.5}\nbackward = {64 = 0.5}\nseq_half = -1\nkind = "published"', "x.seq_half"),
    ('[x]\nforward = {64 = 0.5}\nbackward = {64 = 0.5}\nseq_half = 1\nkind = "guessed"', "x.kind"),
    ('[x]\nforward = {d = 0.5}\nbackward = {64 = 0.5}\nseq_half = 1\nkind = "measured"', "x.forward"),
])
def test_a_bad_table_is_one_line_naming_the_key(text, key):
    with pytest.raises(GeosimError) as err:
        parse_table(text, "t.toml")
    assert err.value.key == key and "\n" not in str(err.value)


GENERATIONS = sorted(flash_curves())


@settings(max_examples=80, deadline=None)
@given(generation=st.sampled_from(GENERATIONS), d=st.sampled_from([32, 64, 80, 96, 128, 256]),
       s=st.integers(64, 65536), backward=st.booleans())
def test_the_fraction_rises_with_sequence_length_and_stays_below_one(generation, d, s, backward):
    f = flash_fraction(generation, d, s, backward)
    assert 0 < f <= 1 and flash_fraction(generation, d, 2 * s, backward) >= f


@settings(max_examples=40, deadline=None)
@given(gpu=st.sampled_from(["A100-80GB", "H100", "T4", "V100", "L40S"]), heads=st.sampled_from([4, 8, 16]),
       s=st.sampled_from([256, 1024, 4096, 16384]), fused=st.booleans())
def test_time_monotone_in_sequence_length_and_fused_never_writes_scores(gpu, heads, s, fused):
    g = gpu_catalog()[gpu]
    model = Model("m", 2, 64 * heads, heads, n_ctx=65536)
    cm = KernelTimer(ComputeConstants(**{**EFF.__dict__, "fused_attention": fused}))
    for phase in ("forward", "backward"):
        shorter = cm.seconds(Work(phase, model, 2, s, 2), g, "bf16")
        assert cm.seconds(Work(phase, model, 2, 2 * s, 2), g, "bf16") >= shorter
    if fused:  # bytes linear in S: no S x S buffer is written or read
        ops = block_forward(model, 2, s, "bf16", fused_attention=True) + block_backward(model, 2, s, "bf16",
                                                                                      fused_attention=True)
        assert not any("softmax" in op.label or "scores" in op.label for op in ops)
        (a,) = attention_ops(2, s, 64, heads, 2, False, True)
        (a2,) = attention_ops(2, 2 * s, 64, heads, 2, False, True)
        assert a2.nbytes == pytest.approx(2 * a.nbytes)


@settings(max_examples=40, deadline=None)
@given(gpu=st.sampled_from(["A100-40GB", "H100", "T4", "RTX6000"]), width=st.sampled_from([512, 1024, 2048]),
       s=st.sampled_from([128, 1024, 4096]), phase=st.sampled_from(["forward", "backward"]))
def test_more_heads_at_equal_width_never_cheaper_unfused(gpu, width, s, phase):
    g, cm = gpu_catalog()[gpu], KernelTimer(EFF)
    times = [cm.seconds(Work(phase, Model("m", 2, width, a), 2, s, 2), g, "bf16") for a in (4, 8, 16, 32)]
    assert times == sorted(times)
