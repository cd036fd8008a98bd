"""geosim calibrate: importers, record errors, the fit recovering known parameters, bad input, outputs.

The full cross-validation (9 fits on Table II) is in bench/bench_calibrate.py; here
fits are small synthetic problems that finish in seconds.

Over 400 lines: one file per command; the fit's cases need their records beside them.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("scipy")

from geosim.inputs.case import Case
from geosim.calibrate.cases import cases_from_records, load_cases, read_runs, to_case
from geosim.calibrate.fit import fit, fit_memory, predict_with
from geosim.calibrate.free import FreeParam, apply_params
from geosim.calibrate.importers import alpa_benchmark_records, alpa_log_record
from geosim.studies.reference import study_records
from geosim.cli import main
from geosim.base.errors import GeosimError
from geosim.inputs.params import load_params
from geosim.predict import predict
from geosim.inputs.records import RunRecord, validate, write_records
from geosim.inputs.scenario import get_model, load_scenario

# Alpa's benchmark.py output (write_tsv, no header): Type, Model Config, #Microbatch, #GPU, Parallel Config,
# Mean Time (s), Std Time (s), #Params (Billion), TFLOPs, Peak Mem (GB), Metadata
GPT = "GPTModelConfig(seq_len=1024, hidden_size=1024, num_layers=24, num_heads=16, vocab_size=50257)"
ALPA_TSV = "\n".join([
    f"gpt\t{GPT}\t1\t4\tUniformParallelArgs(prefer_reduce_scatter=False, use_remat=False, dp=4, op=1, pp=1, "
    f"force_batch_dim_mapping=True)\t5.162\t0.041\t0.355B\t0.96\t12.102\t{{'compilation_times': None}}",
    f"gpt\t{GPT}\t1\t4\tUniformParallelArgs(prefer_reduce_scatter=True, use_remat=False, dp=4, op=1, pp=1, "
    f"force_batch_dim_mapping=True)\t11.204\t0.310\t0.355B\t0.44\t8.731\t{{}}",
    f"gpt\t{GPT}\t4\t4\tUniformParallelArgs(prefer_reduce_scatter=True, use_remat=False, dp=2, op=1, pp=2, "
    f"force_batch_dim_mapping=True)\t2.160\t0.020\t0.355B\t2.29\t6.512\t{{'submesh_shapes': [(1, 2), (1, 2)]}}",
    f"gpt\t{GPT}\t1\t4\tShardParallelArgs(prefer_reduce_scatter=False, use_remat=False, logical_mesh_shape=(1, 4), "
    f"force_batch_dim_mapping=False)\t-1.000\t0.000\t-0.000B\t-1.00\t-0.000\tNone",
    "",
])
ALPA_LOG = """\
Epoch ... 1/20:   0%|          | 0/79 [00:00<?, ?it/s]
Step... 10 | Loss: 10.2311, Learning Rate: 0.00010, Throughput: 1291.55 token/s, 0.41 TFLOP/s
Step... 20 | Loss: 8.9102, Learning Rate: 0.00010, Throughput: 3775.08 token/s, 1.21 TFLOP/s
Step... 30 | Loss: 7.8810, Learning Rate: 0.00010, Throughput: 3801.20 token/s, 1.22 TFLOP/s
Step... 40 | Loss: 7.2003, Learning Rate: 0.00009, Throughput: 3760.91 token/s, 1.20 TFLOP/s
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------- importers

