"""The Alpa/XLA memory layout against layouts counted by hand, one per technique."""

from __future__ import annotations

from dataclasses import replace

import pytest

from geosim.inputs.scenario import model_catalog
from geosim.sim.memory_layout import (FITS, MAY_NOT_FIT, OUT_OF_MEMORY, LayoutOptions, activations, auto_sharded,
                                      block_residual_bytes_per_token, data_parallel, live_step, LivePlacement,
                                      pipeline_stage, verdict, zero2)
from geosim.inputs.specs import GIB

GPT2M = model_catalog()["gpt2m"]
GPT2L = model_catalog()["gpt2l"]
MIXED = LayoutOptions(workspace_bytes=0.0)
S = 1024


def test_block_residuals_per_token_by_hand():
    # gpt2m: 16 h-wide fp16 values and the softmax's 16 heads x 1024 fp16 values
    assert block_residual_bytes_per_token(GPT2M, S, MIXED) == 16 * 1024 * 2 + 16 * 1024 * 2
    # dropout: two one-byte h-wide masks, a one-byte mask and the dropped fp16 probabilities per score
    with_dropout = LayoutOptions(dropout=True)
    assert block_residual_bytes_per_token(GPT2M, S, with_dropout) == 16 * 1024 * 2 + 16 * 1024 * 2 + 2 * 1024 + 16 * 1024 * 3
    # ... which is Korthikanti et al.'s 34*h + 5*a*S bytes per token exactly
    assert block_residual_bytes_per_token(GPT2M, S, with_dropout) == 34 * 1024 + 5 * 16 * 1024


def test_tensor_parallel_residuals_keep_the_layer_norms_whole():
    # 4 of the 16 h-wide values replicated, 12 split four ways; the scores split by heads
    assert block_residual_bytes_per_token(GPT2M, S, MIXED, tensor_parallel=4) == (4 + 12 / 4) * 1024 * 2 + 16 * 1024 * 2 / 4


def test_data_parallel_layout_by_hand():
    n, b = GPT2M.num_params, 4
    parts = data_parallel(GPT2M, b, S, MIXED)
    assert parts["weights"] == 2 * n and parts["master"] == 4 * n and parts["gradients"] == 2 * n
    assert parts["optimizer"] == 8 * n
    tokens = b * S
    block = 16 * 1024 * 2 + 16 * 1024 * 2
    head_residual = 2 * 1024 * 2 + 50257 * 2
    assert parts["activations"] == pytest.approx(tokens * (24 * block + head_residual))
    # the larger transient: the LM head's gradient (50257 fp16 values per token) beats a block's score gradients
    assert parts["transient"] == pytest.approx(tokens * max(2 * 16 * 1024 * 2 + 8 * 1024 * 2, 50257 * 2))
    assert parts["workspace"] == 0.0


def test_fp32_has_no_master_copy():
    parts = data_parallel(GPT2M, 1, S, LayoutOptions(precision="fp32", workspace_bytes=0.0))
    n = GPT2M.num_params
    assert (parts["weights"], parts["master"], parts["gradients"], parts["optimizer"]) == (4 * n, 0.0, 4 * n, 8 * n)


def test_zero2_shards_master_gradients_and_moments_and_holds_a_whole_microbatch_gradient():
    n = GPT2M.num_params
    parts = zero2(GPT2M, 2, S, 4, MIXED)
    assert parts["weights"] == 2 * n
    assert parts["master"] == pytest.approx(4 * n / 4) and parts["gradients"] == pytest.approx(2 * n / 4)
    assert parts["optimizer"] == pytest.approx(8 * n / 4)
    assert parts["transient"] == pytest.approx(data_parallel(GPT2M, 2, S, MIXED)["transient"] + 2 * n)


