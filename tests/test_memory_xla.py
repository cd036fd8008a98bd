"""geosim's per-device peak against XLA's own buffer assignment of live's train step (compiled, never
run): the CI subset of bench/bench_memory.py. The CPU backend runs here always (fp32: it widens
16-bit dots, so 16-bit cases are checked on XLA's GPU compiler only, when the xla-gpu extra is
installed); each device count compiles in its own process."""

from __future__ import annotations

import importlib.util

import pytest

from geosim.live.train.compiled_memory import cpu_correction, geosim_bytes, run_cases

pytest.importorskip("jax")
pytest.importorskip("flax")

TOLERANCE = 0.10  # the target, and the memory model's band (params: memory.margin_fraction)


def case(technique, precision="fp32", remat=False, global_batch=8, microbatches=2):
    return {"technique": technique, "model": "tiny", "precision": precision, "remat": remat,
            "global_batch": global_batch, "microbatches": microbatches}


def errors(rows, backend, devices):
    out = {}
    for row in rows:
        assert "peak" in row, row.get("error")
        ours = sum(geosim_bytes(row, devices).values())
        if backend == "cpu":
            ours += cpu_correction(row, devices)
        out[(row["technique"], row["precision"], row["remat"])] = ours / row["peak"] - 1
    return out


@pytest.mark.slow  # ~10 s on 2 cores: four XLA compilations
def test_tiny_on_four_cpu_devices_within_ten_percent():
    """Data, ZeRO-2 and FSDP (with the CPU's all-reduce in place of a reduce-scatter corrected for) and
    the pipeline, fp32, two microbatches. Shard is left to the GPU compiler: the CPU's partitioner keeps
    the tied head's logits split over the devices where the GPU's gathers them whole."""
    rows = run_cases("cpu", 4, [case("data"), case("zero2"), case("pipeshard"), case("fsdp")], timeout_s=600)
    found = errors(rows, "cpu", 4)
    assert len(found) == 4
    for what, error in found.items():
        assert abs(error) <= TOLERANCE, (what, f"{error:+.1%}")


@pytest.mark.slow  # ~40 s of compiling
@pytest.mark.skipif(importlib.util.find_spec("jax_plugins") is None
                    or importlib.util.find_spec("jax_plugins.xla_cuda12") is None,
                    reason="XLA's GPU compiler needs the xla-gpu extra (jax-cuda12-plugin, jax-cuda12-pjrt)")
def test_tiny_on_xla_gpu_compiler_16_bit_and_remat():
    rows = run_cases("gpu", 4, [case("data", "bf16", True), case("zero2", "fp16")], timeout_s=600)
    if rows and "technique" not in rows[0]:
        pytest.skip(rows[0].get("error", "XLA's GPU compiler is not available"))
    for what, error in errors(rows, "gpu", 4).items():
        assert abs(error) <= TOLERANCE, (what, f"{error:+.1%}")


# a model whose pipeline stages are dominated by the blocks' residuals, not by the tied head's logits
# (tiny's 50257-entry vocabulary over 64-wide blocks is all head)
BLOCKS = {"n_layer": 4, "n_embd": 512, "n_head": 8, "vocab": 4096, "n_ctx": 512}


@pytest.mark.slow  # ~7 s on 2 cores: one XLA compilation of a two-stage pipeline
def test_pipeline_blocks_in_a_scan_keep_jax_residual_list_on_cpu():
    """live's pipeline runs each stage's blocks in a scan inside the scan over ticks: the stacked residuals
    are JAX's own list per block (memory_layout.JAX_SCANNED_*), which the CPU's buffer assignment shows as
    the GPU's does (mid-size blocks, 2 stages of 2, fp32): within 10% with the rule, and far under without
    it (the straight-line list that XLA's fusion leaves outside a loop)."""
    from dataclasses import replace

    from geosim.techniques.pipeshard import jax_placement as placement
    from geosim.sim.memory_layout import LayoutOptions, live_step
    from geosim.inputs.specs import Model

    cases = [{**case("pipeshard", global_batch=8, microbatches=2), "model": "blocks", "dims": BLOCKS}]
    rows = run_cases("cpu", 4, cases, timeout_s=600)
    found = errors(rows, "cpu", 4)
    assert len(found) == 1
    for what, error in found.items():
        assert abs(error) <= TOLERANCE, (what, f"{error:+.1%}")
    model = Model(name="blocks", **BLOCKS)
    straight = replace(placement(model, 8, 2, 4, None), scanned=False)
    fp32 = LayoutOptions(precision="fp32", workspace_bytes=0.0)
    assert sum(live_step(model, straight, 512, 2, fp32).values()) < 0.8 * rows[0]["peak"]


@pytest.mark.slow  # ~30 s of compiling
@pytest.mark.skipif(importlib.util.find_spec("jax_plugins") is None
                    or importlib.util.find_spec("jax_plugins.xla_cuda12") is None,
                    reason="XLA's GPU compiler needs the xla-gpu extra (jax-cuda12-plugin, jax-cuda12-pjrt)")
def test_pipeline_and_remat_pair_rules_on_xla_gpu_compiler():
    """The pipeline's scanned blocks (mid-size blocks, 2 and 8 microbatches) and remat's pair of
    microbatches that turn before any gradient (ZeRO-2, bf16): bench/memory-checks.jsonl's cases."""
    blocks = {"model": "blocks", "dims": BLOCKS}
    cases = [{**case("pipeshard"), **blocks}, {**case("pipeshard", global_batch=16, microbatches=8), **blocks},
             case("zero2", "bf16", True)]
    rows = run_cases("gpu", 4, cases, timeout_s=600)
    if rows and "technique" not in rows[0]:
        pytest.skip(rows[0].get("error", "XLA's GPU compiler is not available"))
    found = [sum(geosim_bytes(row, 4).values()) / row["peak"] - 1 for row in rows]
    assert len(found) == 3
    for row, error in zip(rows, found):
        assert abs(error) <= TOLERANCE, (row["technique"], row["microbatches"], f"{error:+.1%}")


def test_cpu_correction_refuses_16_bit_cases():
    with pytest.raises(ValueError, match="GPU compiler only"):
        cpu_correction(case("data", "bf16"), 4)
    assert cpu_correction(case("zero2"), 4) > 0 and cpu_correction(case("data"), 4) == 0