def test_study_importer_gives_table_two_and_the_single_vm_runs():
    records = study_records()
    assert len(records) == 24 and len(study_records(single_vm=False)) == 20
    for r in records:
        assert validate(json.loads(r.to_json()), "x") == r  # the shared schema, round trip
    single = {(r.scenario, r.technique): r for r in records if r.hosts}
    assert single[("tacc-tacc", "data")].measured == {"tflops_per_gpu": 15.74}
    assert single[("utah-gpn", "pipeshard")].measured == {"total_time_s": 26 * 60}
    assert all(r.hosts == ["vm1"] for r in single.values())
    by = {(r.scenario, r.technique): r for r in records if not r.hosts}
    assert by[("utah-gpn", "pipeshard")].measured == {"total_time_s": 57 * 60, "tflops_per_gpu": 2.49}
    assert by[("gat-amst", "shard")].measured["total_time_s"] == 5400 * 60
    assert all("tokens_per_epoch" not in r.workload for r in records)  # not reported: left unknown


def test_alpa_tsv_importer_maps_techniques_and_failed_case(tmp_path):
    records = alpa_benchmark_records(write(tmp_path, "r.tsv", ALPA_TSV), "utah-gpn", global_batch=8)
    assert [r.technique for r in records] == ["data", "zero2", "pipeshard", "shard"]
    assert records[0].model == "gpt2m" and records[0].model_dims is None
    assert records[0].measured == {"time_per_iteration_s": 5.162, "tflops_per_gpu": 0.96, "peak_memory_gib": 12.102}
    assert records[2].workload == {"seq_len": 1024, "global_batch": 8, "microbatches": 4}
    failed = records[3]
    assert failed.status == "out-of-memory" and failed.measured == {} and "-1" in failed.error
    cases = cases_from_records(records, "r.tsv")
    assert [c.metric for c in cases] == ["time_per_iteration_s"] * 3 + [None]


def test_alpa_tsv_old_tuple_and_unknown_model(tmp_path):
    row = ("gpt\t(16, 1024, 1536, 16, 16, 51200)\t1\t4\tUniformParallelArgs(prefer_reduce_scatter=False, "
           "use_remat=True, dp=1, op=4, pp=1, force_batch_dim_mapping=False)\t3.1\t0.1\t0.54B\t5.0\t9.9\t{}\n")
    (r,) = alpa_benchmark_records(write(tmp_path, "old.tsv", row), "tacc-tacc")
    assert r.technique == "shard" and r.workload["global_batch"] == 16
    assert r.model_dims == {"n_layer": 16, "n_embd": 1536, "n_head": 16, "vocab": 51200, "n_ctx": 1024}
    assert to_case("old.tsv:1", r).model.vocab == 51200


def test_alpa_tsv_errors_name_the_line(tmp_path):
    bad = ALPA_TSV.replace("5.162", "fast")
    with pytest.raises(GeosimError, match=r"r\.tsv:1: Mean Time \(s\): not a number"):
        alpa_benchmark_records(write(tmp_path, "r.tsv", bad), "utah-gpn")
    with pytest.raises(GeosimError, match=r"short\.tsv:2: expected 11 tab-separated fields"):
        alpa_benchmark_records(write(tmp_path, "short.tsv", ALPA_TSV.splitlines()[0] + "\ngpt\t1\t2\n"), "utah-gpn")
    with pytest.raises(GeosimError, match="empty"):
        alpa_benchmark_records(write(tmp_path, "empty.tsv", "\n"), "utah-gpn")


def test_alpa_log_importer_takes_the_steady_median(tmp_path):
    r = alpa_log_record(write(tmp_path, "train.log", ALPA_LOG), "utah-gpn", "pipeshard", "gpt2m", global_batch=8)
    assert r.measured["tokens_per_s"] == pytest.approx(3775.08)  # median of the windows after the first
    assert r.measured["tflops_per_gpu"] == pytest.approx(1.21) and r.measured["steps"] == 40
    assert to_case("train.log", r).metric == "tokens_per_s"
    with pytest.raises(GeosimError, match=r"bad\.log:2: a 'Step\.\.\.' line not in Alpa's format"):
        alpa_log_record(write(tmp_path, "bad.log", "x\nStep... 5 | Loss: nope\n"), "utah-gpn", "data", "gpt2m")


# ----------------------------------------------------------------------------- records -> cases