def test_auto_sharding_splits_the_block_matrices_and_replicates_the_rest():
    n = GPT2M.num_params
    matrices = 24 * 12 * 1024 ** 2
    parts = auto_sharded(GPT2M, 8, S, 4, MIXED)
    assert parts["optimizer"] == pytest.approx(8 * ((n - matrices) + matrices / 4))
    # more than Megatron's perfect split, less than a replica
    assert 8 * n / 4 < parts["optimizer"] < 8 * n
    tokens = 8 * S
    block = (4 + 12 / 4) * 1024 * 2 + 16 * 1024 * 2 / 4
    head = 2 * 1024 * 2 + 50257 / 4 * 2
    assert parts["activations"] == pytest.approx(tokens * (24 * block + head))


def test_one_vm_pipeline_stages_are_one_gpu_each():
    """gpt2m on one VM as Alpa runs it: two stages of 12 blocks, a microbatch of 8 sequences each,
    1F1B keeps 2 microbatches in flight on the first stage and 1 on the last."""
    first = pipeline_stage(GPT2M, 8, S, 12, True, False, 2, 2, MIXED)
    last = pipeline_stage(GPT2M, 8, S, 12, False, True, 2, 1, MIXED)
    layer = 12 * 1024 ** 2 + 13 * 1024
    assert first["optimizer"] == 8 * (12 * layer + GPT2M.embedding_params)
    assert last["optimizer"] == 8 * (12 * layer + 50257 * 1024 + 2 * 1024)
    block = 16 * 1024 * 2 + 16 * 1024 * 2
    assert first["activations"] == pytest.approx(2 * 8 * S * 12 * block)
    assert last["activations"] == pytest.approx(8 * S * (12 * block + 2 * 1024 * 2 + 50257 * 2))
    # 1F1B: the first stage's two microbatches of 12 blocks hold as much as one of 24; its states
    # are half a replica's, so it needs less than a one-GPU Data replica of the same microbatch
    replica = sum(data_parallel(GPT2M, 8, S, MIXED).values())
    assert sum(first.values()) < 0.9 * replica and sum(last.values()) < 0.7 * replica


def test_remat_keeps_only_block_inputs():
    plain = activations(GPT2M, 4, S, 24, False, MIXED)
    remat = activations(GPT2M, 4, S, 24, False, LayoutOptions(remat=True, workspace_bytes=0.0))
    tokens = 4 * S
    assert remat.residual == pytest.approx(tokens * 24 * 1024 * 2)
    assert remat.transient == pytest.approx(plain.residual / 24 + plain.transient)


def test_gpt2l_data_fits_where_the_study_ran_it():
    """gpt2l data parallel: on one VM of two 24 GiB A30s (4 sequences per GPU per microbatch) it fits;
    on four 16 GiB T4s (2 sequences per GPU) it is close to the edge: may not fit, not a flat no."""
    options = LayoutOptions()
    a30 = verdict(sum(data_parallel(GPT2L, 4, S, options).values()), 24, options)
    assert a30.status == FITS, a30.describe()
    t4 = verdict(sum(data_parallel(GPT2L, 2, S, options).values()), 16, options)
    assert t4.status in (FITS, MAY_NOT_FIT), t4.describe()


def test_verdict_bands():
    options = LayoutOptions(usable_fraction=0.9, margin_fraction=0.1)
    usable = 16 * GIB * 0.9
    assert verdict(0.85 * usable, 16, options).status == FITS
    assert verdict(0.85 * usable, 16, options).describe() == "fits: needs 12.2 of 14.4 GiB usable"
    near = verdict(0.95 * usable, 16, options)
    assert near.status == MAY_NOT_FIT
    assert near.describe() == "may not fit: needs 13.7 of 14.4 GiB usable, within the model's 10% error"
    assert verdict(1.05 * usable, 16, options).status == MAY_NOT_FIT
    assert verdict(1.2 * usable, 16, options).status == OUT_OF_MEMORY
    assert verdict(1.2 * usable, 16, options).describe() == "does not fit: needs 17.3 of 14.4 GiB usable"
    # the band is the model's error: a wider one turns a near miss into "may not fit"
    assert verdict(1.15 * usable, 16, LayoutOptions(margin_fraction=0.2)).status == MAY_NOT_FIT


