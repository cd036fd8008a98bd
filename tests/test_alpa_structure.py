"""What Alpa and XLA do that the study's numbers depend on, and the cross-validation it buys.

- Alpa skips the gradient all-reduce on all but the last microbatch (its "grad sync"
  channels), but ZeRO-2's reduce-scatter feeds a sharded accumulator and so runs every
  microbatch: per iteration ZeRO-2 moves (m+1)/2 times Data's bytes.
- XLA's combiner packs gradient collectives into buffers of at most 30 MiB.
- ZeRO-2 all-gathers fp16 parameters (2 B each), cast from the sharded fp32 master copy.
- Leave-one-technique-out on Table II: the measured level is guarded (issue 12's target is not met yet).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from geosim.inputs.case import Case
from geosim.calibrate.cases import cases_from_records
from geosim.calibrate.free import SHARED, apply_params, default_free
from geosim.base.errors import GeosimError
from geosim.inputs.params import load_params
from geosim.predict import predict
from geosim.studies.reference import study_records
from geosim.inputs.scenario import get_model, load_scenario
from geosim.sim.schedule import Collective, Repeat
from geosim.techniques import build_schedule

MIB = 2**20


def collectives_in(ops, times: int = 1):
    """(op, nbytes, how many times per iteration) of every collective in a program."""
    out = []
    for op in ops:
        if isinstance(op, Repeat):
            out += collectives_in(op.ops, times * op.count)
        elif isinstance(op, Collective):
            out.append((op.op, op.nbytes, times))
    return out


@pytest.mark.parametrize("microbatches", [1, 2, 4, 8])
def test_zero2_moves_m_plus_one_halves_of_datas_bytes(microbatches):
    scenario = load_scenario("utah-gpn")
    workload = replace(scenario.workload(), microbatches=microbatches, global_batch=8 * microbatches, epochs=1)
    params = load_params().with_settings("zero2", gather_bytes_per_param=workload.bytes_per_value)  # gather = grad width
    model = get_model("gpt2m")
    sent = {t: predict(Case(scenario.cluster, model, workload, params), t).bytes_per_iteration for t in ("data", "zero2")}
    # per rank: ring all-reduce 2(p-1)/p·G; m reduce-scatters and one all-gather (p-1)/p·G each
    assert sent["zero2"] / sent["data"] == pytest.approx((microbatches + 1) / 2, rel=1e-6)


def test_zero2_reduce_scatters_inside_each_microbatch_and_gathers_once():
    scenario = load_scenario("utah-gpn")
    workload, model, params = scenario.workload(), get_model("gpt2m"), load_params()
    program = build_schedule("zero2", Case(scenario.cluster, model, workload, params)).programs[0]
    microbatches = program[0]
    assert isinstance(microbatches, Repeat) and microbatches.count == workload.microbatches
    grads = model.num_params * workload.bytes_per_value
    buffers = math.ceil(grads / params.combine_bytes)
    inside = collectives_in(microbatches.ops)
    assert {op for op, _, _ in inside} == {"reduce_scatter"}
    assert sum(n * k for _, n, k in inside) == pytest.approx(grads)  # all gradients, every microbatch
    after = collectives_in(program[1:])
    assert [(op, k) for op, _, k in after] == [("all_gather", buffers)]


def test_data_all_reduces_once_per_iteration_in_xla_combiner_buffers():
    scenario = load_scenario("utah-gpn")
    workload, model = scenario.workload(), get_model("gpt2m")
    params = load_params()
    assert params.combine_bytes == 30 * MIB  # XLA's kDefaultAllReduceCombineThreshold
    grads = model.num_params * workload.bytes_per_value
    for combine, buffers in ((30 * MIB, math.ceil(grads / (30 * MIB))), (grads, 1), (4 * grads, 1)):
        program = build_schedule("data", Case(scenario.cluster, model, workload, replace(params, combine_bytes=combine))).programs[0]
        (collective,) = collectives_in(program)
        assert collective[0] == "allreduce" and collective[2] == buffers
        assert collective[1] * buffers == pytest.approx(grads)


def test_an_older_params_file_with_zero2_bucket_mib_still_loads(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text("[zero2]\nbucket_mib = 8.0\n")
    assert load_params(path).combine_bytes == 8 * MIB
    path.write_text("[xla]\ncombine_mib = -1\n")
    with pytest.raises(GeosimError, match="xla.combine_mib"):
        load_params(path)


def test_a_shared_overhead_is_one_parameter_for_every_technique():
    cases = cases_from_records(study_records(), "s")
    base = load_params()
    free = default_free(cases, base, overhead="shared")
    overheads = [p for p in free if p.kind == "iteration_overhead"]
    assert [p.target for p in overheads] == [SHARED] and all(overheads[0].affects(c) for c in cases)
    params = apply_params(base, overheads, [2.5])
    assert set(params.iteration_overhead_s) == set(base.iteration_overhead_s)
    assert set(params.iteration_overhead_s.values()) == {2.5}
    assert not [p for p in default_free(cases, base, overhead="none") if p.kind == "iteration_overhead"]
    assert {p.target for p in default_free(cases, base) if p.kind == "iteration_overhead"} == {
        "data", "zero2", "shard", "pipeshard"}
    with pytest.raises(GeosimError, match="overhead"):
        default_free(cases, base, overhead="each")


def _crossval(kinds):
    from geosim.calibrate.cli import CROSSVAL_ALSO, CROSSVAL_OVERHEAD, CROSSVAL_STEP_RTTS
    from geosim.calibrate.crossval import crossval

    cases = cases_from_records(study_records(), "fabric-slm-2026")
    options = {"step_rtts": CROSSVAL_STEP_RTTS, "extra": tuple(k for k in CROSSVAL_ALSO.split(",") if k),
               "overhead": CROSSVAL_OVERHEAD}
    return crossval(cases, kinds=kinds, free_options=options)


@pytest.mark.slow
def test_single_vm_runs_predicted_from_table_ii_alone():
    """Compute that stands on the datasheet: fitted on Table II alone (paced by the WAN), the study's four
    single-VM gpt2m runs are predicted within 25% each (docs/results/2026-11-23-crossval.md)."""
    report = _crossval(("single-vm",))["single-vm"]
    assert len(report.cells) == 4
    assert all(abs(c.error) <= 0.25 for c in report.cells), [(c.slice, c.technique, round(c.error, 3))
                                                               for c in report.cells]


@pytest.mark.slow
def test_leave_one_technique_out_on_table_ii_does_not_regress():
    """The issue's target (median <= 10%, worst <= 40%, order 5/5) is NOT met with compute on the datasheet:
    measured 16.8-17.7% median, order right on 4 of 5 slices (docs/results/2026-11-24-crossval.md).
    This guards the measured level, not the target; and Shard on TACC-TACC's LAN, which a fold without
    Shard predicted +116% before the per-message overhead had its prior."""
    report = _crossval(("loto",))["loto"]
    assert len(report.cells) == 20
    assert report.median_abs_error <= 0.20, [(c.slice, c.technique, round(c.error, 3))
                                                          for c in report.cells]
    assert sum(report.order_right().values()) >= 4, report.order_right()
    (tacc_shard,) = [c for c in report.cells if (c.slice, c.technique) == ("TACC-TACC", "shard")]
    assert abs(tacc_shard.error) <= 0.40, tacc_shard


def test_zero2_gathers_fp16_parameters_by_default():
    """Alpa's TrainState with a master copy casts the updated fp32 master to fp16 before it becomes the
    replicated parameters, so the all-gather moves 2 bytes per parameter, as Data's fp16 gradients do."""
    scenario = load_scenario("utah-mass")
    case = Case(scenario.cluster, get_model("gpt2m"), scenario.workload(), load_params())
    program = build_schedule("zero2", case).programs[0]
    gathered = sum(n * k for op, n, k in collectives_in(program) if op == "all_gather")
    assert load_params().settings("zero2").gather_bytes_per_param == 2.0
    assert gathered == pytest.approx(case.model.num_params * 2)