def live_record(**changes) -> dict:
    doc = {"technique": "data", "model": "tiny", "status": "ok", "scenario": "utah-gpn", "source": "live",
           "measured": {"time_per_iteration_s": 0.5}, "workload": {"global_batch": 8}}
    doc.update(changes)
    return doc


def test_live_records_and_schema_errors(tmp_path):
    inline = {"name": "lab", "hosts": [{"name": "a", "site": "X", "gpus": ["T4"]}, {"name": "b", "site": "Y", "gpus": ["T4"]}],
              "links": [{"between": ["a", "b"], "rtt_ms": 30.0, "bandwidth_gbps": 1.0}]}
    lines = [json.dumps(live_record()), "", json.dumps(live_record(scenario=None, cluster=inline, hosts=["a", "b"]))]
    cases = load_cases(write(tmp_path, "live.jsonl", "\n".join(lines) + "\n"))
    assert [c.where.rsplit(":", 1)[1] for c in cases] == ["1", "3"]
    assert cases[1].slice_key == "lab" and cases[1].networked and cases[1].gpus == {"T4"}
    bad_gpu = dict(inline, hosts=[{"name": "a", "site": "X", "gpus": ["H900"]}])
    with pytest.raises(GeosimError, match=r"live\.jsonl:2: cluster\.hosts\[0\]\.gpus: unknown GPU 'H900'"):
        load_cases(write(tmp_path, "live.jsonl", json.dumps(live_record()) + "\n"
                         + json.dumps(live_record(scenario=None, cluster=bad_gpu)) + "\n"))
    with pytest.raises(GeosimError, match=r"r\.jsonl:1: measured\.seconds: unknown measured key"):
        read_runs(write(tmp_path, "r.jsonl", json.dumps(live_record(measured={"seconds": 3})) + "\n"))
    with pytest.raises(GeosimError, match=r"r\.jsonl:1: technique: unknown technique 'zero4'"):
        load_cases(write(tmp_path, "r.jsonl", json.dumps(live_record(technique="zero4")) + "\n"))
    with pytest.raises(GeosimError, match=r"e\.jsonl: no run records in file \(empty\)"):
        read_runs(write(tmp_path, "e.jsonl", "\n\n"))


# ----------------------------------------------------------------------------- the fit

# The kernel timer's GEMM fraction (every GPU's speed from its datasheet and it) and the TCP window: the
# LAN runs pin the first, the WAN runs the second. The truth sits far from the fraction's prior (0.7).
TRUTH = {"compute.gemm_fraction": 0.3, "transport.window_mib": 2.5}
SYNTHETIC_SLICES = ("tacc-tacc", "utah-gpn", "utah-mass")  # LAN and WAN, mixed and RTX-only
SYNTHETIC_RUNS = len(SYNTHETIC_SLICES) * 3 * 2


def synthetic_free(base):
    return [FreeParam("scalar", "compute.gemm_fraction", base.gemm_fraction, 0.05, 1.0, ""),
            FreeParam("scalar", "transport.window_mib", base.network("tcp").window_bytes / 2**20, 1 / 16, 512.0, "MiB")]


def synthetic_runs(noise: float, seed: int = 7) -> list[RunRecord]:
    """Runs the simulator itself predicts with TRUTH, times log-normal noise: what the fit should recover."""
    base = load_params()
    truth = apply_params(base, synthetic_free(base), [TRUTH[p.name] for p in synthetic_free(base)])
    rng = np.random.default_rng(seed)
    records = []
    for scenario in SYNTHETIC_SLICES:
        sc = load_scenario(scenario)
        for technique in ("data", "pipeshard", "zero2"):
            for batch in (16, 32):
                workload = {"global_batch": batch, "microbatches": 4, "tokens_per_epoch": 262144, "epochs": 1}
                p = predict(Case(sc.cluster, get_model("gpt2"), sc.workload(**workload), truth), technique)
                assert p.ok, p.reason
                measured = p.iteration_time_s * math.exp(rng.normal(0.0, noise))
                records.append(RunRecord(technique=technique, model="gpt2", status="ok", scenario=scenario,
                                         workload=workload, measured={"time_per_iteration_s": measured},
                                         source="simulated"))
    return records


