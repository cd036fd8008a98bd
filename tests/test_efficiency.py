"""Efficiency as data (issue 41): a (runtime, GPU generation) entry with its source kind; a generation's facts in
one file (geosim/data/generations.toml); estimates that say so; a hand-written GPU that names its generation;
a runtime of one's own in a parameters file."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest

import geosim.base.generations as generations_module
from geosim.inputs.case import Case
from geosim.cli import main
from geosim.base.errors import GeosimError
from geosim.base.generations import generations
from geosim.inputs.params import default_params, load_params
from geosim.predict import predict
from geosim.inputs.runtime import efficiency_spread, runtime_of, shipped_runtimes
from geosim.inputs.scenario import get_model, gpu_catalog, load_scenario
from geosim.sim.compute import kernel_timer
from geosim.inputs.specs import EFFICIENCY_KINDS, Workload

GENERATIONS_TOML = generations_module.DATA


def one_vm(tmp_path, gpu_table: str, gpu: str = "X", count: int = 4, name: str = "s.toml"):
    path = tmp_path / name
    path.write_text(f'name = "one"\n{gpu_table}\n[[hosts]]\nname = "vm"\nsite = "A"\ngpus = {json.dumps([gpu] * count)}\n'
                    '[[hosts]]\nname = "vm2"\nsite = "B"\ngpus = ["T4"]\n'
                    '[[links]]\nbetween = ["vm", "vm2"]\nrtt_ms = 10\nbandwidth_gbps = 1\n')
    return path


def test_every_shipped_entry_has_a_kind_and_a_source_and_measured_ones_a_refit_command():
    for name, runtime in shipped_runtimes().items():
        for generation, entry in runtime.efficiency:
            assert generation in generations(), (name, generation)
            assert entry.kind in EFFICIENCY_KINDS and entry.source, (name, generation)
            assert entry.kind != "measured" or entry.refit, (name, generation)


def test_alpa_on_an_a100_runs_with_alpas_ampere_efficiency_not_jaxs_hopper():
    """The study's fit is Alpa's on Turing and Ampere (the A30): an A100 under alpa gets it, as the A30 does;
    under jax the A100 has no entry and runs with jax's estimate (its Hopper measurement), which it names."""
    params = default_params()
    a100, a30, h200 = (gpu_catalog()[k] for k in ("A100-40GB", "A30", "H200"))
    alpa = kernel_timer(shipped_runtimes()["alpa"].applied_to(params))
    assert alpa.constants_for(a100).gemm_fraction == params.gemm_fraction == alpa.constants_for(a30).gemm_fraction
    jax = shipped_runtimes()["jax"]
    assert kernel_timer(jax.applied_to(params)).constants_for(h200).gemm_fraction == \
        dict(jax.efficiency)["hopper"].gemm_fraction
    assert [e.generation for e in jax.estimated_entries(["ampere", "hopper", "cpu"])] == ["ampere"]


def test_no_generation_name_is_written_in_code():
    """A generation's facts are data: its name appears in no module of geosim/, calibrate/ or live/."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    names = [g for g in generations()]
    found = []
    for folder in ("geosim", "calibrate", "live"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text()
            found += [f"{path.relative_to(root)}: {g}" for g in names if f'"{g}"' in text or f"'{g}'" in text]
    assert found == []


def test_a_new_generation_is_one_data_entry_and_predicts_with_the_runtimes_estimate(tmp_path, monkeypatch):
    """Write a fake generation into a copy of generations.toml, a GPU of it into a scenario, and predict: it runs
    with each runtime's estimate, and the prediction names it (text and JSON) with an interval."""
    data = tmp_path / "generations.toml"
    data.write_text(GENERATIONS_TOML.read_text() + '\n[zircon]\ntf32_tensor_cores = true\nbf16 = true\n'
                    'source = "a test"\n')
    monkeypatch.setattr(generations_module, "DATA", data)
    generations_module.generations.cache_clear()
    try:
        assert "zircon" in generations()
        table = ('[gpus.X]\narchitecture = "zircon"\nmemory_gib = 80\nmemory_bandwidth_gbs = 3000\n'
                 'fp32_tflops = 60\nfp16_tensor_tflops = 900\nbf16_tensor_tflops = 900\npcie_gen = 5\n')
        scenario = load_scenario(one_vm(tmp_path, table))
        assert scenario.cluster.hosts[0].gpus[0].architecture == "zircon"
        workload = replace(scenario.workload(), runtime="pytorch", precision="bf16")
        case = Case(scenario.cluster, get_model("gpt2m"), workload, default_params())
        p = predict(case, "data", ("vm",))
        assert p.ok and p.estimated and p.estimated[0].startswith("pytorch on zircon: the median of pytorch's")
        low, high = p.iteration_time_interval_s
        assert low < p.iteration_time_s < high
        estimate = shipped_runtimes()["pytorch"].estimate()
        model = kernel_timer(shipped_runtimes()["pytorch"].applied_to(default_params()))
        assert model.constants_for(scenario.cluster.hosts[0].gpus[0]).gemm_fraction == estimate.gemm_fraction
    finally:
        generations_module.generations.cache_clear()


