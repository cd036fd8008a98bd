"""Shard's collectives under the `jax` runtime are the compiled program's (issue 24): the simulator
issues as many collectives, of the sizes, as XLA:CPU compiles into live's real step."""

from __future__ import annotations

from collections import Counter

import pytest

from geosim.live.train.compiled_collectives import collectives, layer_tables
from geosim.inputs.runtime import shipped_runtimes

HLO = """
  %all-reduce.1 = (f32[8,32]{1,0}, f32[8,32]{1,0}) all-reduce(f32[8,32]{1,0} %a, f32[8,32]{1,0} %b), to_apply=%add
  %all-gather.2 = f32[256]{0} all-gather(f32[128]{0} %c), dimensions={0}
  %collective-permute.3 = f32[8,32,256]{2,1,0} collective-permute(f32[8,32,256]{2,1,0} %d), source_target_pairs={{0,1},{1,0}}
  %all-to-all.4 = (f32[1,4,32,128]{3,2,1,0}, f32[1,4,32,128]{3,2,1,0}) all-to-all(%e, %f), dimensions={0}
  %fusion.5 = f32[256]{0} fusion(%all-gather.2), kind=kLoop, calls=%fused
"""


def test_every_tensor_of_a_compiled_collective_is_one_collective_in_the_simulators_terms():
    found = collectives(HLO, devices=2)
    # gloo makes one call per tensor: the tuple all-reduce is two; a fusion reading a gather is none
    assert [(op, sim) for op, sim, _ in found] == [("all-reduce", "allreduce")] * 2 + [
        ("all-gather", "all_gather"), ("collective-permute", "all_gather")] + [("all-to-all", "all_gather")] * 2
    sizes = [b for _, _, b in found]
    assert sizes[:3] == [8 * 32 * 4, 8 * 32 * 4, 256 * 4]
    # a permute on 2 ranks moves its whole buffer: what an all-gather of twice it moves
    assert sizes[3] == 2 * 8 * 32 * 256 * 4
    assert sizes[4] == 4 * 32 * 128 * 4


def simulated_collectives(schedule) -> Counter:
    """(op, bytes) of every collective rank 0's program runs in one step, repeats expanded."""
    from geosim.sim.schedule import Collective, Repeat

    counts: Counter = Counter()

    def walk(ops, times):
        for op in ops:
            if isinstance(op, Repeat):
                walk(op.ops, times * op.count)
            elif isinstance(op, Collective):
                counts[(op.op, round(op.nbytes))] += times
            elif isinstance(op, (tuple, list)):
                walk(op, times)

    walk(schedule.programs[schedule.devices[0].rank], 1)
    return counts


def small_wan_case(runtime: str):
    """Live's Shard run of small-wan over the emulated WAN, as its record describes it (2 hosts, one CPU
    device each, batch 8 x 32, the byte vocabulary), under `runtime`."""
    from dataclasses import replace
    from pathlib import Path

    from geosim.calibrate.cases import cases_from_records
    from geosim.inputs.case import Case
    from geosim.inputs.params import load_params
    from geosim.inputs.records import read_records

    data = Path(__file__).resolve().parents[1] / "docs" / "results" / "data" / "2026-11-25-validate-runs.jsonl"
    record = next(r for r in read_records(data) if r.technique == "shard")
    case = cases_from_records([record], "t")[0]
    return Case(case.cluster, case.model, replace(case.workload, runtime=runtime), load_params(None))


@pytest.mark.slow
def test_the_simulators_jax_shard_issues_the_collectives_xla_compiles():
    """Two compiles of live's Shard step on 2 CPU devices (1 and 2 layers) give one layer's collectives and
    the step's own; the shipped jax runtime holds them, and the simulator's Shard step for the same
    model issues exactly the compiled program's collectives, of its sizes."""
    from geosim.techniques import shard

    tables = layer_tables("shard", "small-wan", vocab=257, devices=2, global_batch=8)
    jax_runtime = shipped_runtimes()["jax"]
    as_shipped = lambda rows: [(r["op"], r["count"], pytest.approx(r["activations"], abs=1e-6))  # noqa: E731
                               for r in rows]
    assert list(jax_runtime.shard_layer_collectives) == as_shipped(tables["layer"])
    assert list(jax_runtime.shard_step_collectives) == as_shipped(tables["step"])

    case = small_wan_case("jax")
    simulated = simulated_collectives(shard.build(case, shard.Settings()))
    assert sum(simulated.values()) == tables["total_two_layers"] == 99
    activation = 8 * 32 * 256 * 4
    compiled = Counter()
    for rows, times in ((tables["layer"], 2), (tables["step"], 1)):
        for r in rows:
            compiled[(r["op"], round(activation * r["activations"]))] += r["count"] * times
    assert simulated == compiled
    # the study's runtime keeps Megatron's 4 all-reduces a layer (its golden answers are unchanged)
    alpa = simulated_collectives(shard.build(small_wan_case("alpa"), shard.Settings()))
    assert sum(alpa.values()) == 4 * 2 and set(op for op, _ in alpa) == {"allreduce"}