@pytest.mark.parametrize("seed", [7, pytest.param(8, marks=pytest.mark.slow)])  # two noise draws: the reported sigma must cover both (the second in the full run)
def test_fit_recovers_known_parameters_within_uncertainty(seed):
    base = load_params()
    cases = cases_from_records(synthetic_runs(noise=0.03, seed=seed), "synthetic")
    result = fit(cases, synthetic_free(base), base, max_nfev=40)
    assert result.rms_log_error < 0.06
    for f in result.fitted:
        true = TRUTH[f.param.name]
        assert 0 < f.sigma_log < 0.5, f
        # the truth within 3 reported sigmas (log space), and the estimate near it
        assert abs(math.log(f.value / true)) <= 3 * f.sigma_log, (f.param.name, f.value, true, f.sigma_log)
    # the fitted parameters reproduce the runs they were fitted on
    assert all(abs(c.error) < 0.1 for c in predict_with(result, cases))


def test_fit_flags_what_the_data_cannot_determine():
    base = load_params()
    cases = [c for c in cases_from_records(synthetic_runs(noise=0.0), "s") if c.slice_key == "TACC-TACC"
             and c.technique in ("data", "pipeshard")]
    # a 0.1 ms LAN never fills a 2.5 MiB window: the window cannot be told from these runs; the GPUs'
    # speed can (compute paces a LAN run)
    result = fit(cases, synthetic_free(base), base, max_nfev=15)
    notes = {f.param.name: f.note for f in result.fitted}
    assert notes["transport.window_mib"] in ("not identifiable", "poorly determined") or "bound" in notes[
        "transport.window_mib"]
    assert notes["compute.gemm_fraction"] == ""
    assert not any("PINNED BY ITS PRIOR" in w for w in result.warnings)
    assert any("window_mib" in w for w in result.warnings)


def test_per_link_step_rtts_free_params_and_their_effect():
    from geosim.calibrate.crossval import nominal_links
    from geosim.calibrate.fit import Evaluator
    from geosim.calibrate.free import LINK_PRIOR_SIGMA, default_free

    base = load_params()
    cases = nominal_links([c for c in cases_from_records(study_records(), "s") if c.technique == "zero2"])
    by_slice = {c.slice_key: c for c in cases}
    # the inferred GAT-AMST/BRIS-STAR link values are gone: RTT and the slices' nominal 10 Gbit/s remain
    for c in cases:
        (link,) = c.cluster.links
        assert link.window_bytes is None and link.step_rtts is None and link.bandwidth_bps == 10e9
    free = default_free(cases, base, fit_links=set(by_slice))
    names = [p.name for p in free]
    assert "transport.collective_step_rtts" in names and "zero2.gather_bytes_per_param" not in names
    # a step round trip per WAN slice; on the 0.1 ms LAN its round trip is lost in the transfer time
    assert {p.target for p in free if p.kind == "link_step_rtts"} == set(by_slice) - {"TACC-TACC"}
    assert [p.name for p in default_free(cases, base, fit_links=set(by_slice), step_rtts="global")
            if "step_rtts" in p.name] == ["transport.collective_step_rtts"]
    extra = default_free(cases, base, step_rtts=None, extra=("zero2.gather_bytes_per_param",
                                                              "transport.p2p_handshake_rtts"))
    # no pipeline in these runs: the rendezvous is left out, ZeRO-2's gather width is in
    assert [p.name for p in extra if p.kind in ("scalar", "setting")] == [
        "compute.gemm_fraction", "compute.memory_fraction", "transport.window_mib",
        "transport.per_message_overhead_us", "zero2.gather_bytes_per_param"]
    # a slice's step value changes its own predictions only, and more round trips per step take longer
    mass = [p for p in free if p.kind == "link_step_rtts" and p.target == "UTAH-MASS"][0]
    ev = Evaluator(cases, free, base)
    x = np.zeros(len(free))
    before = ev.residuals(x)
    x[free.index(mass)] = math.log(3.0)  # 3x the start value
    after = ev.residuals(x)
    changed = {cases[i].slice_key for i in range(len(cases)) if abs(after[i] - before[i]) > 1e-9}
    assert changed == {"UTAH-MASS"} and after[cases.index(by_slice["UTAH-MASS"])] > before[cases.index(by_slice["UTAH-MASS"])]
    # its weak prior is centred on the global step value: log(3) / sigma
    prior = len(cases) + [j for j, _, _ in ev.priors].index(free.index(mass))
    assert after[prior] == pytest.approx(math.log(3.0) / LINK_PRIOR_SIGMA)


