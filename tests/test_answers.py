"""One answer: predict, select, plan and sweep rank with one rule (geosim/studies/ranking.py), each
slice's output starts with the verdict, and the bugs of issue 17 stay fixed."""

from __future__ import annotations

import json

import pytest

from geosim.inputs.case import Case
from geosim.cli import main
from geosim.inputs.params import load_params
from geosim.inputs.scenario import BUILTIN_SCENARIOS, get_model, load_scenario
from geosim.studies.plan import make_plan
from geosim.studies.ranking import Option, margin, rank, same_run, verdict
from geosim.studies.whatif import with_rtt
from geosim.techniques import STUDY_ORDER, default_techniques
from geosim.base.units import ms_to_s


def run_json(capsys, argv: list[str]):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def slice_blocks(text: str) -> dict[str, list[str]]:
    """Output lines under each slice header ('UTAH-MASS  (vm1: ...)')."""
    blocks, current = {}, None
    for line in text.splitlines():
        if line and not line.startswith(" ") and "  (" in line:
            current = line.split()[0]
            blocks[current] = []
        elif current and line.startswith("  "):
            blocks[current].append(line)
    return blocks


# -- the rule -------------------------------------------------------------------------------------


def test_the_rule_fastest_first_then_fewer_gpu_hours():
    case = _case("utah-mass")
    plan = make_plan(case, keep=None)
    ranked = rank(plan.options)
    assert ranked == plan.options  # plan ranks with the module's rule
    # an option that may not fit (within the memory model's error) comes after every one that fits
    risky = [o for o in ranked if o.prediction.memory_verdict == "may not fit"]
    fits = [o for o in ranked if o.prediction.memory_verdict != "may not fit"]
    assert ranked == fits + risky
    times = [o.ranked_time_s for o in fits]  # time to the same training progress
    assert times == sorted(times) and [o.ranked_time_s for o in risky] == sorted(o.ranked_time_s for o in risky)
    line = verdict("X", ranked)
    assert line.startswith(f"X: use {ranked[0].label} ({ranked[0].gpus} GPUs)") and "predicted" in line
    # the runner-up is the next option that is not the best's own run (the hybrid is SparseLoCo where
    # every VM holds a replica)
    second = next(o for o in ranked[1:] if not same_run(o, ranked[0]))
    assert f"runner-up {second.label}" in line and margin(second.ranked_time_s, times[0]) in line


def test_margin_reads_as_percent_or_ratio():
    assert margin(101.0, 100.0) == "+1.0%" and margin(300.0, 100.0) == "3.00x"


# -- one answer across the commands ------------------------------------------------------------------


@pytest.mark.slow
def test_sweep_and_plan_find_the_same_best_at_several_rtts(tmp_path, capsys):
    rtts = [0.1, 1.0, 10.0, 57.4, 100.0]
    spec = ",".join(f"{r:g}" for r in rtts)
    # both rank the same set: the synchronous techniques (the sweep's default is every technique, as plan's)
    synchronous = ",".join(default_techniques(synchronous=True))
    summary = run_json(capsys, ["sweep", "--scenario", "utah-mass", "--rtt-ms", spec, "--sweep-dir", str(tmp_path),
                                "--workers", "1", "--quiet", "--technique", synchronous])
    (best,) = summary["best"]
    planned = run_json(capsys, ["plan", "--scenario", "utah-mass", "--sweep-rtt", spec, "--technique",
                                synchronous])["slices"][0]
    assert [r["rtt_ms"] for r in best["rows"]] == rtts == [r["rtt_ms"] for r in planned["rows"]]
    assert [r["best_option"] for r in best["rows"]] == [r["best_option"] for r in planned["rows"]]
    assert [r["total_time_s"] for r in best["rows"]] == [r["total_time_s"] for r in planned["rows"]]
    # the answer flips on this slice (Pipeshard across the WAN at low RTT, one VM at high RTT): the sweep
    # brackets each flip between two of its RTTs, plan locates it inside the same bracket
    kinds = [r["best"] for r in best["rows"]]
    assert kinds[0] == "Pipeshard vm1>vm2" and kinds[-1] == "Data on vm1"
    assert len(best["flips"]) == len(planned["flips"]) >= 1
    for bracket, located in zip(best["flips"], planned["flips"]):
        lo, hi = bracket["between_ms"]
        assert lo <= located["between_ms"][0] < located["between_ms"][1] <= hi
        assert (bracket["below"], bracket["above"]) == (located["below"], located["above"])


