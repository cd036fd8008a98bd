"""`geosim calibrate check`: every record predicted with given parameters, no fitting; models named by
their dimensions; --remat on the predicting commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geosim.calibrate.cases import cases_from_records, load_cases
from geosim.calibrate.check import check, summary
from geosim.cli import main
from geosim.base.errors import GeosimError
from geosim.inputs.params import load_params
from geosim.inputs.scenario import dims_name, get_model, model_catalog
from geosim.studies.reference import study_records

CONSOLE = Path(__file__).parent / "data" / "alpa-gpt-console.log"
LAB = """name = "lab"
[[hosts]]
name = "vm1"
site = "LAB"
gpus = ["A100-40GB", "A100-40GB", "A100-40GB", "A100-40GB"]
"""


def test_model_names_from_dimensions_load_as_those_dimensions():
    m = get_model("gpt-24x1536-v51200")
    assert (m.n_layer, m.n_embd, m.n_head, m.vocab, m.n_ctx) == (24, 1536, 24, 51200, 1024)
    m = get_model("gpt-24x1024-a16-v51200-s2048")
    assert (m.n_head, m.n_ctx) == (16, 2048)
    assert dims_name(24, 1024, 16, 51200) == "gpt-24x1024-v51200"  # 64-wide heads: no -a
    assert dims_name(24, 1536, 16, 51200, 2048) == "gpt-24x1536-a16-v51200-s2048"
    assert get_model(dims_name(24, 1536, 16, 51200, 2048)).n_head == 16
    # the catalog's models are the same whichever way they are named
    medium = model_catalog()["gpt2-medium"]
    assert get_model("gpt-24x1024-v50257").num_params == medium.num_params
    with pytest.raises(GeosimError, match="divisible"):
        get_model("gpt-2x100-a3-v10")
    with pytest.raises(GeosimError, match="unknown model"):
        get_model("gpt-24x1536")


def test_check_predicts_the_studys_records_with_the_shipped_parameters():
    cases = cases_from_records(study_records(), "study")[:4]
    rows = check(cases, load_params())
    assert len(rows) == 4
    for row in rows:  # Table II reports wall-clock totals: compared per iteration
        assert row.measured["time_per_iteration_s"] > 0 and row.predicted["time_per_iteration_s"] > 0
        assert row.error("time_per_iteration_s") == pytest.approx(
            row.predicted["time_per_iteration_s"] / row.measured["time_per_iteration_s"] - 1)
        assert row.memory_verdict == "fits" and row.memory_agrees
    s = summary(rows)
    assert s["time_per_iteration_s"]["n"] == 4 and s["memory"]["measured_out_of_memory"] == 0


def test_check_on_an_imported_alpa_log_cli(tmp_path, capsys):
    """The guide's example: Alpa's benchmark console log against a 4-A100 slice, its 1-GPU runs predicted
    on the first GPU, then checked with the shipped parameters."""
    (tmp_path / "lab.toml").write_text(LAB)
    runs = tmp_path / "runs.jsonl"
    assert main(["calibrate", "import", "alpa-console", str(CONSOLE), "--scenario", str(tmp_path / "lab.toml"),
                 "--out", str(runs)]) == 0
    err = capsys.readouterr().err
    assert "ran on 1 GPU(s): predicted on the first 1 of the slice's (vm1: 1)" in err
    assert main(["calibrate", "check", "--records", str(runs), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    records = doc["records"]
    assert [r["gpus"] for r in records] == [1, 1, 4, 4, 4]
    # the out-of-memory run (1024 sequences in one microbatch on one A100) is predicted out of memory
    assert records[0]["measured_status"] == "out-of-memory" and records[0]["memory_verdict"] == "out-of-memory"
    for r in records[1:]:
        assert set(r["errors"]) == {"time_per_iteration_s", "tflops_per_gpu", "peak_memory_gib"}
    assert doc["summary"]["memory"]["of_them_predicted_out_of_memory"] == 1
    assert main(["calibrate", "check", "--records", str(runs)]) == 0
    table = capsys.readouterr().out
    assert "summary over 5 record(s)" in table and "lab-first1gpus/data" in table


def test_check_of_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(GeosimError):
        load_cases(tmp_path / "none.jsonl")


def test_remat_flag_is_checkpointing(capsys):
    assert main(["predict", "--scenario", "utah-gpn", "--technique", "data", "--model", "gpt2m", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["predict", "--scenario", "utah-gpn", "--technique", "data", "--model", "gpt2m", "--remat",
                 "--json"]) == 0
    remat = json.loads(capsys.readouterr().out)

    def first(doc):
        return next(p for s in doc["slices"] for p in s["predictions"] if p["status"] == "ok")

    # less memory (block inputs only), more compute (the forward again)
    assert first(remat)["peak_memory_gib"] < first(plain)["peak_memory_gib"]
    assert first(remat)["iteration_time_s"] > first(plain)["iteration_time_s"]
