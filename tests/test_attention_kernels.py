"""The device check's kernel records (issue 41 item 6): read back, refitted, written to the attention table.
The jax sweep runs for real on this machine's CPU (unfused: no fused kernel on a CPU); the torch part is
checked to say plainly that torch is missing where it is."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from geosim.base.errors import GeosimError
from geosim.live.experiments import attention_kernels as ak
from geosim.inputs.scenario import gpu_catalog
from geosim.sim.attention import parse_table

ROOT = Path(__file__).resolve().parent.parent


def synthetic(device="NVIDIA H100 80GB HBM3", at=None, half=300.0, peak=None):
    """Fused records that follow at[d] * S / (S + half) exactly, as the H100 would report them."""
    at = at or {("forward", 64): 0.30, ("forward", 128): 0.36, ("backward", 64): 0.22, ("backward", 128): 0.28}
    peak = peak or gpu_catalog()["H100"].peak_tflops("bf16", False)
    out = []
    for (direction, d), f in at.items():
        for s in (1024, 2048, 4096, 8192, 16384, 32768):
            heads, batch = 2048 // d, max(1, 32768 // s)
            flops = ak.attention_flops(batch, heads, s, d, direction == "backward")
            seconds = flops / (peak * 1e12 * f * s / (s + half))
            out.append(ak.attention_record("torch", "fused", direction, device, batch, heads, s, d, seconds))
    return out


def test_the_fit_recovers_a_known_curve():
    records = ak.analyse(synthetic())
    fit = records["hopper"]["fit"]
    assert fit["seq_half"] == pytest.approx(300.0, rel=0.01)
    assert fit["forward"][128] == pytest.approx(0.36, rel=0.01) and fit["backward"][64] == pytest.approx(0.22, rel=0.01)
    assert fit["rms_log_error"] < 1e-3


def test_flops_are_geosims_count():
    assert ak.attention_flops(2, 16, 1024, 64, backward=False) == 4 * 1024 ** 2 * 64 * 2 * 16 / 2
    assert ak.attention_flops(2, 16, 1024, 64, backward=True) == 2.5 * ak.attention_flops(2, 16, 1024, 64, False)


def test_unfused_records_are_set_beside_geosims_unfused_kernels():
    record = ak.attention_record("torch", "unfused", "forward", "NVIDIA H100 80GB HBM3", 4, 32, 2048, 64, 0.01)
    (row,) = ak.analyse([record])["hopper"]["unfused"]
    assert 0 < row["model_s"] < 1


def test_records_file_read_back_and_bad_lines_named(tmp_path):
    path = tmp_path / "k.jsonl"
    run_record = {"schema": "geosim.run/1", "status": "ok"}  # a run record in the same file is skipped
    path.write_text("\n".join(json.dumps(r) for r in [run_record, *synthetic()[:2]]) + "\n")
    assert len(ak.load_records(str(path))) == 2
    bad = {**synthetic()[0], "seq_len": -4}
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(GeosimError) as err:
        ak.load_records(str(path))
    assert err.value.key == "seq_len" and "line 1" in str(err.value)
    path.write_text("{not json\n")
    with pytest.raises(GeosimError, match="line 1 is not JSON"):
        ak.load_records(str(path))
    with pytest.raises(GeosimError, match="SEQ:HEAD_DIM"):
        ak.parse_sweep("1024:65")


def test_one_command_refits_and_writes_the_table(tmp_path, capsys):
    table = tmp_path / "attention-kernels.toml"
    shutil.copy(ak.TABLE, table)
    records = tmp_path / "k.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in synthetic()))
    assert ak.main(["--records", str(records), "--write", "--table", str(table)]) == 0
    curves = parse_table(table.read_text())
    hopper = curves["hopper"]
    assert hopper.kind == "measured" and dict(hopper.forward)[128] == pytest.approx(0.36, abs=1e-3)
    assert hopper.seq_half == pytest.approx(300, abs=2) and "k.jsonl" in hopper.source
    assert curves["ampere"] == parse_table(ak.TABLE.read_text())["ampere"]  # the other entries as they were
    assert "wrote [hopper]" in capsys.readouterr().out
    assert ak.main([]) == 2 and "one of them" in capsys.readouterr().err


@pytest.mark.slow  # ~1.6 s of CPU: JAX compiles and times the kernels on this CPU
def test_jax_attention_sweep_runs_for_real_on_this_cpu(tmp_path):
    records = ak.measure_jax([(64, 64)], repeats=2, tokens=64)
    assert {(r["kernel"], r["direction"]) for r in records} == {("unfused", "forward"), ("unfused", "backward")}
    assert all(r["seconds"] > 0 and r["heads"] == 32 and r["batch"] == 1 for r in records)
    path = tmp_path / "k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    analysed = ak.analyse(ak.load_records(str(path)))
    assert set(analysed) == {"cpu"} and analysed["cpu"]["fit"] is None and len(analysed["cpu"]["unfused"]) == 2


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_the_torch_part_says_plainly_that_torch_is_missing(tmp_path):
    out = tmp_path / "t.jsonl"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "torch_kernels.py"), "--out", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 3 and "torch is not installed here" in done.stderr and not out.exists()


def test_jax_cudnn_records_are_fitted_apart_and_never_written(tmp_path):
    torch_rows = synthetic()
    jax_rows = [{**r, "framework": "jax", "seconds": r["seconds"] / 2, "tflops": r["tflops"] * 2} for r in synthetic()]
    analysed = ak.analyse(torch_rows + jax_rows)["hopper"]
    assert set(analysed["fits"]) == {"jax", "torch"}
    assert analysed["fit"]["forward"][128] == pytest.approx(0.36, rel=0.01)  # the table's: torch's alone
    assert analysed["fits"]["jax"]["forward"][128] == pytest.approx(0.72, rel=0.01)
    table = tmp_path / "t.toml"
    shutil.copy(ak.TABLE, table)
    records = tmp_path / "k.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in jax_rows))
    assert ak.main(["--records", str(records), "--write", "--table", str(table)]) == 0
    assert table.read_text() == ak.TABLE.read_text()  # jax's kernel alone writes nothing


def test_hoppers_measured_entry_is_what_its_shipped_records_give():
    """The table's [hopper] entry names its records (bench/bench_gpu.py on an H200, 2026-11-28): refitting them
    gives the entry's figures, so the table says what was measured and nothing else."""
    records_file = ROOT / "docs" / "results" / "data" / "2026-11-28-kernels-nvidia-h200.jsonl"
    hopper = parse_table(ak.TABLE.read_text())["hopper"]
    assert hopper.kind == "measured" and records_file.name in hopper.source
    fit = ak.analyse(ak.load_records(str(records_file)))["hopper"]["fit"]
    assert fit["records"] == 24 and fit["rms_log_error"] < 0.1
    for direction in ("forward", "backward"):
        for d, at in getattr(hopper, direction):
            assert fit[direction][d] == pytest.approx(at, abs=5e-4)
    assert fit["seq_half"] == pytest.approx(hopper.seq_half, abs=1)
