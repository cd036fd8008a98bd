"""A layout asked on the command line (issue 34): --tensor-parallel, --pipeline-parallel,
--data-parallel, --virtual-stages, --layer-split with --microbatches reproduce the layout they name,
against hand formulas on a small case; every mistake is one line naming its flag."""

from __future__ import annotations

import json

import pytest

from geosim.inputs.case import Case
from geosim.inputs.params import default_params
from geosim.predict import predict
from geosim.inputs.scale import scale_scenario
from geosim.inputs.scenario import model_catalog
from geosim.sim.schedule import Collective, Compute, Repeat
from geosim.techniques import build_schedule

from conftest import run_cli as run

SCENARIO = "scale:1x4x4:H100"  # 4 hosts of 4 H100s: 16 GPUs
GPT2M = model_catalog()["gpt2m"]


def flops(ops) -> float:
    return sum(op.flops if type(op) is Compute else op.count * flops(op.ops) if type(op) is Repeat else 0.0
               for op in ops)


LAYOUT = ["--tensor-parallel", "2", "--pipeline-parallel", "2", "--data-parallel", "4", "--microbatches", "4",
          "--global-batch", "32"]


def test_the_layout_asked_is_the_layout_predicted():
    """t=2, p=2, d=4 on 16 GPUs: 2 stages of 2 hosts (8 GPUs), each 4 tensor groups of 2 GPUs; each
    GPU computes 1/2 of the layer work of 1/4 of every microbatch; gradients all-reduced over the
    4 GPUs holding the same shard; the row is that layout's prediction to the bit."""
    code, out, err = run(["predict", "--scenario", SCENARIO, "--technique", "pipeshard", "--hosts", "all",
                          "--json", *LAYOUT])
    assert code == 0, err
    (row,) = json.loads(out)["slices"][0]["predictions"]
    assert row["description"] == "2 stages (12/12 layers), 4 microbatches, 1f1b, intra-stage shard-data, tensor 2"
    scenario = scale_scenario(SCENARIO)
    workload = scenario.workload(global_batch=32, microbatches=4)
    case = Case(scenario.cluster, GPT2M, workload, default_params())
    options = {"meshes": (("s0v0", "s0v1"), ("s0v2", "s0v3")), "intra_stage": "shard-data", "tensor": 2}
    assert row["total_time_s"] == predict(case, "pipeshard", options=options).total_time_s
    schedule = build_schedule("pipeshard", case, options)
    t, d, M, s = 2, 4, 4, workload.seq_len
    tokens = workload.global_batch / M / d * s
    for dev in schedule.devices:
        stage = 0 if dev.host in ("s0v0", "s0v1") else 1
        forward = 12 * GPT2M.layer_forward_flops(tokens, s) + (GPT2M.head_forward_flops(tokens) if stage else 0.0)
        program = schedule.programs[dev.rank]
        assert flops(program) == pytest.approx(M * 3 * forward / t, rel=1e-12)
        (grads,) = [op for op in program if type(op) is Collective and op.label == "stage gradient all-reduce"]
        assert len(grads.group) == d


def test_virtual_stages_and_a_layer_split_reach_the_schedule(tmp_path):
    code, out, err = run(["trace", "--scenario", SCENARIO, "--technique", "pipeshard", "--pipeline-parallel", "4",
                          "--virtual-stages", "2", "--layer-split", "3,3,3,3,3,3,3,3", "--microbatches", "4",
                          "--global-batch", "64", "--iterations", "1", "--out", str(tmp_path / "t.json"), "--json"])
    assert code == 0, err
    (trace,) = json.loads(out)["traces"]
    assert trace["description"] == ("4 stages (6/6/6/6 layers), 4 microbatches, 1f1b, intra-stage data, "
                                    "2 virtual stages each (interleaved)")