# --- live's step (the layout XLA gives `geosim live`'s program), by hand --------------------------

GPT2 = model_catalog()["gpt2"]
FP32 = LayoutOptions(precision="fp32", workspace_bytes=0.0)


def replica(rows, microbatches=1, **changes):
    """Data's placement (live/train/techniques/data.py) of gpt2: two microbatches (the unrolled pair) are in
    flight together, more run one at a time."""
    n = GPT2.num_params
    fields = dict(rows=rows, layers=12, params_held=n, grads_held=n, microbatch_grads=n,
                  in_flight=2 if microbatches == 2 else 1)
    return LivePlacement(**{**fields, **changes})


def test_live_data_step_by_hand():
    """gpt2, one sequence per device, fp32: weights and Adam fp32 (12 B/param), the residuals of 12 blocks
    (20 h-wide values and 2 fp32 scores per token and block), the loss's fp32 logits twice and the tied
    embedding's gradient; the gradients live in the freed activations (no part of their own)."""
    parts = live_step(GPT2, replica(1), 1024, 1, FP32)
    n, tokens = GPT2.num_params, 1024
    assert parts["weights"] == 4 * n and parts["optimizer"] == 8 * n and parts["master"] == 0.0
    assert parts["activations"] == pytest.approx(tokens * 12 * (20 * 768 * 4 + 2 * 12 * 1024 * 4))
    assert parts["transient"] == pytest.approx(tokens * (2 * 50257 * 4 + 2 * 768 * 4) + 50257 * 768 * 4)
    assert parts["gradients"] == 0.0
    # XLA's GPU buffer assignment of this very step (2 A100s, compiled ahead of time): 4041.5 MB
    assert sum(parts.values()) == pytest.approx(4041.5e6, rel=0.01)


def test_live_gradients_show_when_the_activations_are_small():
    """With remat and a short sequence the update (the fp32 gradient and its flat copy: 8 B/param)
    outgrows the turn, and the part beyond it shows as gradients; with microbatches remat keeps the
    fp32 gradient sum carried between them."""
    remat = LayoutOptions(precision="fp32", remat=True, workspace_bytes=0.0)
    parts = live_step(GPT2, replica(1), 16, 1, remat)
    assert parts["gradients"] == pytest.approx(8 * GPT2.num_params - parts["activations"] - parts["transient"])
    carried = live_step(GPT2, replica(1, 4), 1024, 4, remat)
    assert carried["gradients"] >= 4 * GPT2.num_params


def test_live_remat_pair_of_microbatches_turns_before_any_gradient():
    """Under remat, two microbatches (live's one-step scan, which XLA unrolls) run both forwards before
    either backward: the turn holds both microbatches' block inputs and no gradient sum yet. Under Shard
    each device keeps 1/t of a block's input (the partitioner keeps the residual stream split between
    blocks). XLA's GPU buffer assignment (gpt2-medium, fp32, B=8, 2 microbatches, Shard over 4 A100s):
    both heads' logits run one after the other, the peak is 2944 MiB."""
    pytest.importorskip("jax")
    from geosim.techniques.shard import jax_placement as placement

    medium = model_catalog()["gpt2-medium"]
    remat = LayoutOptions(precision="fp32", remat=True, workspace_bytes=0.0)
    pair = placement(medium, 8, 2, 4)
    parts = live_step(medium, pair, 1024, 2, remat)
    assert parts["activations"] == pytest.approx(2 * 4 * 1024 * 24 * 1024 * 4 / 4)  # 2 x 4 rows, h/4 fp32
    assert parts["gradients"] == 0.0  # none yet at the turn; the update's 8 B/param is smaller than the turn
    assert sum(parts.values()) / 2**20 == pytest.approx(2944, rel=0.05)
    # four microbatches run one at a time in the loop: one microbatch's inputs beside the carried fp32 sum
    looped = live_step(medium, placement(medium, 16, 4, 4), 1024, 4, remat)
    assert looped["activations"] == pytest.approx(parts["activations"] / 2)
    assert looped["gradients"] == pytest.approx(4 * medium.num_params / 4)


