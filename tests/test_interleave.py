"""Pipeshard layouts a user can ask for (issue 34): a tensor degree below a host's GPU count with data
parallelism over the rest, and the interleaved 1F1B schedule (virtual stages), against hand formulas
on small cases."""

from __future__ import annotations

import pytest

from geosim.inputs.case import Case
from geosim.base.errors import GeosimError
from geosim.inputs.params import default_params
from geosim.predict import predict
from geosim.inputs.runtime import runtime_of
from geosim.inputs.scenario import gpu_catalog, model_catalog
from geosim.sim import memory_layout
from geosim.sim.schedule import Collective, Compute, Recv, Repeat, Send
from geosim.inputs.specs import Cluster, Host, Link, Model, Workload
from geosim.techniques import build_schedule

H100 = gpu_catalog()["H100"]
from test_pipeline_3d import flops  # noqa: E402 (a program's FLOPs, Repeat blocks counted)

GPT2M = model_catalog()["gpt2m"]
PARAMS = default_params()


def flat(ops) -> list:
    out = []
    for op in ops:
        out += flat(op.ops) * op.count if type(op) is Repeat else [op]
    return out


def chain(n_hosts: int, gpus: int) -> Cluster:
    hosts = tuple(Host(f"h{i}", "A", (H100,) * gpus, intra_host="nvlink") for i in range(n_hosts))
    return Cluster("chain", hosts, tuple(Link("h0", h.name, 1e-4, 100e9) for h in hosts[1:]))