def test_sweep_best_equals_plan_best_in_the_library(tmp_path):
    from geosim.studies.sweep.best import best_vs_rtt
    from geosim.studies.sweep.grid import Grid
    from geosim.studies.sweep.run import SerialExecutor, make_context, run_sweep

    rtts = [5.0, 80.0]
    grid = Grid({"scenario": ["utah-mass"], "technique": list(STUDY_ORDER), "model": ["gpt2m"], "rtt_ms": rtts})
    ctx = make_context(grid)
    executor = SerialExecutor(ctx)
    rows = run_sweep(grid, ctx, tmp_path, executor, progress=False).rows
    (doc,) = best_vs_rtt(rows, ctx, executor)
    case = _case("utah-mass")
    for row in doc["rows"]:
        plan = make_plan(case.with_(cluster=with_rtt(case.cluster, ms_to_s(row["rtt_ms"]))), keep=2,
                         techniques=STUDY_ORDER)
        assert row["best_option"] == plan.best.label and row["total_time_s"] == plan.best.total_time_s


@pytest.mark.slow
def test_predict_select_and_plan_name_the_same_best_for_the_five_slices(capsys):
    docs = {}
    for command in ("predict", "select", "plan"):
        assert main([command]) == 0
        docs[command] = slice_blocks(capsys.readouterr().out)
    assert set(docs["predict"]) == {load_scenario(n).cluster.name for n in BUILTIN_SCENARIOS}
    for name in docs["predict"]:
        firsts = {command: docs[command][name][0].strip() for command in docs}
        for command, line in firsts.items():
            assert line.startswith("verdict: use "), (command, name, line)
        # the same best option, the same time, the same runner-up: one line, three commands
        assert firsts["predict"] == firsts["select"] == firsts["plan"], firsts
        agrees = "Algorithm 1 agrees" in firsts["plan"]
        for command in docs:
            explained = any(line.strip().startswith("why Algorithm 1 differs:") for line in docs[command][name][:2])
            assert explained != agrees, (command, name)


def test_the_verdict_leads_each_slice_of_predict_select_and_plan(capsys):
    # UTAH-MASS at 1 ms: Pipeshard across the two VMs is fastest, while Algorithm 1 (TFLOP/s probes
    # against delta) picks one VM: the verdict says so and by how much, the next line says why
    case = _case("utah-mass")
    plan = make_plan(case.with_(cluster=with_rtt(case.cluster, ms_to_s(1.0))), keep=2, techniques=STUDY_ORDER)
    why = plan.why_algorithm1_differs()
    assert plan.algorithm.label == "Data on vm1" and plan.best.kind == "Pipeshard vm1>vm2" and why
    for command in ("predict", "select", "plan"):
        assert main([command, "--scenario", "utah-mass", "--rtt-ms", "1", "--technique", ",".join(STUDY_ORDER)]) == 0
        (lines,) = slice_blocks(capsys.readouterr().out).values()
        assert lines[0] == "  " + plan.verdict("verdict"), (command, lines[0])
        assert "runner-up" in lines[0] and "Algorithm 1 picks Data on vm1 (+" in lines[0]
        assert lines[1] == f"  why Algorithm 1 differs: {why}"