def test_live_zero2_makes_a_whole_gradient_per_microbatch():
    """ZeRO-2 keeps a 1/n flat shard of the sum, but each microbatch's backward makes the whole gradient
    and its flat copy before the reduce-scatter."""
    n = GPT2.num_params
    zero2 = replica(1, 4, grads_held=n / 4, optimizer_held=n / 4, tree_accumulator=False)
    parts = live_step(GPT2, zero2, 16, 4, LayoutOptions(precision="bf16", remat=True, workspace_bytes=0.0))
    assert parts["optimizer"] == pytest.approx(8 * n / 4)
    assert parts["gradients"] == pytest.approx(8 * n + 4 * n / 4 - parts["activations"] - parts["transient"])


def test_live_accumulation_and_pipeline_in_flight():
    one = live_step(GPT2, replica(2), 1024, 1, FP32)["activations"]
    # two microbatches of half the rows: live's first microbatch outside the scan and the scan's own
    # buffers are not shared, so two halves are in flight
    assert live_step(GPT2, replica(1, 2), 1024, 2, FP32)["activations"] == pytest.approx(one)
    # a pipeline stage (6 blocks) holding 7 ticks of a microbatch of 2 sequences
    pipe = LivePlacement(rows=2, layers=6, params_held=1, grads_held=1, microbatch_grads=1, in_flight=7,
                         head_rows=8, accumulates=False)
    block = 20 * 768 * 4 + 2 * 12 * 1024 * 4
    assert live_step(GPT2, pipe, 1024, 4, FP32)["activations"] == pytest.approx(7 * 2 * 1024 * 6 * block)


def test_live_pipeline_blocks_in_a_scan_keep_jax_residual_list():
    """live's pipeline runs a stage's blocks in a scan inside the scan over ticks, both differentiated
    from outside: each block keeps JAX's own residual list (the layer norms' three fp32 values and their
    outputs, whole on every device; q, k, v, the attention output, the fc output and the GELU's five
    intermediates, split), stacked over the M + S - 1 ticks, beside the whole batch's fp32 logits twice
    and the whole gathered embedding. XLA's GPU buffer assignment of this very step (gpt2, fp32, B=8,
    2 microbatches, 2 stages of 2 tensor-parallel A100s): the stack 8208 MiB, the peak 12097 MiB."""
    pytest.importorskip("jax")
    from geosim.techniques.pipeshard import jax_placement as placement

    pipe = placement(GPT2, 8, 2, 4, 2)
    assert pipe.scanned and pipe.in_flight == 3 and pipe.tensor_parallel == 2
    parts = live_step(GPT2, pipe, 1024, 2, FP32)
    h, t = 768, 2
    block = (6 * 4 + 2 * 4 + 28 * 4 / t) * h + 2 * 4 * 12 * 1024 / t  # per token
    assert parts["activations"] == pytest.approx(3 * 6 * 4 * 1024 * block)
    assert parts["activations"] / 2**20 == pytest.approx(8208, rel=0.001)
    assert parts["transient"] == pytest.approx(8 * 1024 * (2 * 50257 * 4 + 2 * h * 4) + 50257 * h * 4)
    assert sum(parts.values()) / 2**20 == pytest.approx(12097, rel=0.02)
    # the same blocks straight-line (not in a scan) keep XLA's fused list: 20 h-wide values, 2 split over t
    straight = live_step(GPT2, replace(pipe, scanned=False), 1024, 2, FP32)["activations"]
    assert straight == pytest.approx(3 * 6 * 4 * 1024 * ((2 + 18 / t) * h * 4 + 2 * 4 * 12 * 1024 / t))