def test_a_tensor_degree_below_the_host_s_gpus_against_hand_formulas():
    """2 hosts of 8 GPUs, a stage per host, tensor 2: each stage has 4 tensor groups of 2 GPUs of one
    host, each group computes 1/4 of a microbatch and each GPU half of that group's layer FLOPs; a
    GPU's gradient shard is all-reduced with the same position in the stage's 3 other groups; Shard's
    activation all-reduces stay inside the group; memory is a tensor-parallel-2 stage's."""
    workload = Workload(global_batch=32, microbatches=4, seq_len=1024, tokens_per_epoch=2 ** 22, epochs=1)
    case = Case(chain(2, 8), GPT2M, workload, PARAMS)
    t, groups, split = 2, 4, (12, 12)
    schedule = build_schedule("pipeshard", case, {"meshes": (("h0",), ("h1",)), "intra_stage": "shard-data",
                                                  "tensor": t, "layer_split": split})
    m, M, s = GPT2M, workload.microbatches, workload.seq_len
    share = workload.global_batch / M / groups
    tokens = share * s
    options = memory_layout.options_for(workload, PARAMS, runtime_of(workload, PARAMS))  # the alpa runtime: 0.2.3
    for d in schedule.devices:
        stage = int(d.host[1])
        first, last, layers = stage == 0, stage == 1, split[stage]
        forward = layers * m.layer_forward_flops(tokens, s) + (m.head_forward_flops(tokens) if last else 0.0)
        program = schedule.programs[d.rank]
        assert flops(program) == pytest.approx(M * 3 * forward / t, rel=1e-12)
        (grads,) = [op for op in program if type(op) is Collective and op.label == "stage gradient all-reduce"]
        assert len(grads.group) == groups
        assert [schedule.devices[r].local_index % t for r in grads.group] == [d.local_index % t] * groups
        stage_params = layers * m.params_per_layer + (m.embedding_params if first else 0) + (
            m.vocab * m.n_embd if last else 0)
        held = stage_params - layers * 12 * m.n_embd ** 2 * (1 - 1 / t)
        assert grads.nbytes == pytest.approx(held * workload.bytes_per_value, rel=1e-12)
        layer_collectives = [op for op in flat(program) if type(op) is Collective and "all-reduce" in op.label
                             and op.label != "stage gradient all-reduce"]
        own = d.local_index // t
        assert layer_collectives and all(
            len(c.group) == t and {schedule.devices[r].local_index // t for r in c.group} == {own}
            and {schedule.devices[r].host for r in c.group} == {d.host} for c in layer_collectives)
        expected = memory_layout.pipeline_stage(m, share, s, layers, first, last, 2, min(M, 2 - stage), options,
                                                tensor_parallel=t)
        assert schedule.memory_parts[d.rank] == pytest.approx(expected, rel=1e-12)
    assert predict(case, "pipeshard", options={"meshes": (("h0",), ("h1",)), "intra_stage": "shard-data",
                                               "tensor": t}).ok


def test_the_tensor_degree_is_the_host_s_gpus_by_default_to_the_bit():
    workload = Workload(global_batch=32, microbatches=4, seq_len=1024, tokens_per_epoch=2 ** 22, epochs=1)
    case = Case(chain(4, 4), GPT2M, workload, PARAMS)
    meshes = (("h0", "h1"), ("h2", "h3"))
    default, named = (predict(case, "pipeshard", options={"meshes": meshes, "intra_stage": "shard-data", **extra})
                      for extra in ({}, {"tensor": 4}))
    assert default.ok and default.total_time_s == named.total_time_s


def test_a_tensor_degree_that_does_not_divide_a_host_is_one_line():
    workload = Workload(global_batch=32, microbatches=4, seq_len=1024, tokens_per_epoch=2 ** 22, epochs=1)
    case = Case(chain(2, 8), GPT2M, workload, PARAMS)
    p = predict(case, "pipeshard", options={"meshes": (("h0",), ("h1",)), "intra_stage": "shard-data", "tensor": 3})
    assert p.status == "infeasible" and "must divide the 8 GPUs of a host" in p.reason


# -- interleaving ---------------------------------------------------------------------------------------

# a deep, narrow model with a tiny vocabulary: the head and embedding weigh almost nothing, so the
# stages are alike and the hand formula holds without the ends' extra work
EVEN = Model("even", n_layer=16, n_embd=1024, n_head=16, vocab=64, n_ctx=1024)


def interleaved_case(stages: int, microbatches: int) -> Case:
    hosts = tuple(Host(f"h{i}", "A", (H100,)) for i in range(stages))
    cluster = Cluster("line", hosts, tuple(Link("h0", h.name, 1e-4, 100e9) for h in hosts[1:]))
    workload = Workload(tokens_per_epoch=microbatches * 1024 * 10, seq_len=1024, global_batch=microbatches,
                        microbatches=microbatches, epochs=1)
    return Case(cluster, EVEN, workload, PARAMS, network="ideal")


@pytest.mark.parametrize("v", [1, 2, 4])
def test_the_interleaved_bubble_is_v_times_smaller(v):
    """On an ideal network, an iteration is the busiest GPU's compute plus a bubble of (S - 1) / v
    microbatches' forward and backward: (M + (S - 1) / v) x (t_f + t_b)."""
    S, M = 4, 8
    p, plain = (predict(interleaved_case(S, M), "pipeshard", options={"interleave": k}) for k in (v, 1))
    assert p.ok, p.reason
    b = p.iteration_breakdown
    # t_f + t_b of one microbatch on one stage (and its accumulation; the compute also holds the
    # optimizer's step once, a few % of it: hence the looser bound on the absolute figure)
    per_microbatch = b.compute_s / M
    assert b.bubble_s == pytest.approx((S - 1) / v * per_microbatch, rel=0.05)
    # within 4%: v chunks are v times the ops, each with its launch gap (2.7% at v = 4)
    assert b.bubble_s == pytest.approx(plain.iteration_breakdown.bubble_s / v, rel=0.04)
    assert b.exposed_comm_s == pytest.approx(0.0, abs=1e-9 * b.total_s)


def test_an_interleaved_program_runs_every_microbatch_through_every_chunk():
    S, M, v = 4, 8, 2
    case = interleaved_case(S, M)
    schedule = build_schedule("pipeshard", case, {"interleave": v})
    for rank, program in schedule.programs.items():
        labels = [op.label for op in program if type(op) is Compute]
        assert sorted(x for x in labels if x.startswith("F")) == sorted(f"F{m}.{c}" for m in range(M) for c in range(v))
        assert sorted(x for x in labels if x.startswith("B")) == sorted(f"B{m}.{c}" for m in range(M) for c in range(v))
        sends = [op for op in program if type(op) is Send]
        recvs = [op for op in program if type(op) is Recv]
        # v crossings each way per microbatch, but the first virtual stage receives no activation and the
        # last sends none
        ends = (rank == 0) + (rank == S - 1)
        assert len(sends) == len(recvs) == 2 * M * v - M * ends
    # the layers of the 8 virtual stages, round robin: stage s holds virtual stages s and s + 4
    assert "16 layers" not in schedule.description and "2 virtual stages each" in schedule.description
    assert schedule.memory_parts[0] != build_schedule("pipeshard", case, {}).memory_parts[0]


@pytest.mark.parametrize("options, microbatches, problem", [
    ({"interleave": 2, "layer_split": (4, 4, 4, 4)}, 8, "must give each of 8 virtual stages"),
    ({"interleave": 2}, 6, "a multiple of 4"),
    ({"interleave": 8}, 8, "16 layers cannot fill 32 virtual stages"),
    ({"interleave": 0}, 8, "must be a whole number >= 1"),
])
def test_interleaving_s_conditions_are_one_line_each(options, microbatches, problem):
    p = predict(interleaved_case(4, microbatches), "pipeshard", options=options)
    assert p.status == "infeasible" and problem in p.reason, p.reason


def test_interleaving_needs_1f1b():
    case = interleaved_case(4, 8)
    params = case.params.with_settings("pipeshard", schedule="gpipe")
    p = predict(case.with_(params=params), "pipeshard", options={"interleave": 2})
    assert p.status == "infeasible" and "needs the 1f1b schedule" in p.reason


def test_the_planner_offers_tensor_degrees_below_a_host_s_gpus_under_their_floors():
    """On a large cluster the structured search tries shard-data with t = 2 on 4-GPU hosts too, and
    the floor it prunes by stays under each such option's prediction."""
    from geosim.inputs.scale import scale_scenario
    from geosim.studies.plan import candidates, floor_s

    scenario = scale_scenario("scale:2x2x4:H100")
    workload = scenario.workload(global_batch=64, microbatches=4)
    case = Case(scenario.cluster, GPT2M, workload, PARAMS)
    offered = [(hosts, changes, options) for technique, hosts, changes, options
               in candidates(case, techniques=("pipeshard",), exhaustive=False, choices={"intra_stages": ("shard-data",)})
               if options and options.get("tensor")]
    assert {options["tensor"] for _, _, options in offered} == {2}
    for hosts, changes, options in offered[:3]:
        from dataclasses import replace

        predicted = predict(case.with_(workload=replace(workload, **changes)), "pipeshard", hosts=hosts, options=options)
        assert predicted.ok
        assert floor_s(case, "pipeshard", hosts, changes, options) <= predicted.total_time_s
