"""Importer regressions (issue 17) and bad-input regressions (issue 15) at the record edges:
Alpa's console output, every Parallel Config's microbatches / use_remat / stage layout, scenario
paths relative to the records file, and the fit's overhead warning reaching `geosim predict`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("scipy")

from geosim.calibrate.cases import load_cases, to_case
from geosim.calibrate.importers import alpa_benchmark_records
from geosim.cli import main
from geosim.base.errors import GeosimError
from geosim.inputs.params import load_params
from geosim.studies.reference import study_records
from geosim.inputs.records import read_runs

CONSOLE = Path(__file__).parent / "data" / "alpa-gpt-console.log"
GPT = "GPTModelConfig(seq_len=1024, hidden_size=1024, num_layers=24, num_heads=16, vocab_size=51200)"
ONE_A100 = """name = "one-a100"
[[hosts]]
name = "vm1"
site = "LAB"
gpus = ["A100-40GB"]
"""
FOUR_A100 = """name = "four-a100"
[[hosts]]
name = "vm1"
site = "LAB"
gpus = ["A100-40GB", "A100-40GB"]
[[hosts]]
name = "vm2"
site = "LAB"
gpus = ["A100-40GB", "A100-40GB"]
"""


def scenario(tmp_path, text, name="s.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def tsv_row(parallel: str, microbatches="1", gpus="4", mean="2.0", peak="6.5") -> str:
    return "\t".join(["gpt", GPT, microbatches, gpus, parallel, mean, "0.01", "0.355B", "90.0", peak, "{}"]) + "\n"


UNIFORM = "UniformParallelArgs(prefer_reduce_scatter=False, use_remat=False, dp=4, op=1, pp=1, force_batch_dim_mapping=True)"


def test_console_output_one_gpu_keeps_microbatches_and_remat(tmp_path):
    skipped: list[str] = []
    oom, ok = alpa_benchmark_records(CONSOLE, scenario(tmp_path, ONE_A100), skipped=skipped)
    assert len(skipped) == 3 and all("ran on 4 GPU(s), the slice given has 1" in s for s in skipped)
    # a 1-microbatch OOM row and a 64-microbatch good row are different runs (they were identical)
    assert oom.status == "out-of-memory" and oom.workload["microbatches"] == 1
    assert ok.status == "ok" and ok.workload == {"seq_len": 1024, "microbatches": 64, "global_batch": 1024,
                                                 "checkpointing": True}
    assert ok.measured == {"time_per_iteration_s": 10.214, "tflops_per_gpu": 118.71, "peak_memory_gib": 26.041}
    assert ok.technique == "data"  # one GPU: prefer_reduce_scatter has nothing to scatter
    assert ok.source == "alpa-console" and "alpa-gpt-console.log:22:" in ok.note and "use_remat=True" in ok.note
    assert to_case("console#2", ok).workload.checkpointing  # what the memory model reads


def test_console_output_four_gpus_stage_layout(tmp_path):
    skipped: list[str] = []
    oom, one, zero2, shard, pipe = alpa_benchmark_records(CONSOLE, scenario(tmp_path, FOUR_A100), skipped=skipped)
    # the log's 1-GPU runs are kept, predicted on the slice's first GPU (and the record says so)
    assert not skipped and oom.status == "out-of-memory" and one.status == "ok"
    assert one.cluster["name"] == "four-a100-first1gpus"  # the slice cut, inline; the scenario kept for the record
    assert [h["gpus"] for h in one.cluster["hosts"]] == [["A100-40GB"]]
    assert "predicted on the first 1 of the slice's (vm1: 1)" in one.note
    assert to_case("console#2", read_back(tmp_path, one)).cluster.num_gpus == 1
    # one stage over a [1, 4] submesh, data parallel, reduce-scatter preferred: not a pipeline
    assert zero2.technique == "zero2" and zero2.options is None and zero2.workload["microbatches"] == 16
    assert "1 stage(s)" in zero2.note and "prefer_reduce_scatter=True" in zero2.note
    assert shard.technique == "shard" and shard.workload["microbatches"] == 8
    assert pipe.technique == "pipeshard" and pipe.options == {"layer_split": (12, 12), "intra_stage": "data"}
    assert all(r.workload["checkpointing"] and r.workload["global_batch"] == 1024 for r in (zero2, shard, pipe))
    case = to_case("console#3", json.loads(pipe.to_json()) and read_back(tmp_path, pipe))
    assert case.options == {"layer_split": (12, 12), "intra_stage": "data"}


def read_back(tmp_path, record):
    path = tmp_path / "one.jsonl"
    path.write_text(record.to_json() + "\n")
    ((_, back),) = read_runs(path)
    return back


def test_a_stage_layout_that_does_not_fit_the_vms_keeps_the_technique_only(tmp_path):
    one_vm = FOUR_A100.replace('[[hosts]]\nname = "vm2"\nsite = "LAB"\ngpus = ["A100-40GB", "A100-40GB"]\n', "")
    one_vm = one_vm.replace('gpus = ["A100-40GB", "A100-40GB"]', 'gpus = ["A100-40GB", "A100-40GB", "A100-40GB", "A100-40GB"]')
    *_, pipe = alpa_benchmark_records(CONSOLE, scenario(tmp_path, one_vm))
    assert pipe.technique == "pipeshard" and pipe.options == {"intra_stage": "data"}


def test_tsv_keeps_microbatches_for_every_technique(tmp_path):
    path = tmp_path / "r.tsv"
    path.write_text(tsv_row(UNIFORM, "1", mean="-1.000") + tsv_row(UNIFORM, "8"))
    oom, ok = alpa_benchmark_records(path, "utah-gpn", global_batch=32)
    assert (oom.technique, oom.workload["microbatches"], oom.status) == ("data", 1, "out-of-memory")
    assert (ok.technique, ok.workload["microbatches"], ok.status) == ("data", 8, "ok")


@pytest.mark.parametrize("row,message", [
    (tsv_row(UNIFORM, mean="-5"), r"r\.tsv:1: Mean Time \(s\): must be > 0 \(or -1 for a failed case\)"),
    (tsv_row(UNIFORM, mean="0"), r"Mean Time \(s\): must be > 0"),
    (tsv_row(UNIFORM, mean="nan"), r"Mean Time \(s\): not a finite number"),
    (tsv_row(UNIFORM, microbatches="nan"), r"#Microbatch: not a finite number"),
    (tsv_row(UNIFORM, microbatches="2.5"), r"#Microbatch: must be a whole number >= 1"),
    (tsv_row(UNIFORM.replace("dp=4", "dp='x'")), r"Parallel Config: dp: must be a whole number >= 1, got 'x'"),
    (tsv_row(UNIFORM.replace("pp=1", "pp=-1")), r"Parallel Config: pp: must be a whole number >= 1, got -1"),
    (tsv_row(UNIFORM.replace("use_remat=False", "use_remat=3")), r"use_remat: must be True or False"),
    (tsv_row(UNIFORM, peak="inf"), r"Peak Mem \(GB\): not a finite number"),
    (tsv_row(UNIFORM, microbatches="64"), r"workload.microbatches: .*must divide global_batch.*give --global-batch"),
    (tsv_row("LoadSolutionParallelArgs(True, False, 1, [[0]], [(1, 4)], [(4, 1), (4, 1)], [{}])"),
     r"submesh_logical_shapes: must give one mesh shape per stage"),
])
def test_bad_tsv_values_are_one_line_errors(tmp_path, row, message):
    path = tmp_path / "r.tsv"
    path.write_text(row)
    with pytest.raises(GeosimError, match=message) as info:
        alpa_benchmark_records(path, "utah-gpn")
    assert "\n" not in info.value.line()


def test_scenario_paths_are_stored_relative_to_the_records_file(tmp_path, monkeypatch, capsys):
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "runs").mkdir()
    scenario(tmp_path / "scenarios", FOUR_A100, "lab.toml")
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", "import", "alpa-tsv", str(CONSOLE), "--scenario", "scenarios/lab.toml",
                 "--records-out", "runs/lab.jsonl"]) == 0
    stored = json.loads((tmp_path / "runs" / "lab.jsonl").read_text().splitlines()[0])
    assert stored["scenario"] == "../scenarios/lab.toml"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a fit from another directory finds the scenario
    # the log's two 1-GPU runs carry the slice's first GPU inline; the 4-GPU runs find the scenario file
    assert [c.cluster.name for c in load_cases(tmp_path / "runs" / "lab.jsonl")] == ["four-a100-first1gpus"] * 2 + ["four-a100"] * 3
    moved = tmp_path / "runs" / "moved.jsonl"
    moved.write_text((tmp_path / "runs" / "lab.jsonl").read_text().replace("../scenarios/lab.toml", "../gone.toml"))
    with pytest.raises(GeosimError, match=r"moved\.jsonl:3: scenario: .*/gone\.toml: no such file"):
        load_cases(moved)  # the error names the record and the scenario file it looked for


def test_append_appends_and_skips_what_is_already_there(tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    assert main(["calibrate", "import", "study", "--records-out", str(out)]) == 0
    assert main(["calibrate", "import", "study", "--records-out", str(out), "--append"]) == 0
    assert "appended 0 record(s)" in capsys.readouterr().out and len(read_runs(out)) == len(study_records())


@pytest.mark.parametrize("content,message", [
    ('{"technique": "data", "model": "gpt2", "status": "ok", "scenario": "utah-gpn", '
     '"measured": {"total_time_s": NaN}}', "not valid JSON"),
    ('{"technique": "data", "model": "gpt2", "status": "ok", "scenario": "utah-gpn", '
     '"measured": {"total_time_s": 0}}', r"measured.total_time_s: must be >= 1e-06"),
    ('{"technique": "data", "model": "gpt2", "status": "ok", "scenario": "utah-gpn", '
     '"measured": {"total_time_s": 1e-300}}', r"must be >= 1e-06"),
    ('{"technique": "data", "model": "gpt2", "status": "ok", "scenario": "utah-gpn", "hosts": ["vm1", "vm1"], '
     '"measured": {"total_time_s": 5}}', "names a host twice"),
    ('{"technique": "data", "model": "gpt2", "status": "ok", "scenario": "utah-gpn", "run_id": "x", '
     '"measured": {"total_time_s": 5}}\n{"technique": "data", "model": "gpt2", "status": "ok", "scenario": '
     '"utah-gpn", "run_id": "y", "measured": {"total_time_s": 5}}', r":2: the same run as .*:1"),
])
def test_bad_records_are_refused_before_a_fit(tmp_path, content, message):
    path = tmp_path / "runs.jsonl"
    path.write_text(content + "\n")
    with pytest.raises(GeosimError, match=message):
        load_cases(path)


def test_scenarios_out_names_cannot_leave_the_directory(tmp_path):
    from geosim.calibrate.cli import safe_file_name

    assert safe_file_name("../../x") == "x"
    assert safe_file_name("/etc/passwd") == "etc_passwd"
    assert safe_file_name("..") == "slice"
    assert safe_file_name("UTAH-GPN", {"utah-gpn"}) == "utah-gpn-2"


def test_fit_out_in_a_missing_directory_fails_before_fitting(tmp_path, capsys):
    runs = tmp_path / "runs.jsonl"
    assert main(["calibrate", "import", "study", "--records-out", str(runs)]) == 0
    assert main(["calibrate", "fit", "--records", str(runs), "--out", str(tmp_path / "no" / "such" / "p.toml")]) == 2
    err = capsys.readouterr().err
    assert "--out: no such directory" in err and "fitting" not in err


@pytest.mark.slow
def test_runs_the_model_cannot_explain_are_a_warning_predict_prints(tmp_path, capsys):
    """Runs measured 40 s slower per iteration than gpt2's compute and communication on one slice.
    Within physical bounds (a per-iteration overhead of at most 1 s, a message's fixed cost of at
    most 20 ms) nothing explains them: the fit says so loudly, with what it held at a bound, and
    predict repeats it. (Before the bounds it explained them by 0.87 s per message.)"""
    runs = tmp_path / "runs.jsonl"
    lines = [json.dumps({"technique": "data", "model": "gpt2", "status": "ok", "scenario": "tacc-tacc",
                         "measured": {"time_per_iteration_s": 40.0 + b / 8}, "workload": {"global_batch": b, "microbatches": 1},
                         "run_id": f"r{b}"}) for b in (4, 8, 12, 16, 24, 32, 40)]
    runs.write_text("\n".join(lines) + "\n")
    params = tmp_path / "fitted.toml"
    assert main(["calibrate", "fit", "--records", str(runs), "--out", str(params), "--links", "none", "--step-rtts", "none",
                 "--overhead", "technique", "--max-evaluations", "15"]) == 0
    warnings = load_params(params).fit_warnings
    misses = [w for w in warnings if w.startswith("MODEL MISSES THE RECORDS")]
    assert len(misses) == 1 and "slower than anything the model explains" in misses[0]
    assert "overhead.iteration_s.data" in misses[0]  # held at its 1 s bound
    fitted = tomllib.loads(params.read_text())
    assert fitted["transport"]["per_message_overhead_us"] <= 2e4
    capsys.readouterr()
    assert main(["predict", "--scenario", "tacc-tacc", "--technique", "data", "--params", str(params)]) == 0
    err = capsys.readouterr().err
    assert "geosim predict: warning:" in err and "MODEL MISSES THE RECORDS" in err


@pytest.mark.parametrize("options,message", [
    ({"layer_split": [1, "x"]}, r"options.layer_split: must be a list of whole numbers >= 1"),
    ({"layer_split": 5}, r"options.layer_split: must be a list of whole numbers"),
    ({"meshes": 3}, r"options.meshes: must be a list of lists of host names"),
    ({"intra_stage": "x"}, r"options.intra_stage: must be one of data, shard"),
    ({"warp_speed": 9}, r"options.warp_speed: pipeshard has no setting 'warp_speed'"),
])
def test_record_options_are_checked_like_settings(tmp_path, options, message):
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps({"technique": "pipeshard", "model": "gpt2", "status": "ok", "scenario": "utah-gpn",
                                "measured": {"total_time_s": 5}, "options": options}) + "\n")
    with pytest.raises(GeosimError, match=r"runs\.jsonl:1: " + message):
        load_cases(path)
