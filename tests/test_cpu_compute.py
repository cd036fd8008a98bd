"""XLA:CPU's measured compute constants (live/experiments/cpu_compute.py, the jax runtime's device_compute):
how they are read, what they make the kernel timer do, and the fit that finds them."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from geosim.base.errors import GeosimError
from geosim.live.experiments import cpu_compute
from geosim.inputs.params import load_params
from geosim.inputs.runtime import runtime_changes_table, runtime_from_table, shipped_runtimes
from geosim.inputs.scenario import get_model, gpu_catalog
from geosim.sim.compute import KernelTimer, Work, kernel_timer
from geosim.inputs.specs import ComputeConstants, Workload

CONSTANTS = {"gemm_fraction": 1.1, "gemm_half_us": 0.0, "memory_fraction": 0.8, "kernel_us": 6.0}


def small_wan():
    return replace(get_model("small-wan"), vocab=cpu_compute.BYTES_VOCAB)


def test_the_jax_runtime_ships_measured_cpu_constants_and_alpa_none():
    jax = shipped_runtimes()["jax"]
    (name, constants), = jax.device_compute
    assert name == "CPU" and isinstance(constants, ComputeConstants)
    assert 0.1 < constants.gemm_fraction < 10 and 0.1 < constants.memory_fraction < 10 and constants.kernel_s < 1e-3
    assert shipped_runtimes()["alpa"].device_compute == ()
    assert shipped_runtimes()["pytorch"].device_compute == ()


def test_a_device_compute_table_reads_in_si_and_writes_back():
    runtime = runtime_from_table("jax", {"device_compute": {"CPU": CONSTANTS}})
    (name, c), = runtime.device_compute
    assert name == "CPU" and c == ComputeConstants(1.1, 0.0, 0.8, 6e-6)
    table = runtime_changes_table(runtime)
    assert table["device_compute"]["CPU"] == pytest.approx(CONSTANTS)
    assert runtime_from_table("jax", table).device_compute == runtime.device_compute


@pytest.mark.parametrize("value, key, problem", [
    ({"CPU": {**CONSTANTS, "gemm_fraction": 0}}, "jax.device_compute.CPU.gemm_fraction", "must be a number in"),
    ({"CPU": {**CONSTANTS, "kernel_us": True}}, "jax.device_compute.CPU.kernel_us", "must be a number in"),
    ({"CPU": {k: v for k, v in CONSTANTS.items() if k != "kernel_us"}}, "jax.device_compute.CPU", "must set exactly"),
    ({"CPU": 0.6}, "jax.device_compute.CPU", "must set exactly"),
    (0.589, "jax.device_compute", "must be a table of device name"),
])
def test_a_bad_device_compute_table_names_its_key(value, key, problem):
    with pytest.raises(GeosimError, match=problem) as err:
        runtime_from_table("jax", {"device_compute": value}, source="runtimes.toml")
    assert err.value.key == key and err.value.source == "runtimes.toml"


def test_a_parameters_file_sets_the_constants_the_measurement_writes(tmp_path):
    """The file cpu_compute --out writes is a parameters file: read back, the jax runtime carries them."""
    measured = {"processes": 2, "model": "small-wan", "vocab": 257, "steps": {1: 0.006, 4: 0.012}}
    path = tmp_path / "cpu.toml"
    path.write_text(cpu_compute.params_text(CONSTANTS, measured, "CPU"))
    params = load_params(path)
    (name, c), = params.runtimes["jax"].device_compute
    assert name == "CPU" and (c.gemm_fraction, c.gemm_half_s, c.memory_fraction, c.kernel_s) == pytest.approx((1.1, 0.0, 0.8, 6e-6))


def test_the_runtime_gives_the_cpu_its_own_constants_and_a_flat_override_wins():
    jax = shipped_runtimes()["jax"]
    base = load_params()
    applied = jax.applied_to(base)
    assert applied.device_compute == dict(jax.device_compute)
    alpa = shipped_runtimes()["alpa"].applied_to(base)  # alpa's Turing and Ampere: the fitted constants, to the bit
    work = Work("backward", get_model("gpt2m"), 4, 1024, 24, head=True, embedding=True)
    for gpu in ("RTX6000", "T4", "A30"):
        assert kernel_timer(alpa).seconds(work, gpu_catalog()[gpu], "fp16") == \
            kernel_timer(base).seconds(work, gpu_catalog()[gpu], "fp16")
    flat = replace(base, flat_fraction={"CPU": 0.5})
    assert "CPU" not in jax.applied_to(flat).device_compute


def test_the_op_model_times_a_cpu_device_with_its_constants_by_hand():
    """Adam over P parameters is one streaming kernel: 32 bytes a parameter at the memory bandwidth x the
    device's memory fraction, plus one kernel gap; the same Work on a GPU without its own constants uses
    the global ones."""
    cpu = cpu_compute.cpu_device()
    own = ComputeConstants(1.1, 0.0, 0.8, 6e-6)
    timer = KernelTimer(ComputeConstants(0.7, 20e-6, 0.5, 5e-6), (("CPU", own),))
    work = Work("optimizer", small_wan(), params=1e6)
    assert timer.seconds(work, cpu, "fp32") == pytest.approx(32e6 / (cpu.memory_bandwidth_gbs * 1e9 * 0.8) + 6e-6)
    other = replace(cpu, name="other")
    assert timer.seconds(work, other, "fp32") == pytest.approx(32e6 / (cpu.memory_bandwidth_gbs * 1e9 * 0.5) + 5e-6)
    # a large GEMM-bound pass: FLOPs at the fp32 peak x the device's GEMM fraction dominate
    model = small_wan()
    passes = Work("forward", model, 64, 32, model.n_layer, head=True, embedding=True)
    gemm_rate = cpu.fp32_tflops * 1e12 * 1.1
    seconds_by_kernel = timer.breakdown(passes, cpu, "fp32")
    assert sum(seconds_by_kernel.values()) == pytest.approx(timer.seconds(passes, cpu, "fp32"))
    assert timer.seconds(passes, cpu, "fp32") > 6 * model.n_layer * 64 * 32 * model.n_embd ** 2 * 2 / gemm_rate


def test_compute_model_keys_its_cache_on_the_device_constants():
    base = load_params()
    a = kernel_timer(replace(base, device_compute={"CPU": ComputeConstants(1.0, 0.0, 1.0, 5e-6)}))
    b = kernel_timer(replace(base, device_compute={"CPU": ComputeConstants(0.5, 0.0, 1.0, 5e-6)}))
    assert a is not b and a is kernel_timer(replace(base, device_compute={"CPU": ComputeConstants(1.0, 0.0, 1.0, 5e-6)}))


def test_the_fit_recovers_constants_from_times_the_model_made():
    """Times generated by the op model with known constants (gemm_half 0) are fitted back to them."""
    model, gpu = small_wan(), cpu_compute.cpu_device()
    truth = ComputeConstants(gemm_fraction=0.9, gemm_half_s=0.0, memory_fraction=0.7, kernel_s=8e-6)
    steps = {b: cpu_compute.step_seconds(truth, model, b, 32, gpu)[0] for b in (1, 2, 4, 8, 16)}
    update = cpu_compute.step_seconds(truth, model, 1, 32, gpu)[1]
    fitted = cpu_compute.fit_constants(steps, update, model, 32, gpu)
    assert fitted["gemm_fraction"] == pytest.approx(0.9, rel=1e-3)
    assert fitted["memory_fraction"] == pytest.approx(0.7, rel=1e-3)
    assert fitted["kernel_us"] == pytest.approx(8.0, rel=1e-2)
    assert fitted["rms_log_error"] < 1e-4 and all(abs(r["error"]) < 1e-3 for r in fitted["rows"])


def test_a_step_costs_more_than_its_flops_at_a_flat_rate_would_say_for_small_batches():
    """Why a flat efficiency missed live's batch-8 steps: the step's fixed part (Adam's update, the kernel
    gaps) does not scale with the batch, so one batch's time does not scale to another's by FLOPs."""
    model, gpu = small_wan(), cpu_compute.cpu_device()
    eff = shipped_runtimes()["jax"].device_compute[0][1]
    t4, t8 = (cpu_compute.step_seconds(eff, model, b, 32, gpu)[0] for b in (4, 8))
    assert 1.4 < t8 / t4 < 1.95


def test_bad_batches_are_one_line_and_exit_2(capsys):
    assert cpu_compute.main(["--batches", "0,2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--batches" in err[0]
    assert cpu_compute.main(["--processes", "0"]) == 2
    assert "--processes" in capsys.readouterr().err


@pytest.mark.slow
def test_two_workers_time_the_live_step_in_the_same_windows():
    """The real measurement, small: two JAX processes on one CPU device each, batches 1 and 4."""
    measured = cpu_compute.measure(processes=2, batches=(1, 4), timeout_s=300)
    assert set(measured["steps"]) == {1, 4} and len(measured["per_worker"]) == 2
    assert all(0 < t < 1 and math.isfinite(t) for t in measured["steps"].values())
    assert measured["steps"][4] > measured["steps"][1]  # four sequences take longer than one
    assert 0 < measured["update_s"] < measured["steps"][1]  # Adam alone is part of a step
    assert all(r["count"] > 0 for res in measured["per_worker"] for r in res)


def test_a_workload_of_the_jax_runtime_predicts_with_the_measured_cpu():
    """A live record's CPU device under `--runtime jax` is timed by the op model with the measured constants,
    not the GPU calibration's: a data step of small-wan at batch 4 a host comes out near the measured ~12 ms."""
    from geosim.inputs.case import Case
    from geosim.predict import predict
    from geosim.inputs.specs import Cluster, Host

    gpu = cpu_compute.cpu_device()
    cluster = Cluster("one", (Host("h0", "s", (gpu,)),), ())
    workload = Workload(global_batch=4, microbatches=1, seq_len=32, precision="fp32", runtime="jax")
    result = predict(Case(cluster, small_wan(), workload, load_params()), "data")
    assert 0.008 < result.iteration_breakdown.compute_s < 0.016


def test_a_cpu_device_is_not_judged_by_a_gpus_plausible_range(capsys):
    """A live record's CPU share (0.16 TFLOP/s, 20 GB/s) is architecture "cpu", by name in older records:
    no "below anything real" warning; the same figures under a GPU's name still warn."""
    from geosim.live.train.record import cpu_gpu_table
    from geosim.inputs.scenario import _gpu_from_table

    table = cpu_gpu_table(1)["CPU"]
    assert table["architecture"] == "cpu"
    older = {k: v for k, v in table.items() if k != "architecture"}
    for i, t in enumerate((table, older)):
        assert _gpu_from_table("CPU", t, f"rec{i}.jsonl", "gpus.CPU.").architecture == "cpu"
    assert "below anything real" not in capsys.readouterr().err
    gpu = {**older, "name": "A slow GPU (Turing)"}
    assert _gpu_from_table("G", gpu, "gpu.toml", "gpus.G.").architecture == "turing"
    assert "gpus.G.memory_bandwidth_gbs: 20 GB/s" in capsys.readouterr().err
