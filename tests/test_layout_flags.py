"""A layout asked on the command line (issue 34): --tensor-parallel, --pipeline-parallel,
--data-parallel, --virtual-stages, --layer-split with --microbatches reproduce the layout they name,
against hand formulas on a small case; every mistake is one line naming its flag."""

from __future__ import annotations

import json

import pytest

from geosim.case import Case
from geosim.params import default_params
from geosim.predict import predict
from geosim.scale import scale_scenario
from geosim.scenario import model_catalog
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
