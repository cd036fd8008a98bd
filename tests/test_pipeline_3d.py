"""Pipeshard's shard-data stages (Megatron's 3D layout: tensor parallel inside a host, data parallel
across a stage's hosts, pipeline across sites) against hand-derived formulas, and the planner's
offer of it."""

from __future__ import annotations

import pytest

from geosim.inputs.case import Case
from geosim.inputs.params import default_params
from geosim.predict import predict
from geosim.inputs.runtime import runtime_of
from geosim.inputs.scenario import gpu_catalog, model_catalog
from geosim.sim import collectives, memory_layout
from geosim.sim.schedule import Collective, Compute, Repeat
from geosim.inputs.specs import Cluster, Host, Link, Workload
from geosim.techniques import build_schedule, plan_floor_s, plan_variants

H100 = gpu_catalog()["H100"]
GPT2M = model_catalog()["gpt2m"]
PARAMS = default_params()


def sites(n_sites: int, hosts_per_site: int, gpus: int = 4) -> Cluster:
    """n_sites sites of hosts_per_site hosts with `gpus` H100 on NVLink, sites in a chain 20 ms apart."""
    hosts = tuple(Host(f"s{s}h{h}", f"S{s}", (H100,) * gpus, intra_host="nvlink")
                  for s in range(n_sites) for h in range(hosts_per_site))
    links = tuple(Link(f"S{s}", f"S{s + 1}", 20e-3, 10e9) for s in range(n_sites - 1))
    return Cluster("3d", hosts, links)


def per_site(cluster: Cluster) -> tuple:
    order = list(dict.fromkeys(h.site for h in cluster.hosts))
    return tuple(tuple(h.name for h in cluster.hosts if h.site == s) for s in order)


def flops(ops) -> float:
    """FLOPs a program computes (a Repeat block counted `count` times)."""
    total = 0.0
    for op in ops:
        if type(op) is Compute:
            total += op.flops
        elif type(op) is Repeat:
            total += op.count * flops(op.ops)
    return total


def collectives_of(ops, label: str) -> list[Collective]:
    found = []
    for op in ops:
        if type(op) is Collective and op.label == label:
            found.append(op)
        elif type(op) is Repeat:
            found += collectives_of(op.ops, label)
    return found


WORKLOAD = Workload(global_batch=32, microbatches=4, seq_len=1024, tokens_per_epoch=2 ** 22, epochs=1)


def test_shard_data_stage_against_hand_formulas():
    """Each GPU computes 1/tp of its host's 1/K share of every microbatch (forward + backward = 3x
    the forward), all-reduces its shard's gradients once with GPU i of the stage's other hosts
    (ring: 2(K-1)/K of the buffer sent per GPU), and holds the stage's matrices 1/tp and the
    activations of its host's share, as the memory model lays a tensor-parallel stage out."""
    cluster = sites(2, 2, gpus=4)
    K, tp = 2, 4  # hosts per stage, GPUs per host
    split = (10, 14)
    case = Case(cluster, GPT2M, WORKLOAD, PARAMS)
    schedule = build_schedule("pipeshard", case, {"meshes": per_site(cluster), "intra_stage": "shard-data",
                                                  "layer_split": split})
    m, M, s = GPT2M, WORKLOAD.microbatches, WORKLOAD.seq_len
    share = WORKLOAD.global_batch / M / K  # sequences of a microbatch each host computes
    tokens = share * s
    options = memory_layout.options_for(WORKLOAD, PARAMS, runtime_of(WORKLOAD, PARAMS))  # the alpa runtime: 0.2.3
    hosts = {d.rank: d.host for d in schedule.devices}
    for stage, layers in enumerate(split):
        first, last = stage == 0, stage == 1
        forward = layers * m.layer_forward_flops(tokens, s) + (m.head_forward_flops(tokens) if last else 0.0)
        stage_params = layers * m.params_per_layer + (m.embedding_params if first else 0) + (
            m.vocab * m.n_embd if last else 0)
        shard = stage_params - layers * 12 * m.n_embd ** 2 * (1 - 1 / tp)  # the matrices split over the host
        gradient_bytes = shard * WORKLOAD.bytes_per_value
        for d in schedule.devices:
            if not d.host.startswith(f"s{stage}"):
                continue
            program = schedule.programs[d.rank]
            assert flops(program) == pytest.approx(M * 3 * forward / tp, rel=1e-12)
            (grads,) = collectives_of(program, "stage gradient all-reduce")
            # GPU i of each host of the stage
            assert [(hosts[r], schedule.devices[r].local_index) for r in grads.group] == [
                (f"s{stage}h{h}", d.local_index) for h in range(K)]
            assert grads.nbytes == pytest.approx(gradient_bytes, rel=1e-12)
            sent = sum(op.nbytes for op in collectives.expand(grads, d.rank, tuple(hosts[r] for r in range(len(hosts))))
                       if hasattr(op, "dst"))
            assert sent == pytest.approx(2 * (K - 1) / K * gradient_bytes, rel=1e-12)
            # Shard's activation all-reduces stay inside the host
            layer_collectives = collectives_of(program, "fwd all-reduce") + collectives_of(program, "bwd all-reduce")
            assert layer_collectives and all({hosts[r] for r in c.group} == {d.host} and len(c.group) == tp
                                             for c in layer_collectives)
            parts = schedule.memory_parts[d.rank]
            # 16-bit weights: the shard (and the final layer norm, which the memory model places on the last stage)
            assert parts["weights"] == pytest.approx((shard + (2 * m.n_embd if last else 0)) * 2, rel=1e-12)
            expected = memory_layout.pipeline_stage(m, share, s, layers, first, last, 2, min(M, 2 - stage), options,
                                                    tensor_parallel=tp)
            assert parts == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("hosts_per_site", [1, 2])