def test_the_estimate_is_the_median_of_the_measured_and_published_entries():
    pytorch = shipped_runtimes()["pytorch"]
    known = [e.gemm_fraction for _, e in pytorch.efficiency if e.kind != "estimated"]
    assert pytorch.estimate().kind == "estimated" and pytorch.estimate().gemm_fraction == statistics.median(known)
    # alpa's entries are the parameters file's fit: its estimate is that fit, said so
    alpa = shipped_runtimes()["alpa"].estimate()
    assert alpa.fractions is None and "fit" in alpa.source
    assert efficiency_spread() > 1.0


def test_every_row_that_uses_an_estimate_says_so_in_text_and_json(capsys):
    """pytorch on a V100 (Volta: no pytorch entry) is an estimate: predict's text and JSON name it; an A100
    (a published entry) is not; plan, select and sweep carry it too."""
    argv = ["predict", "--scenario", "scale:1x2x8:V100", "--runtime", "pytorch", "--technique", "data",
            "--model", "gpt2", "--hosts", "all"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "estimate: pytorch on volta" in text and "estimated efficiency: a step" in text
    assert main(argv + ["--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["slices"][0]["predictions"]
    assert all(r["estimated"] and r["estimated"][0].startswith("pytorch on volta") for r in rows)
    assert all(r["iteration_time_interval_s"][0] < r["iteration_time_s"] < r["iteration_time_interval_s"][1]
               for r in rows if r["status"] == "ok")
    assert main(["predict", "--scenario", "scale:1x2x8:A100-80GB", "--runtime", "pytorch", "--technique", "data",
                 "--model", "gpt2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["slices"][0]["predictions"]
    assert all(r["estimated"] == [] and r["iteration_time_interval_s"] is None for r in rows)
    assert main(["plan", "--scenario", "scale:1x2x8:V100", "--runtime", "pytorch", "--model", "gpt2",
                 "--technique", "data", "--json"]) == 0
    options = json.loads(capsys.readouterr().out)["slices"][0]["options"]
    assert options and all(o["estimated"] for o in options)
    assert main(["select", "--scenario", "scale:1x2x4:V100", "--runtime", "pytorch", "--model", "gpt2",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["slices"][0]
    assert doc["estimated"] and doc["probe_tflops_interval"]["Td1"][0] < doc["probes"]["Td1"]["tflops"]


def test_a_sweeps_rows_and_summary_name_their_estimates(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["sweep", "--scenario", "tacc-tacc", "--gpu", "V100", "--runtime", "pytorch", "--technique", "data",
                 "--rtt-ms", "10,20", "--model", "gpt2", "--sweep-dir", str(out), "--workers", "1", "--no-best",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert list(summary["estimated"].values()) == [2] and next(iter(summary["estimated"])).startswith("pytorch on volta")
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["estimated"].startswith("pytorch on volta")
               and r["iteration_time_low_s"] < r["iteration_time_s"] < r["iteration_time_high_s"] for r in rows)


def test_the_studys_answers_rest_on_no_estimate(capsys):
    """The study's GPUs under alpa: measured entries (the fit), nothing estimated, no interval."""
    assert main(["predict", "--json"]) == 0
    for s in json.loads(capsys.readouterr().out)["slices"]:
        assert all(r["estimated"] == [] for r in s["predictions"])


def test_a_hand_written_gpu_names_its_generation_or_is_refused(tmp_path):
    datasheet = ('memory_gib = 141\nmemory_bandwidth_gbs = 4800\nfp32_tflops = 67\nfp16_tensor_tflops = 989\n'
                 'bf16_tensor_tflops = 989\npcie_gen = 5\n')
    with pytest.raises(GeosimError) as info:  # neither a generation nor a GPU the catalog knows
        load_scenario(one_vm(tmp_path, f'[gpus.X]\nname = "Acme Z9"\n{datasheet}'))
    assert info.value.key == "gpus.X.architecture" and "must name its generation" in info.value.problem
    with pytest.raises(GeosimError) as info:  # a generation nobody declared
        load_scenario(one_vm(tmp_path, f'[gpus.X]\narchitecture = "pascal2"\n{datasheet}'))
    assert info.value.key == "gpus.X.architecture" and "unknown GPU generation" in info.value.problem
    # a GPU the catalog knows, by its key or its name, written by hand: the catalog's generation
    by_key = load_scenario(one_vm(tmp_path, f"[gpus.H200]\n{datasheet}", gpu="H200"))
    by_name = load_scenario(one_vm(tmp_path, f'[gpus.X]\nname = "NVIDIA H200"\n{datasheet}'))
    assert by_key.cluster.hosts[0].gpus[0].architecture == by_name.cluster.hosts[0].gpus[0].architecture == "hopper"
    with pytest.raises(GeosimError) as info:  # and not another one
        load_scenario(one_vm(tmp_path, f'[gpus.H200]\narchitecture = "turing"\n{datasheet}', gpu="H200"))
    assert "the catalog's H200, a hopper GPU" in info.value.problem


def test_a_hand_written_h200_predicts_as_the_catalogs(tmp_path):
    """The hand-written H200 of issue 41 (its name and datasheet) now runs with Hopper's entry, not Turing's fit."""
    table = ('[gpus.H200]\nname = "NVIDIA H200"\nmemory_gib = 141\nmemory_bandwidth_gbs = 4800\nfp32_tflops = 67\n'
             'fp16_tensor_tflops = 989\nbf16_tensor_tflops = 989\ntf32_tensor_tflops = 494\npcie_gen = 5\n'
             'tdp_w = 700\n')
    hand = load_scenario(one_vm(tmp_path, table, gpu="H200", name="hand.toml"))
    workload = replace(hand.workload(), runtime="jax", precision="bf16")
    case = Case(hand.cluster, get_model("gpt2m"), workload, default_params())
    catalog = replace(case, cluster=replace(hand.cluster, hosts=(replace(hand.cluster.hosts[0],
                                                                         gpus=(gpu_catalog()["H200"],) * 4),
                                                                 *hand.cluster.hosts[1:])))
    mine, theirs = predict(case, "data", ("vm",)), predict(catalog, "data", ("vm",))
    assert mine.iteration_time_s == pytest.approx(theirs.iteration_time_s, rel=0.01)


def test_a_runtime_of_ones_own_in_a_parameters_file(tmp_path, capsys):
    path = tmp_path / "mine.toml"
    path.write_text('[runtime.mystack]\ndescription = "ours"\nsource = "our notes"\nkernel_us = 8.0\n'
                    'fused_attention = true\n'
                    '[runtime.mystack.efficiency.ampere]\ngemm_fraction = 0.5\nmemory_fraction = 0.6\n'
                    'gemm_half_us = 25\nkind = "measured"\nsource = "our runs"\nrefit = "our script"\n')
    params = load_params(path)
    runtime = runtime_of(Workload(runtime="mystack"), params)
    assert runtime.description == "ours" and dict(runtime.efficiency)["ampere"].gemm_fraction == 0.5
    assert main(["predict", "--scenario", "scale:1x2x8:A100-80GB", "--runtime", "mystack", "--params", str(path),
                 "--technique", "data", "--model", "gpt2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["slices"][0]["predictions"]
    assert rows and all(r["runtime"] == "mystack" and r["estimated"] == [] for r in rows)
    bad = tmp_path / "bad.toml"
    bad.write_text('[runtime.mystack.efficiency.ampere]\ngemm_fraction = 0.5\nmemory_fraction = 0.6\n'
                   'gemm_half_us = 25\nkind = "measured"\nsource = "our runs"\n')
    with pytest.raises(GeosimError) as info:  # no description: not a runtime of its own; and no refit command
        load_params(bad)
    assert "unknown runtime" in info.value.problem


def test_live_asks_the_generation_for_bf16_and_tf32():
    """live's --precision auto and its TF32 record read the generation's facts, not device names: the RTX 6000
    Ada is Ada (bf16), the Quadro RTX 6000 Turing (fp16 only, no TF32)."""
    from geosim.live.train.loop import resolve_precision, tf32_matmul

    class Config:
        jax_default_matmul_precision = None

    class Jax:
        config = Config()

    assert resolve_precision("auto", "gpu", "NVIDIA RTX 6000 Ada Generation") == "bf16"
    assert resolve_precision("auto", "gpu", "Quadro RTX 6000") == "fp16"
    assert resolve_precision("auto", "gpu", "Tesla V100-SXM2-32GB") == "fp16"
    assert tf32_matmul(Jax, "gpu", "Quadro RTX 6000") is False and tf32_matmul(Jax, "gpu", "NVIDIA H200") is True