def test_the_per_message_overhead_has_a_prior_centred_on_a_sockets_fixed_cost():
    """A fold without Shard once fitted ~8 ms per message to the others' misfit, and Shard's thousands of small
    all-reduces came out twice too slow on TACC-TACC's LAN: the prior keeps the value near NCCL's proxy and
    socket costs (100 us x/ e) unless the records say otherwise."""
    from geosim.calibrate.fit import Evaluator
    from geosim.calibrate.free import DATA_NOISE, PER_MESSAGE_PRIOR, default_free

    base = load_params()
    cases = [c for c in cases_from_records(study_records(), "s") if c.technique == "data" and not c.hosts]
    free = default_free(cases, base, step_rtts=None)
    j = [p.name for p in free].index("transport.per_message_overhead_us")
    ev = Evaluator(cases, free, base)
    centre, sigma = PER_MESSAGE_PRIOR["transport.per_message_overhead_us"]
    assert (centre, sigma) == (100.0, 1.0)
    (row,) = [k for k, (jj, _, _) in enumerate(ev.priors) if jj == j]
    x = np.zeros(len(free))
    x[j] = math.log(centre * math.e / free[j].initial)  # one sigma above the centre
    # a prior is weighed as one record whose log error has a 1-sigma of DATA_NOISE
    assert ev.residuals(x)[len(cases) + row] == pytest.approx(DATA_NOISE / sigma, rel=1e-9)


def test_uncertainty_range_of_an_unidentifiable_value_does_not_overflow():
    from geosim.calibrate.diagnostics import Fitted

    f = Fitted(FreeParam("scalar", "transport.per_message_overhead_us", 50.0, 1.0, 1e6, "us"), 53.0, 844.0)
    assert (f.low, f.high) == (0.0, math.inf)
    assert Fitted(f.param, 53.0, 0.1).high == pytest.approx(53.0 * math.exp(0.1))


def test_out_of_memory_records_constrain_the_workspace():
    params = replace(load_params(), workspace_bytes=1.0 * 2**30)
    sc = load_scenario("utah-gpn")

    def margin(technique):  # GiB the tightest GPU has left, with no workspace reserved
        p = predict(Case(sc.cluster, get_model("gpt2L"), sc.workload(), params), technique)
        return min(m.has_gib - (m.need_gib - 1.0) for m in p.memory)

    tight, loose = sorted((t for t in ("data", "zero2", "shard", "pipeshard") if 0 < margin(t) < 8), key=margin)[:2]
    recs = [RunRecord(technique=tight, model="gpt2L", status="out-of-memory", scenario="utah-gpn", source="simulated"),
            RunRecord(technique=loose, model="gpt2L", status="ok", scenario="utah-gpn",
                      measured={"time_per_iteration_s": 9.0}, source="simulated")]
    fitted, memory = fit_memory(cases_from_records(recs, "m"), params)
    # the tight one ran out of memory: a workspace between the two margins explains both outcomes
    assert memory == {"right": 2, "total": 2, "workspace_gib": fitted.workspace_bytes / 2**30, "note": memory["note"]}
    assert margin(tight) < fitted.workspace_bytes / 2**30 <= margin(loose)