def test_a_one_host_stage_is_intra_stage_shard(hosts_per_site):
    """shard-data on stages of one host is Shard inside each stage: the same prediction to the bit;
    on stages of two hosts it differs (the batch is split over the hosts)."""
    cluster = sites(2, hosts_per_site, gpus=2)
    case = Case(cluster, GPT2M, WORKLOAD, PARAMS)
    meshes = per_site(cluster)
    shard, shard_data = (predict(case, "pipeshard", options={"meshes": meshes, "intra_stage": kind,
                                                            "layer_split": (12, 12)})
                         for kind in ("shard", "shard-data"))
    assert shard.ok and shard_data.ok
    if hosts_per_site == 1:
        assert shard_data.total_time_s == shard.total_time_s
        assert shard_data.iteration_breakdown == shard.iteration_breakdown
        assert shard_data.memory == shard.memory
    else:
        assert shard_data.total_time_s != shard.total_time_s


def test_hosts_of_a_shard_data_stage_need_as_many_gpus():
    cluster = Cluster("uneven", (Host("a", "S0", (H100,) * 2), Host("b", "S0", (H100,) * 4),
                                 Host("c", "S1", (H100,) * 2)), (Link("S0", "S1", 20e-3, 10e9),))
    p = predict(Case(cluster, GPT2M, WORKLOAD, PARAMS), "pipeshard",
                options={"meshes": (("a", "b"), ("c",)), "intra_stage": "shard-data"})
    assert p.status == "infeasible" and "same number of GPUs" in p.reason


def test_the_structured_search_offers_shard_data_where_a_stage_spans_hosts():
    cluster = sites(2, 2, gpus=4)
    case = Case(cluster, GPT2M, WORKLOAD, PARAMS)
    everyone = tuple(h.name for h in cluster.hosts)
    structured = [o for _, o in plan_variants("pipeshard", case, everyone, exhaustive=False)]
    kinds = {o["intra_stage"] for o in structured}
    assert kinds == {"data", "shard-data"}
    assert all(all(len(mesh) > 1 for mesh in o["meshes"]) for o in structured if o["intra_stage"] == "shard-data")
    # named kinds are what is tried; two VMs (the study's exhaustive search) get no shard-data
    named = {o["intra_stage"] for _, o in plan_variants("pipeshard", case, everyone, intra_stages=("data",),
                                                        exhaustive=False)}
    assert named == {"data"}
    two = sites(2, 1, gpus=4)
    assert {o["intra_stage"] for _, o in plan_variants("pipeshard", Case(two, GPT2M, WORKLOAD, PARAMS),
                                                     tuple(h.name for h in two.hosts))} == {"data"}


# TCP's runs are ~5 s on 2 cores (slow: the whole suite runs them); the ideal network's check the same floors
@pytest.mark.parametrize("network", [pytest.param("tcp", marks=pytest.mark.slow), "ideal"])
def test_shard_data_floors_stay_under_predictions(network):
    cluster = sites(2, 2, gpus=4)
    case = Case(cluster, GPT2M, WORKLOAD, PARAMS, network=network)
    everyone = tuple(h.name for h in cluster.hosts)
    checked = 0
    variants = list(plan_variants("pipeshard", case, everyone, intra_stages=("shard-data",), exhaustive=False))
    for changes, options in variants[::3]:  # every layout and microbatch count, a third of the splits
        workload = WORKLOAD.__class__(**{**WORKLOAD.__dict__, **changes})
        p = predict(case.with_(workload=workload), "pipeshard", options=options)
        if p.ok:
            checked += 1
            assert plan_floor_s("pipeshard", case, everyone, workload, options) <= p.total_time_s
    assert checked >= 4
