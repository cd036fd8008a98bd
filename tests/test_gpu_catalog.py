"""Issue 33: the GPUs people use, their records, and live's GPU path where nothing can be fetched.

The H200 records (../shared/reference when the checkout has it, else the copy in docs/results/data) are
predicted within 10% in step time and peak memory with the shipped parameters, no per-record constant;
the study's GPUs keep their fitted constants under alpa (tests/test_golden.py holds their predictions)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from geosim.calibrate.cases import load_cases
from geosim.calibrate.check import check
from geosim.base.errors import GeosimError
from geosim.inputs.gpu_names import catalog_gpu, with_catalog_gpus
from geosim.inputs.params import default_params
from geosim.inputs.runtime import shipped_runtimes
from geosim.inputs.scenario import get_model, gpu_catalog
from geosim.sim.compute import KernelTimer, Gemm, Work, kernel_timer, gemm_seconds, kernels
from geosim.inputs.specs import ComputeConstants

ROOT = Path(__file__).resolve().parent.parent
H200_RECORDS = ROOT / "geosim" / "data" / "gpu-h200-2026-11-26.jsonl"


def test_every_new_gpu_is_in_the_catalog_with_its_generation_and_tf32_rate():
    catalog = gpu_catalog()
    expected = {"H200": "hopper", "H100": "hopper", "H100-PCIe": "hopper", "H100-NVL": "hopper",
                "A100-40GB": "ampere", "A100-80GB": "ampere", "A100-40GB-PCIe": "ampere", "A100-80GB-PCIe": "ampere",
                "L40S": "ada", "L4": "ada", "A10": "ampere", "RTX6000-Ada": "ada", "B200": "blackwell"}
    for key, generation in expected.items():
        gpu = catalog[key]
        assert gpu.architecture == generation, key
        assert gpu.tf32_tensor_tflops and gpu.tf32_tensor_tflops < gpu.bf16_tensor_tflops, key  # dense: half of bf16
        assert gpu.tf32_tensor_tflops == pytest.approx(gpu.bf16_tensor_tflops / 2, rel=0.02), key
    assert catalog["H200"].memory_gib == 141 and catalog["H200"].memory_bandwidth_gbs == 4800
    assert catalog["T4"].tf32_tensor_tflops is None  # Turing has no TF32


def test_a_placeholder_gpu_table_resolves_through_the_catalog_and_nothing_else_does():
    cluster = {"name": "live", "gpus": {"GPU": {"name": "NVIDIA H200", "memory_gib": 104.85, "memory_bandwidth_gbs": 500,
                                                "fp32_tflops": 10, "fp16_tensor_tflops": 60, "pcie_gen": 3}},
               "hosts": [{"name": "vm", "site": "local", "gpus": ["GPU"]}]}
    resolved = with_catalog_gpus(cluster)
    assert "gpus" not in resolved and resolved["hosts"][0]["gpus"] == ["H200"]
    measured = json.loads(json.dumps(cluster))
    measured["gpus"]["GPU"]["fp32_tflops"] = 66  # filled in by hand: the user's figures stand
    assert with_catalog_gpus(measured) == measured
    unknown = json.loads(json.dumps(cluster))
    unknown["gpus"]["GPU"]["name"] = "Some Future Accelerator"
    assert with_catalog_gpus(unknown) == unknown
    assert catalog_gpu("NVIDIA H200") == "H200"


def test_tf32_is_the_runtimes_choice_and_runs_at_the_tf32_rate():
    """A 4096^3 fp32 GEMM on an H200: at the TF32 tensor rate x the generation's fraction under jax (XLA's
    default), at the 67 TFLOP/s fp32 rate under pytorch (allow_tf32 off), by hand."""
    h200, op = gpu_catalog()["H200"], Gemm("g", 4096, 4096, 4096)
    for runtime, rate in (("jax", 494.0), ("pytorch", 67.0)):
        params = shipped_runtimes()[runtime].applied_to(default_params())
        eff = kernel_timer(params).constants_for(h200)
        hopper = params.efficiency_by_generation.get("hopper", params.efficiency_estimate)
        expected = op.flops / (rate * 1e12 * hopper.gemm_fraction) + eff.gemm_half_s + eff.kernel_s
        assert gemm_seconds(op, h200, "fp32", eff) == pytest.approx(expected)


def test_fused_attention_writes_no_scores_and_is_faster_at_long_sequences():
    model = get_model("gpt2-medium")
    work = Work("backward", model, 1, 8192, 1)
    plain, fused = kernels(work, "bf16"), kernels(work, "bf16", fused_attention=True)
    assert any(op.label.startswith("mask+softmax") for op in plain)
    assert not any(op.label.startswith("mask+softmax") for op in fused)
    gpu = gpu_catalog()["H100"]
    eff = ComputeConstants(gemm_fraction=0.9, memory_fraction=0.65, gemm_half_s=30e-6, kernel_s=2e-6)
    slow = KernelTimer(eff).seconds(work, gpu, "bf16")
    fast = KernelTimer(replace(eff, fused_attention=True)).seconds(work, gpu, "bf16")
    assert fast < 0.8 * slow  # at 8k tokens the scores' passes dominate the unfused step


def records():
    return load_cases(H200_RECORDS)


def test_the_h200_records_are_predicted_within_ten_percent_in_time_and_memory():
    rows = check(records(), default_params())
    assert len(rows) == 4
    for row in rows:
        for metric in ("time_per_iteration_s", "peak_memory_gib"):
            assert abs(row.error(metric)) < 0.10, (row.label, row.model, metric, row.error(metric))


def test_tflops_rise_with_model_size_as_measured():
    """190 -> 237 -> 282 TFLOP/s for gpt2, medium, large at batch 8: larger GEMMs fill the GPU (the saturation
    ramp) and the memory-bound share falls; the model reproduces the order."""
    bf16 = check(records(), default_params())[:3]  # the file's first three: gpt2, medium, large in bf16
    assert [r.model for r in bf16] == ["gpt2", "gpt2-medium", "gpt2-large"]
    predicted = [r.predicted["tflops_per_gpu"] for r in bf16]
    assert predicted == sorted(predicted) and predicted[2] > 1.3 * predicted[0]


class _OneEntryTokenizer:
    """What transformers 5's GPT2TokenizerFast.from_pretrained("gpt2", local_files_only=True) returns without
    GPT-2's files cached: a one-entry vocabulary that encodes every text to nothing."""

    def __len__(self):
        return 1

    def encode(self, text):
        return []