# ----------------------------------------------------------------------------- the command line

@pytest.mark.slow
def test_cli_fit_writes_a_params_file_predict_reads(tmp_path, capsys):
    runs = tmp_path / "runs.jsonl"
    write_records(runs, synthetic_runs(noise=0.02))  # efficiencies, window, message overhead, 3 overheads
    out = tmp_path / "fitted.toml"
    code = main(["calibrate", "fit", "--records", str(runs), "--out", str(out), "--links", "none", "--max-evaluations", "6",
                 "--scenarios-out", str(tmp_path / "sc")])
    report = capsys.readouterr().out
    assert code == 0, report
    assert "fit quality" in report and f"memory outcomes right: {SYNTHETIC_RUNS} of {SYNTHETIC_RUNS}" in report
    params = load_params(out)
    assert len(params.fitted_on) == SYNTHETIC_RUNS and params.fitted_on[0].startswith("simulated:TACC-TACC/")
    assert main(["predict", "--params", str(out), "--scenario", "tacc-tacc", "--hosts", "all", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params"] == str(out)


@pytest.mark.slow
def test_cli_fit_writes_fitted_links_with_step_rtts(tmp_path, capsys):
    import tomllib

    runs = tmp_path / "runs.jsonl"
    write_records(runs, [r for r in synthetic_runs(noise=0.02) if r.scenario != "tacc-tacc"])
    out, sc = tmp_path / "fitted.toml", tmp_path / "sc"
    assert main(["calibrate", "fit", "--records", str(runs), "--out", str(out), "--max-evaluations", "3",
                 "--scenarios-out", str(sc), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    fitted = tomllib.loads(out.read_text())["fitted"]["links"]
    assert set(fitted) == {"UTAH-GPN", "UTAH-MASS"} and set(fitted["UTAH-MASS"]) == {"window_mib", "step_rtts"}
    assert report["links"]["UTAH-MASS"]["step_rtts"] == pytest.approx(fitted["UTAH-MASS"]["step_rtts"], rel=1e-5)
    # the scenario file carries the fitted link values, and the simulator reads them back
    link = load_scenario(str(sc / "utah-mass.toml")).cluster.links[0]
    assert link.step_rtts == pytest.approx(fitted["UTAH-MASS"]["step_rtts"], rel=1e-5)
    assert link.window_bytes == pytest.approx(fitted["UTAH-MASS"]["window_mib"] * 2**20, rel=1e-5)


@pytest.mark.parametrize("content, message", [
    ("", "no run records in file (empty)"),
    (json.dumps(live_record(scenario=None, cluster={"hosts": [{"name": "a", "site": "X", "gpus": ["H900"]}]})),
     "unknown GPU 'H900'"),
    ("\n".join(json.dumps(live_record(technique=t, model="gpt2m")) for t in ("data", "zero2")),
     "2 measured records cannot determine"),
])
def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, content, message):
    runs = write(tmp_path, "runs.jsonl", content + "\n")
    out = tmp_path / "fitted.toml"
    assert main(["calibrate", "fit", "--records", str(runs), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and str(runs) in err or message.startswith("2 measured")
    assert list(tmp_path.iterdir()) == [runs]


def test_cli_import_then_crossval_pieces(tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    assert main(["calibrate", "import", "alpa-tsv", str(write(tmp_path, "r.tsv", ALPA_TSV)), "--scenario", "utah-gpn",
                 "--global-batch", "8", "--records-out", str(out)]) == 0
    assert main(["calibrate", "import", "study", "--records-out", str(out), "--append"]) == 0
    assert len(read_runs(out)) == 28  # 4 Alpa rows, Table II's 20 cells and the 4 single-VM runs
    assert main(["calibrate", "import", "alpa-log", str(write(tmp_path, "t.log", ALPA_LOG)), "--records-out", str(out)]) == 2
    assert "give --scenario" in capsys.readouterr().err


def test_crossval_report_and_plot(tmp_path):
    from geosim.calibrate.crossval import Cell, FoldResult, Report, folds
    from geosim.calibrate.plot import plot_predicted_vs_measured

    cases = cases_from_records(study_records(), "study")
    plan = folds(cases, ("loto", "loso", "single-vm"))
    assert len(plan) == 10
    for name, kind, held, train, test in plan:
        assert not set(train) & set(test)
        if kind == "single-vm":  # fitted on Table II alone, the four single-VM runs predicted
            assert len(test) == 4 and len(train) == 20 and all(cases[i].hosts for i in test)
            continue
        # scored on Table II's cells; the held-out technique's or slice's single-VM runs are not trained on
        assert len(test) in (4, 5) and not any(cases[i].hosts for i in test)
        assert all(held not in (cases[i].technique, cases[i].slice_key) for i in train)
    cells = [Cell("A", "data", 100, 110, "f"), Cell("A", "shard", 300, 250, "f"), Cell("B", "data", 100, 300, "g"),
             Cell("B", "shard", 200, 150, "g")]
    report = Report("loto", [FoldResult("f", "loto", "x", cells, 0.1, {}, [], 1.0)])
    assert report.order_right() == {"A": True, "B": False}
    assert report.median_abs_error == pytest.approx((0.1 + 1 / 6 + 0.25) / 2 if False else np.median([0.1, 1 / 6, 2, 0.25]))
    assert report.worst.slice == "B" and report.to_dict()["order_right"] == {"A": True, "B": False}
    png = tmp_path / "cv.png"
    plot_predicted_vs_measured({"loto": [(c.slice, c.technique, c.measured_s, c.predicted_s) for c in cells]}, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_fraction_only_the_prior_pins_is_flagged_loudly():
    """Runs paced by a 103 ms WAN say next to nothing about compute: the fit says so."""
    base = load_params()
    cases = [c for c in cases_from_records(study_records(single_vm=False), "fabric-slm-2026")
             if c.slice_key == "GAT-AMST" and c.technique in ("data", "zero2")]
    free = [FreeParam("scalar", "compute.gemm_fraction", base.gemm_fraction, 0.05, 1.0, ""),
            FreeParam("scalar", "transport.window_mib", base.network("tcp").window_bytes / 2**20, 1 / 16, 512.0, "MiB")]
    result = fit(cases, free, base, max_nfev=8)
    assert any(w.startswith("PINNED BY ITS PRIOR: compute.gemm_fraction") for w in result.warnings), result.warnings
    assert not any("PINNED BY ITS PRIOR: transport" in w for w in result.warnings)


def test_a_folds_unknown_sigma_is_null_in_the_json_report():
    """A fold with a parameter at a bound (sigma NaN, or infinite when not identifiable) crashed
    `calibrate crossval --json` (allow_nan=False): the report says null instead."""
    import json
    import math

    from geosim.calibrate.crossval import fitted_summary
    from geosim.calibrate.diagnostics import Fitted
    from geosim.calibrate.free import FreeParam

    def param(key):
        return FreeParam("scalar", key, 1.0, 0.1, 10.0, "")

    summary = fitted_summary([Fitted(param("a"), 10.0, math.nan, "at its upper bound"), Fitted(param("b"), 2.0, math.inf),
                              Fitted(param("c"), 3.0, 0.3)])
    report = json.loads(json.dumps(summary, allow_nan=False))
    assert [report[k]["sigma_log"] for k in "abc"] == [None, None, 0.3]
    assert report["a"]["note"] == "at its upper bound" and report["a"]["value"] == 10.0