@pytest.mark.slow
def test_live_zero2_gathers_its_fp32_parameters_as_validate_prices_them():
    """live's ZeRO-2 step (fp32) compiles to a reduce-scatter of the gradient and an all-gather of every
    parameter in fp32: 4 bytes a parameter, what `live validate` sets (the study's Alpa gathered 2)."""
    from geosim.live.experiments.validate import live_settings
    from geosim.live.train.compiled_collectives import run_cases
    from geosim.inputs.params import load_params

    case = {"technique": "zero2", "model": "small-wan", "precision": "fp32", "global_batch": 8, "microbatches": 1,
            "dims": {"n_layer": 2, "n_embd": 256, "n_head": 4, "vocab": 257, "n_ctx": 32}}
    found = run_cases(2, [case])[0]["collectives"]
    gathers = [b for op, _, b in found if op == "all-gather"]
    params = small_wan_case("jax").model.num_params
    assert gathers == [params * 4]
    assert [(op, b) for op, _, b in found if b > 1024] == [("reduce-scatter", params * 4), ("all-gather", params * 4)]

    class Run:
        workload = {"runtime": "jax", "precision": "fp32"}

    assert live_settings(load_params(None), [Run()]).settings("zero2").gather_bytes_per_param == 4.0


@pytest.mark.slow
def test_the_jax_runtimes_fixed_costs_are_measured_by_two_gloo_processes_on_loopback():
    """live/train/collective_costs.py: the figures runtimes.toml's iteration_s and collective_launch_s come
    from. Only what holds on any load: a step with 32 collectives costs more than an empty one."""
    import math

    from geosim.live.train.collective_costs import measure

    costs = measure(repeat=3, timeout_s=300)
    assert all(math.isfinite(v) and v >= 0 for v in costs.values())
    assert costs["step_32_small_s"] > costs["step_s"] and costs["collective_launch_gross_s"] > 0
    # net of what the TCP model already charges: on a quiet machine the model charges more than the
    # measured gross (0.34 against 0.22-0.29 ms), so the net is 0 there, never below
    assert costs["collective_launch_s"] == max(0.0, costs["collective_launch_gross_s"] - costs["transport_share_s"])
    assert {f"allreduce_{size}_s" for size in (1024, 262_144, 1_048_576, 6_616_064)} <= set(costs)
    assert costs["cores"] >= 1


LOOP_HLO = """
%body.1 (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %permute.1 = f32[8]{0} collective-permute(f32[8]{0} %x), source_target_pairs={{0,1}}
  %all-reduce.2 = f32[8]{0} all-reduce(f32[8]{0} %y), to_apply=%add
}

%cond.1 (p: (s32[], f32[8])) -> pred[] {
  %lt = pred[] compare(s32[] %i, s32[] %n), direction=LT
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %while.1 = (s32[], f32[8]{0}) while(%init), condition=%cond.1, body=%body.1, backend_config={"known_trip_count":{"n":"3"}}
  %all-reduce.3 = (f32[256]{0}, f32[]) all-reduce(%g, %l), to_apply=%add
}
"""


def test_a_collective_in_a_loop_runs_once_per_trip():
    from geosim.live.train.compiled_collectives import executed_collectives

    found = sorted(executed_collectives(LOOP_HLO, devices=2))
    assert found == sorted([("collective-permute", "all_gather", 64, 3), ("all-reduce", "allreduce", 32, 3),
                            ("all-reduce", "allreduce", 1024, 1), ("all-reduce", "allreduce", 4, 1)])


def small_wan_pipeshard_case(runtime: str, microbatches: int = 1):
    from dataclasses import replace
    from pathlib import Path

    from geosim.calibrate.cases import cases_from_records
    from geosim.inputs.case import Case
    from geosim.inputs.params import load_params
    from geosim.inputs.records import read_records

    data = Path(__file__).resolve().parents[1] / "docs" / "results" / "data" / "2026-11-25-validate-runs-2.jsonl"
    record = next(r for r in read_records(data) if r.technique == "pipeshard")
    case = cases_from_records([record], "t")[0]
    return Case(case.cluster, case.model, replace(case.workload, runtime=runtime, microbatches=microbatches),
                load_params(None))