@pytest.fixture
def transformers_without_gpt2_files(tmp_path, monkeypatch):
    """A `transformers` package on the path whose GPT2TokenizerFast behaves as transformers 5's does when GPT-2's
    files are not cached (nothing is installed; the situation is built)."""
    package = tmp_path / "transformers"
    package.mkdir()
    (package / "__init__.py").write_text(
        "class GPT2TokenizerFast:\n"
        "    @classmethod\n"
        "    def from_pretrained(cls, name, local_files_only=False):\n"
        "        from tests_helpers_one_entry import OneEntry\n"
        "        return OneEntry()\n")
    (tmp_path / "tests_helpers_one_entry.py").write_text(
        "class OneEntry:\n    def __len__(self):\n        return 1\n    def encode(self, text):\n        return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "transformers", raising=False)
    yield


def test_auto_falls_back_to_bytes_with_one_line_and_gpt2_fails_clearly(transformers_without_gpt2_files):
    from geosim.live.train import corpus

    said = []
    tok = corpus.get_tokenizer("auto", warn=said.append)
    assert tok.name == "bytes" and len(said) == 1 and "1 entries" in said[0]
    with pytest.raises(GeosimError, match="vocabulary has 1 entries"):
        corpus.get_tokenizer("gpt2")
    dataset = corpus.load("generated", 128, "auto")  # the run goes on, on bytes
    assert dataset.tokenizer == "bytes" and dataset.sequences.shape[0] > 0


def test_a_real_gpt2_vocabulary_passes_the_check():
    class Gpt2Like:  # the two facts the check reads: 50,257 entries, and GPT-2's ids for the probe
        def __len__(self):
            return 50257

        def encode(self, text):
            return [15496, 995] if text == "Hello world" else [0]

    from geosim.live.train import corpus

    assert corpus.is_gpt2_vocabulary(Gpt2Like()) is None
    assert "entries" in corpus.is_gpt2_vocabulary(_OneEntryTokenizer())


@pytest.mark.parametrize("technique", ["data", "zero2", "shard", "pipeshard"])
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_the_simulator_under_jax_holds_what_live_estimates_for_its_own_step(technique, precision):
    """One memory model: predict under the jax runtime gives each device the bytes live's own check gives
    before it allocates (live/train/memory.py), on two H100s of one host, per technique."""
    from geosim.inputs.case import Case
    from geosim.live.train.memory import layout
    from geosim.predict import predict
    from geosim.inputs.specs import Cluster, Host, Workload

    h100 = gpu_catalog()["H100"]
    model = get_model("gpt2-medium")
    cluster = Cluster("two-h100", (Host("h", "s", (h100, h100), intra_host="nvlink"),), ())
    workload = Workload(tokens_per_epoch=8 * 1024 * 10, seq_len=1024, global_batch=8, microbatches=2,
                        precision=precision, epochs=1, runtime="jax")
    options = {"stages": 2} if technique == "pipeshard" else None
    result = predict(Case(cluster, model, workload, default_params()), technique,
                     options={"layer_split": (12, 12)} if technique == "pipeshard" else None)
    live = layout(technique, n_layer=24, n_embd=1024, n_head=16, vocab=model.vocab, n_ctx=1024, precision=precision,
                  global_batch=8, microbatches=2, devices=2, stages=2 if options else None, architecture="hopper")
    assert result.peak_memory_gib == pytest.approx(sum(live.values()) / 2**30, rel=1e-9)


def test_the_jax_runtime_allocates_three_quarters_of_a_gpu():
    params = shipped_runtimes()["jax"].applied_to(default_params())
    assert params.usable_memory_fraction == 0.75  # XLA_PYTHON_CLIENT_MEM_FRACTION's default; the H200: 104.85 GiB
    assert shipped_runtimes()["alpa"].applied_to(default_params()).usable_memory_fraction == 0.9


def test_the_gpu_reference_page_is_what_the_catalog_writes():
    import subprocess

    done = subprocess.run([sys.executable, str(ROOT / "tools" / "write_gpus_reference.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


from hypothesis import given, settings, strategies as st  # noqa: E402

GPUS_WITH_TF32 = sorted(k for k, g in gpu_catalog().items() if g.tf32_tensor_tflops)


@settings(max_examples=60, deadline=None)
@given(gpu=st.sampled_from(GPUS_WITH_TF32), sequences=st.integers(1, 16), seq_len=st.sampled_from([128, 1024, 4096]),
       precision=st.sampled_from(["fp32", "bf16"]))
def test_tf32_and_fused_attention_never_make_a_step_slower(gpu, sequences, seq_len, precision):
    """TF32 never slows an fp32 step (the same FLOPs at a higher rate), and fused attention never slows the
    forward (it drops the score passes and half the causal products; its backward recomputes the scores, so
    only the forward is held to it)."""
    g, model = gpu_catalog()[gpu], get_model("gpt2-medium")
    eff = ComputeConstants(gemm_fraction=0.9, memory_fraction=0.65, gemm_half_s=30e-6, kernel_s=2e-6)
    work = Work("backward", model, sequences, seq_len, 2, head=True, embedding=True)
    if precision == "fp32":
        assert KernelTimer(replace(eff, tf32=True)).seconds(work, g, "fp32") <= KernelTimer(eff).seconds(work, g, "fp32")
    forward = work._replace(phase="forward")
    assert (KernelTimer(replace(eff, fused_attention=True)).seconds(forward, g, precision)
            <= KernelTimer(eff).seconds(forward, g, precision))