@pytest.mark.parametrize("flags, flag, problem", [
    (["--tensor-parallel", "3"], "--tensor-parallel", "3 must divide the 4 GPUs of a host"),
    (["--tensor-parallel", "4", "--pipeline-parallel", "3"], "--pipeline-parallel", "does not divide the 16 GPUs"),
    (["--tensor-parallel", "4", "--pipeline-parallel", "2", "--data-parallel", "4"], "--data-parallel",
     "= 32 GPUs, but the hosts asked have 16"),
    (["--data-parallel", "2"], "--data-parallel", "a stage holds whole hosts"),
    (["--layer-split", "12,x"], "--layer-split", "comma-separated whole numbers"),
    (["--virtual-stages", "0"], "--virtual-stages", "must be >= 1"),
    (["--tensor-parallel", "2", "--technique", "data"], "--tensor-parallel", "data take(s) no layout"),
])
def test_a_layout_mistake_is_one_line_naming_its_flag(flags, flag, problem):
    argv = ["predict", "--scenario", SCENARIO, "--hosts", "all"] + flags
    if "--technique" not in flags:
        argv += ["--technique", "pipeshard"]
    code, out, err = run(argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and f"{flag}: " in err and problem in err, err


def test_draws_redo_the_layout_asked():
    """--draws predicts each row again under parameter draws: with the layout asked, not the default."""
    argv = ["predict", "--scenario", SCENARIO, "--technique", "pipeshard", "--hosts", "all", "--json", *LAYOUT]
    _, plain, _ = run(argv)
    code, out, err = run(argv + ["--draws", "2"])
    assert code == 0, err
    (row,) = json.loads(out)["slices"][0]["predictions"]
    (asked,) = json.loads(plain)["slices"][0]["predictions"]
    assert row["total_time_s"] == asked["total_time_s"] and row["total_time_range_s"]["draws"] == 2
    # the same draws (seeded) of the layout asked, predicted here, give the same range
    from geosim.studies.uncertainty import parameter_draws, spread

    scenario = scale_scenario(SCENARIO)
    case = Case(scenario.cluster, GPT2M, scenario.workload(global_batch=32, microbatches=4), default_params())
    options = {"meshes": (("s0v0", "s0v1"), ("s0v2", "s0v3")), "intra_stage": "shard-data", "tensor": 2}
    times = [predict(case.with_(params=d), "pipeshard", options=options).total_time_s
             for d in parameter_draws(default_params(), 2)]
    assert row["total_time_range_s"]["median"] == pytest.approx(spread(times).median, rel=1e-12)


# --- the same flags in plan, select, sweep and calibrate import -----------------------------------------

def test_plan_ranks_the_layout_asked_on_each_set_of_hosts_it_fits():
    """t=2, p=2 on hosts of 4 GPUs: every Pipeshard option the planner simulates is that layout (two stages,
    tensor groups of 2, data over the rest), on 2 hosts (d=2) or 4 (d=4); none of another layout."""
    code, out, err = run(["plan", "--scenario", SCENARIO, "--technique", "pipeshard", "--tensor-parallel", "2",
                          "--pipeline-parallel", "2", "--global-batch", "32", "--all", "--json"])
    assert code == 0, err
    options = json.loads(out)["slices"][0]["options"]
    assert options and all(o["technique"] == "pipeshard" for o in options)
    for o in options:
        assert o["options"]["tensor"] == 2 and o["options"]["intra_stage"] == "shard-data"
        assert len(o["options"]["meshes"]) == 2 and len(o["hosts"]) in (2, 4)
    assert {len(o["hosts"]) for o in options} == {2, 4}
    # the option on all four hosts at the workload's microbatches is predict's row for the same flags
    _, row_out, _ = run(["predict", "--scenario", SCENARIO, "--technique", "pipeshard", "--hosts", "all", "--json",
                         *LAYOUT[:4], "--microbatches", "4", "--global-batch", "32"])
    (row,) = json.loads(row_out)["slices"][0]["predictions"]
    (same,) = [o for o in options if len(o["hosts"]) == 4 and o["microbatches"] == 4]
    assert same["total_time_s"] == pytest.approx(row["total_time_s"], rel=1e-9)


def test_select_ranks_the_layout_asked_and_algorithm1_probes_its_own():
    asked = ["--scenario", SCENARIO, "--technique", "pipeshard", "--pipeline-parallel", "4", "--virtual-stages", "2",
             "--global-batch", "32", "--json"]
    code, out, err = run(["select", *asked])
    # Algorithm 1 on four VMs (issue 46: its steps past two, docs/guide/select-plan.md); the verdict is plan's
    assert code == 0, err
    (doc,) = json.loads(out)["slices"]
    assert {"Td4", "Ts4"} <= set(doc["probes"]) and len(doc["probes"]["Tp"]["hosts"]) == 4
    code, plan_out, err = run(["plan", *asked])
    assert code == 0, err
    assert doc["verdict"] == json.loads(plan_out)["slices"][0]["verdict"]
    code, out, err = run(["select", "--scenario", "utah-gpn", "--technique", "pipeshard", "--pipeline-parallel", "2",
                          "--virtual-stages", "2", "--microbatches", "4", "--json"])
    assert code == 0, err
    (doc,) = json.loads(out)["slices"]
    assert "2 virtual stages each (interleaved)" in doc["verdict"]


@pytest.mark.parametrize("argv, flag, problem", [
    (["plan", "--scenario", SCENARIO, "--technique", "pipeshard", "--tensor-parallel", "2", "--pipeline-parallel", "2",
      "--data-parallel", "8"], "--data-parallel", "nor does it fit a smaller set of hosts the planner tries"),
    (["plan", "--scenario", "utah-gpn", "--technique", "pipeshard", "--pipeline-parallel", "2", "--records", "study"],
     "--pipeline-parallel", "--records ranks the measured runs"),
    (["plan", "--scenario", SCENARIO, "--technique", "pipeshard", "--tensor-parallel", "2", "--intra-stage", "data"],
     "--intra-stage", "give one or the other"),
    (["select", "--scenario", "utah-gpn", "--technique", "pipeshard", "--pipeline-parallel", "2", "--records", "study"],
     "--pipeline-parallel", "a layout applies to the predicted ranking"),
    # two sites: sweep's default axis is the WAN's RTT, which one site does not have
    (["sweep", "--scenario", "scale:2x2x4:H100", "--technique", "pipeshard", "--tensor-parallel", "3", "--sweep-dir", "{tmp}"],
     "--tensor-parallel", "3 must divide the 4 GPUs of a host"),
    (["sweep", "--scenario", SCENARIO, "--tensor-parallel", "2", "--sweep-dir", "{tmp}"], "--tensor-parallel",
     "take(s) no layout"),
    (["predict", "--scenario", SCENARIO, "--technique", "data", "--replica-per", "site"], "--replica-per",
     "data take(s) no layout (give --technique diloco,fsdp,hybrid,sparseloco with it)"),
    (["calibrate", "import", "study", "--records-out", "{tmp}/r.jsonl", "--tensor-parallel", "2"],
     "--tensor-parallel", "a layout is for alpa-log"),
])
def test_a_command_that_cannot_honour_a_layout_flag_says_so_in_one_line(argv, flag, problem, tmp_path):
    code, out, err = run([a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and f"{flag}: " in err and problem in err, err


def sweep_rows(tmp_path, other: str, global_batch: int, *flags: str) -> dict[str, dict]:
    """A sweep of pipeshard at tensor 2 x pipeline 2 over SCENARIO and `other`: its rows by scenario."""
    out = tmp_path / "sw"
    code, _, err = run(["sweep", "--scenario", f"{SCENARIO},{other}", "--technique", "pipeshard",
                        "--tensor-parallel", "2", "--pipeline-parallel", "2", "--rtt-ms", "native",
                        "--global-batch", str(global_batch), "--sweep-dir", str(out), "--workers", "1", "--quiet",
                        *flags])
    assert code == 0, err
    return {r["scenario"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def test_sweep_rows_are_the_layout_asked_and_say_why_where_it_does_not_fit(tmp_path):
    rows = sweep_rows(tmp_path, "scale:1x2x2:H100", 32, "--json")
    assert rows[SCENARIO]["description"] == ("2 stages (12/12 layers), 4 microbatches, 1f1b, intra-stage "
                                             "shard-data, tensor 2")
    assert rows[SCENARIO]["point"]["layout"] == {"pipeline": 2, "tensor": 2}
    # 2 hosts of 2 GPUs: t=2 is a host's GPUs, p=2 a stage per host: it fits, as shard inside each host
    small = rows["scale:1x2x2:H100"]
    assert small["status"] == "ok" and small["description"].startswith("2 stages")


def test_sweep_row_of_a_layout_that_does_not_fit_its_hosts_says_why(tmp_path):
    rows = sweep_rows(tmp_path, "scale:1x3x4:H100", 24, "--no-best")
    assert rows["scale:1x3x4:H100"]["status"] == "infeasible"
    assert "--data-parallel: a stage holds whole hosts" in rows["scale:1x3x4:H100"]["reason"] or \
        "--pipeline-parallel" in rows["scale:1x3x4:H100"]["reason"]


def test_calibrate_import_writes_the_layout_of_an_alpa_log_into_its_record(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("Step... 10 | Loss: 10.2, Learning Rate: 0.0001, Throughput: 1291.55 token/s, 0.41 TFLOP/s\n"
                   "Step... 20 | Loss: 8.9, Learning Rate: 0.0001, Throughput: 3775.08 token/s, 1.21 TFLOP/s\n"
                   "Step... 30 | Loss: 7.8, Learning Rate: 0.0001, Throughput: 3801.20 token/s, 1.22 TFLOP/s\n")
    runs = tmp_path / "runs.jsonl"
    code, _, err = run(["calibrate", "import", "alpa-log", str(log), "--scenario", "utah-gpn", "--technique",
                        "pipeshard", "--model", "gpt2m", "--global-batch", "8", "--microbatches", "4",
                        "--pipeline-parallel", "2", "--virtual-stages", "2", "--records-out", str(runs)])
    assert code == 0, err
    record = json.loads(runs.read_text().splitlines()[0])
    assert record["options"] == {"meshes": [["vm1"], ["vm2"]], "intra_stage": "data", "interleave": 2}
    # and the record predicts as that layout (calibrate check reads the options back)
    from geosim.calibrate.cases import read_runs, to_case

    (case,) = [to_case("r", r) for _, r in read_runs(str(runs))]
    assert case.options["interleave"] == 2 and tuple(map(tuple, case.options["meshes"])) == (("vm1",), ("vm2",))


def test_replica_per_site_is_a_replica_per_site_in_predict_and_plan():
    from geosim.techniques._lowcomm import by_site

    spec = "scale:2x2x4:H100"
    code, out, err = run(["predict", "--scenario", spec, "--technique", "diloco", "--hosts", "all",
                          "--replica-per", "site", "--global-batch", "32", "--json"])
    assert code == 0, err
    (row,) = json.loads(out)["slices"][0]["predictions"]
    scenario = scale_scenario(spec)
    case = Case(scenario.cluster, GPT2M, scenario.workload(global_batch=32), default_params())
    names = tuple(h.name for h in scenario.cluster.hosts)
    assert by_site(case, names) == [("s0v0", "s0v1"), ("s1v0", "s1v1")]
    assert row["total_time_s"] == predict(case, "diloco", options={"replicas": by_site(case, names)}).total_time_s
    code, out, err = run(["plan", "--scenario", spec, "--technique", "diloco", "--replica-per", "site",
                          "--global-batch", "32", "--all", "--json"])
    assert code == 0, err
    for o in json.loads(out)["slices"][0]["options"]:
        assert o["options"]["replicas"] == [list(g) for g in by_site(case, tuple(o["hosts"]))]


# --- the planner's own search: interleaving and tensor degrees below a host's GPUs --------------------------

@pytest.mark.slow  # ~12 s on 2 cores
def test_the_structured_search_tries_interleaved_schedules_and_smaller_tensor_groups():
    from dataclasses import replace

    from geosim.techniques import _pipeshard_plan as pipeshard

    scenario = scale_scenario("scale:2x2x8:H100")
    case = Case(scenario.cluster, GPT2M, scenario.workload(global_batch=64, microbatches=8), default_params())
    hosts = tuple(h.name for h in scenario.cluster.hosts)
    variants = list(pipeshard.plan_variants(case, hosts, exhaustive=False))
    interleaved = [(c, o) for c, o in variants if o.get("interleave")]
    assert {o["interleave"] for _, o in interleaved} == {2, 4}
    assert {o.get("tensor") for _, o in variants if o.get("intra_stage") == "shard-data"} >= {None, 2, 4}
    for changes, options in interleaved:
        S, v = len(options["meshes"]), options["interleave"]
        assert changes["microbatches"] % S == 0 and len(options["layer_split"]) == S * v
        assert sum(options["layer_split"]) == GPT2M.n_layer
    # the study's slices (the exhaustive search) keep Alpa's schedules: no interleaving
    study = list(pipeshard.plan_variants(case, hosts[:2], exhaustive=True))
    assert not any(o and o.get("interleave") for _, o in study)
    # an interleaved option's floor stays under its prediction (a floor the search prunes by)
    for changes, options in interleaved[::5]:
        w = replace(case.workload, **changes)
        floor = pipeshard.plan_floor_s(case, hosts, w, options)
        assert 0 < floor <= predict(case.with_(workload=w), "pipeshard", hosts=hosts, options=options).total_time_s