def test_the_simulators_jax_pipeshard_issues_the_compiled_steps_other_collectives():
    """Besides its M sends each way, the jax runtime's pipeline step exchanges on each bubble tick too (M + S - 1
    sends each way), all-reduces the embedding's cotangent once a tick and, once a step, the shared
    parameters' gradients and the loss; alpa's does none of it (its golden answers are unchanged)."""
    from geosim.sim.schedule import Recv, Send
    from geosim.techniques import pipeshard

    jax_runtime = shipped_runtimes()["jax"]
    activation = 8 * 32 * 256 * 4
    for microbatches in (1, 2, 4):
        case = small_wan_pipeshard_case("jax", microbatches)
        schedule = pipeshard.build(case, pipeshard.Settings())
        simulated = simulated_collectives(schedule)
        first = schedule.programs[schedule.devices[0].rank]  # stage 0: sends activations, receives their gradients
        assert sum(isinstance(op, Send) for op in first) == sum(isinstance(op, Recv) for op in first) == microbatches + 1
        per = activation / microbatches
        expected = Counter()
        for rows, times in ((jax_runtime.pipeshard_tick_collectives, microbatches + 1),
                            (jax_runtime.pipeshard_step_collectives, 1)):
            for op, count, activations in rows:
                expected[(op, round(per * activations))] += count * times
        assert simulated == expected
    alpa = pipeshard.build(small_wan_pipeshard_case("alpa"), pipeshard.Settings())
    assert not simulated_collectives(alpa)
    assert sum(isinstance(op, Send) for op in alpa.programs[alpa.devices[0].rank]) == 1


@pytest.mark.slow
def test_the_jax_runtimes_pipeline_collectives_are_the_compiled_programs():
    """live's Pipeshard step compiled on 2 CPU devices (2 stages, 1 microbatch), loop trip counts applied,
    holds what runtimes.toml ships; with 2 microbatches the per-tick all-reduce runs once more."""
    from geosim.live.train.compiled_collectives import pipeline_tables

    as_shipped = lambda rows: [(r["op"], r["count"], pytest.approx(r["activations"], abs=1e-6))  # noqa: E731
                               for r in rows]
    tables = pipeline_tables("pipeshard", "small-wan")
    jax_runtime = shipped_runtimes()["jax"]
    assert list(jax_runtime.pipeshard_tick_collectives) == as_shipped(tables["tick"])
    assert list(jax_runtime.pipeshard_step_collectives) == as_shipped(tables["step"])
    # one bubble tick (S - 1): one more exchange each way than the schedule's microbatch
    assert tables["extra_sends"] == 2 and jax_runtime.pipeshard_sends_every_tick
    two = pipeline_tables("pipeshard", "small-wan", microbatches=2)
    # the same per-tick collective (one microbatch's activation); per step the same but for the loss's
    # size in the smaller microbatch's activations
    assert [(r["op"], r["count"], r["activations"]) for r in two["tick"]] == \
        [(r["op"], r["count"], r["activations"]) for r in tables["tick"]]
    assert [r["count"] for r in two["step"]] == [r["count"] for r in tables["step"]]
    assert two["extra_sends"] == 2


def test_the_jax_launch_cost_is_the_measured_collective_net_of_what_the_tcp_model_charges_it():
    """collective_costs measured 0.26 ms per small psum on loopback (load 1.3); the TCP model already
    charges that same collective two ring steps of its per-message cost, credit round trips and one-way
    delay (hand-derived below), which is more: the runtime's own launch cost is what is left, nothing."""
    from geosim.live.train.collective_costs import LOOPBACK_RTT_S, transport_share_s
    from geosim.inputs.params import load_params

    params = load_params(None)
    tcp = shipped_runtimes()["jax"].applied_to(params).network("tcp")
    rtt = LOOPBACK_RTT_S + 2 * params.intra_host_latency_s  # the route's: each host's latency both ways
    step = tcp.per_message_overhead_s + tcp.collective_step_rtts * rtt + rtt / 2
    share = transport_share_s()
    assert share == pytest.approx(2 * step, rel=0.02)
    measured_gross_s = 0.26e-3
    assert shipped_runtimes()["jax"].collective_launch_s == max(0.0, measured_gross_s - share) == 0.0