def test_verdict_json_beside_the_choice(capsys):
    study = ["--technique", ",".join(STUDY_ORDER)]
    (doc,) = run_json(capsys, ["select", "--scenario", "utah-mass", "--rtt-ms", "1", *study])["slices"]
    assert doc["verdict"].startswith("verdict: use Pipeshard vm1>vm2") and doc["label"] == "Data on vm1"
    assert doc["why_algorithm1_differs"]
    pred = run_json(capsys, ["predict", "--scenario", "utah-mass", "--rtt-ms", "1", *study])
    (s,) = pred["slices"]
    assert s["verdict"] == doc["verdict"] and s["why_algorithm1_differs"] == doc["why_algorithm1_differs"]
    assert s["algorithm1"] == doc["label"] and f"use {s['best']['label']} " in s["verdict"]
    assert pred["note"] == "times are simulator estimates"


# -- predict: synchronous table, low-communication on time to target ------------------------------------


def test_low_communication_techniques_are_not_ranked_on_time_per_epoch(capsys):
    assert main(["predict", "--scenario", "utah-mass"]) == 0
    (lines,) = slice_blocks(capsys.readouterr().out).values()
    table_end = next(i for i, line in enumerate(lines) if line.startswith("  time to target"))
    table = lines[:table_end]
    for name in ("diloco", "sparseloco", "hybrid"):
        assert not any(line.split()[0] == name for line in table[3:]), name
    targets = lines[table_end:]
    assert any(line.split()[:2] == ["sparseloco", "vm1+vm2"] for line in targets)
    assert any("the same run as Hybrid here" in line for line in targets)  # identical rows say so
    assert "an estimate" in targets[0]
    assert "efficiency" in targets[1]


def test_predict_repeated_technique_keeps_each(capsys):
    doc = run_json(capsys, ["predict", "--scenario", "tacc-tacc", "--technique", "data", "--technique", "zero2,shard",
                            "--hosts", "all"])
    assert [p["technique"] for p in doc["slices"][0]["predictions"]] == ["data", "zero2", "shard"]


# -- report: like with like --------------------------------------------------------------------------


def test_report_compares_measurements_with_predictions_at_the_measured_rtt(tmp_path, capsys):
    """The bug: report.html put the prediction at the grid's middle (14 ms) beside the study's
    measurement at 57.4 ms. Now the prediction beside a measurement is at the measurement's RTT."""
    from geosim.report.html import build_report
    from geosim.predict import predict

    assert main(["sweep", "--scenario", "utah-mass", "--technique", "data", "--rtt-ms", "1,14,100",
                 "--sweep-dir", str(tmp_path), "--workers", "1", "--quiet", "--no-best"]) == 0
    capsys.readouterr()
    build_report(tmp_path)
    page = (tmp_path / "report.html").read_text()
    section = page.split("Predicted beside measured, at the measured RTT", 1)[1].split("<h2", 1)[0]
    case = _case("utah-mass")
    at = {rtt: predict(case.with_(cluster=with_rtt(case.cluster, ms_to_s(rtt))), "data").total_time_s for rtt in (14, 57.4)}
    assert "<td>57.4</td><td>data</td>" in section
    assert f"<td>{at[57.4] / 60:,.1f} min</td><td>272.0 min</td>" in section
    assert f"{at[14] / 60:,.1f} min</td><td>272.0 min" not in page  # never the 14 ms prediction beside it


# -- models ---------------------------------------------------------------------------------------------


def test_gpt2_names_mean_gpt2_sizes_and_the_studys_names_still_load(capsys):
    sizes = {"gpt2": (12, 768), "gpt2-medium": (24, 1024), "gpt2-large": (36, 1280), "gpt2-xl": (48, 1600)}
    for name, (layers, width) in sizes.items():
        m = get_model(name)
        assert (m.n_layer, m.n_embd) == (layers, width)
    assert (get_model("gpt2L").n_layer, get_model("gpt2L").name) == (30, "gpt2L")
    assert (get_model("gpt2l").n_layer, get_model("study-gpt2l-26").n_layer) == (26, 26)
    assert get_model("gpt2m").num_params == get_model("gpt2-medium").num_params
    rows = {r["name"]: r for r in run_json(capsys, ["models"])}
    assert rows["study-gpt2L-30"]["aliases"] == ["gpt2L"] and rows["gpt2-medium"]["aliases"] == ["gpt2m"]
    assert 350e6 < rows["gpt2-medium"]["parameters"] < 360e6 and 770e6 < rows["gpt2-large"]["parameters"] < 780e6


# -- plots ------------------------------------------------------------------------------------------------


def test_plots_are_wide_with_full_names_and_distinguishable_lines(tmp_path):
    import struct

    from geosim.report.plots import _style, plot_time_vs_axis

    rows = []
    for tech, base in (("data", 1.0), ("sparseloco", 2.0), ("hybrid", 2.0)):  # two series on top of each other
        for x in (1.0, 10.0, 100.0):
            rows.append({"point": {"scenario": "s", "technique": tech, "model": "gpt2m", "rtt_ms": x, "gpu": "native",
                                   "bandwidth_gbps": "native", "hosts": "all", "workload": {}},
                         "technique": tech, "cluster": "S", "model": "gpt2m", "num_gpus": 4, "status": "ok",
                         "wan_rtt_ms": x, "total_time_s": 3600 * base * (1 + x / 100)})
    crossing = {"point": rows[0]["point"], "a": "data", "b": "sparseloco", "at": 5.0}
    png, svg = plot_time_vs_axis(rows, tmp_path / "t", crossovers=[crossing])
    width, height = struct.unpack(">II", png.read_bytes()[16:24])
    assert width >= 1200
    text = svg.read_text()
    for label in ("Data", "SparseLoCo", "Hybrid", "Data / SparseLoCo"):
        assert label in text
    assert _style("sparseloco") != _style("hybrid")


def _case(name: str, model: str = "gpt2m") -> Case:
    scenario = load_scenario(name)
    return Case(scenario.cluster, get_model(model), scenario.workload(), load_params())


def test_option_label_names_the_variant():
    plan = make_plan(_case("utah-mass"), keep=None, techniques=("pipeshard",))
    across: Option = next(o for o in plan.options if len(o.hosts) == 2)
    assert across.kind == "Pipeshard vm1>vm2"
    split = "/".join(map(str, across.options["layer_split"]))
    assert across.label == f"Pipeshard vm1>vm2 layers {split}, {across.microbatches} microbatches, intra-stage data"
    alone = next(o for o in plan.options if len(o.hosts) == 1)
    assert alone.kind.startswith("Pipeshard on vm1 (")


def test_select_epochs_is_the_workload_and_probe_epochs_the_probes(capsys):
    """The bug: `select --epochs` meant how long each probe trains. Now --epochs is the workload the
    verdict's time is for (as everywhere) and --probe-epochs is Algorithm 1's epsilon."""
    from geosim.studies.ranking import fmt_time

    study = ["--technique", ",".join(STUDY_ORDER)]
    (short,) = run_json(capsys, ["select", "--scenario", "utah-mass", "--epochs", "5", *study])["slices"]
    (full,) = run_json(capsys, ["select", "--scenario", "utah-mass", "--probe-epochs", "3", *study])["slices"]
    case = _case("utah-mass")
    five = make_plan(case.with_(workload=case.workload.__class__(**{**vars(case.workload), "epochs": 5})), keep=2,
                     techniques=STUDY_ORDER)
    twenty = make_plan(case, keep=2, techniques=STUDY_ORDER)
    assert f"{fmt_time(five.best.total_time_s)} predicted" in short["verdict"]
    assert f"{fmt_time(twenty.best.total_time_s)} predicted" in full["verdict"]
    assert five.best.total_time_s < twenty.best.total_time_s / 2
    assert short["probes"] == full["probes"]  # probe TFLOP/s do not depend on how long a probe trains
    assert main(["select", "--scenario", "utah-mass", "--probe-epochs", "0"]) == 2
