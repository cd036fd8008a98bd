"""Collectives timed by arithmetic (geosim/sim/network/_exclusive.py) against every step run as
events: on random clusters, symmetric and not, with ranks arriving apart, connections going
idle and windows growing, the same times to the last bit, the same bytes and transfers."""

from __future__ import annotations

import functools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geosim.inputs.case import Case
from geosim.inputs.params import default_params
from geosim.inputs.scenario import get_model, gpu_catalog, load_scenario
from geosim.sim.engine import run_schedule
from geosim.sim.network.tcp import TCPNetwork
from geosim.sim.schedule import Collective, Compute, Recv, Repeat, Schedule, Send
from geosim.inputs.specs import Cluster, Host, Link, Workload
from geosim.techniques import build_schedule
from geosim.techniques._base import devices_of

CATALOG = gpu_catalog()
GPUS = [CATALOG[name] for name in ("RTX6000", "T4", "A30")]
_EXAMPLES = int(os.environ.get("GEOSIM_HYPOTHESIS_EXAMPLES", "0"))
PROPERTY = settings(max_examples=_EXAMPLES or 60, deadline=None, derandomize=not _EXAMPLES,
                    suppress_health_check=[HealthCheck.too_slow])
EVENTS_ONLY = functools.partial(TCPNetwork, precompute=False)


@st.composite
def clusters(draw, symmetric: bool) -> Cluster:
    hosts = draw(st.integers(1, 4))
    if symmetric:
        gpu, gpus = draw(st.sampled_from(GPUS)), draw(st.integers(1, 3))
        made = tuple(Host(f"h{i}", f"s{i}", (gpu,) * gpus, "pcie", "per-gpu") for i in range(hosts))
    else:
        made = tuple(Host(f"h{i}", f"s{draw(st.integers(0, 2))}",
                          tuple(draw(st.sampled_from(GPUS)) for _ in range(draw(st.integers(1, 3)))),
                          draw(st.sampled_from(["pcie", "nvlink"])), draw(st.sampled_from(["shared", "per-gpu"])))
                     for i in range(hosts))
    sites = sorted({h.site for h in made})
    links = tuple(Link(a, b, draw(st.sampled_from([2e-3, 20.2e-3, 90e-3])), draw(st.sampled_from([1e9, 10e9])))
                  for i, a in enumerate(sites) for b in sites[i + 1:])
    return Cluster("symmetric" if symmetric else "asymmetric", made, links)


BLOCK = st.fixed_dictionaries(dict(
    op=st.sampled_from(["allreduce", "reduce_scatter", "all_gather"]),
    algorithm=st.sampled_from(["ring", "hierarchical", "tree"]),
    nbytes=st.sampled_from([1e3, 3e6, 2.5e8]),
    # seconds of compute before the collective: past the idle restart (RTT + 200 ms) or not
    gap=st.sampled_from([0.0, 1e-3, 0.05, 0.6]),
    repeat=st.sampled_from([1, 3, 8]),  # 8: the engine's Repeat shortcut skips some
    p2p=st.booleans(),  # a point-to-point message from the first rank to the last as well
    halves=st.booleans(),  # two collectives at once, each over half the ranks, under their own tags
))


def program_of(cluster: Cluster, blocks: list[dict], skew: list[float]) -> Schedule:
    """Each block: compute (`gap` x the rank's skew: mixed GPUs arrive apart), then a collective of
    every rank (or of its half of the ranks), in a Repeat block when `repeat` > 1."""
    devices = devices_of(cluster)
    group = tuple(d.rank for d in devices)
    programs = {}
    for rank in group:
        ops = []
        for b, block in enumerate(blocks):
            body = [Compute(0.0, "work", kind="overhead", seconds=block["gap"] * skew[rank % len(skew)])]
            if block["p2p"] and len(group) > 1 and rank in (group[0], group[-1]):
                body.append(Send(group[-1], block["nbytes"], ("p2p", b)) if rank == group[0]
                            else Recv(group[0], ("p2p", b)))
            members, tag = group, ("c", b)
            if block["halves"] and len(group) > 1:
                half = int(rank >= len(group) // 2)
                members, tag = group[:len(group) // 2] if not half else group[len(group) // 2:], ("c", b, half)
            body.append(Collective(block["op"], members, block["nbytes"], block["algorithm"], tag))
            ops.extend([Repeat(tuple(body), block["repeat"], group, ("block", b))] if block["repeat"] > 1 else body)
        programs[rank] = ops
    return Schedule("random", devices, programs, dict.fromkeys(group, 0.0))


def both_ways(schedule: Schedule, cluster: Cluster, iterations: int = 2):
    built = []

    def arithmetic(*args):
        built.append(TCPNetwork(*args))
        return built[-1]

    params, workload = default_params(), Workload()
    ahead = run_schedule(schedule, cluster, params, workload, iterations, network=arithmetic)
    events = run_schedule(schedule, cluster, params, workload, iterations, network=EVENTS_ONLY)
    return ahead, events, built[0]._one_sender_per_hop


def every_op(ops):
    """The ops of a program, those inside Repeat blocks (nested ones too) included."""
    for op in ops:
        if type(op) is Repeat:
            yield from every_op(op.ops)
        else:
            yield op


def has_steps(schedule: Schedule) -> bool:
    """Whether some collective has two ranks or more (one of one rank is no steps at all)."""
    return any(type(op) is Collective and len(op.group) > 1
               for program in schedule.programs.values() for op in every_op(program))


def assert_same_run(ahead, events):
    assert ahead.iteration_end == events.iteration_end  # exactly: the same sums in the same order
    assert ahead.compute_s == events.compute_s and ahead.overhead_s == events.overhead_s
    assert ahead.transfers == events.transfers
    assert ahead.bytes_sent == pytest.approx(events.bytes_sent, rel=1e-12)  # summed in another order


@PROPERTY
@given(cluster=clusters(symmetric=True), blocks=st.lists(BLOCK, min_size=1, max_size=3))
def test_arithmetic_collectives_equal_the_events_on_symmetric_clusters(cluster, blocks):
    schedule = program_of(cluster, blocks, [1.0])
    ahead, events, used = both_ways(schedule, cluster)
    assert_same_run(ahead, events)
    if used and has_steps(schedule):
        assert ahead.events < events.events


@PROPERTY
@given(cluster=clusters(symmetric=False), blocks=st.lists(BLOCK, min_size=1, max_size=3),
       skew=st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.7]), min_size=1, max_size=4))
def test_arithmetic_collectives_equal_the_events_on_asymmetric_clusters(cluster, blocks, skew):
    schedule = program_of(cluster, blocks, skew)
    ahead, events, used = both_ways(schedule, cluster)
    assert_same_run(ahead, events)
    if used and has_steps(schedule):
        assert ahead.events < events.events


def test_a_hop_with_two_senders_keeps_every_step_an_event():
    """Two GPUs sharing their host's NIC into one ring over two hosts: both cross-host sends of
    a hierarchical all-reduce hold the same link, so their order matters and events decide it."""
    gpu = CATALOG["T4"]
    cluster = Cluster("shared", tuple(Host(f"h{i}", f"s{i}", (gpu, gpu), "pcie", "shared") for i in range(2)),
                      (Link("s0", "s1", 20e-3, 1e9),))
    blocks = [dict(op="allreduce", algorithm="hierarchical", nbytes=3e6, gap=0.0, repeat=1, p2p=False, halves=False)]
    ahead, events, used = both_ways(program_of(cluster, blocks, [1.0]), cluster)
    assert not used and ahead.events == events.events
    assert_same_run(ahead, events)


@pytest.mark.parametrize("scenario,technique,arithmetic", [
    ("utah-gpn", "shard", True), ("utah-mass", "shard", True), ("utah-gpn", "data", True), ("tacc-tacc", "zero2", True),
    # two GPUs of a host send across the same link: DiLoCo's outer ring pairs the hosts' GPUs,
    # Pipeshard's stages send to each other
    ("gat-amst", "diloco", False), ("bris-star", "pipeshard", False)])
def test_techniques_run_the_same_either_way(scenario, technique, arithmetic):
    s = load_scenario(scenario)
    case = Case(s.cluster, get_model("gpt2m"), s.workload(), default_params())
    ahead, events, used = both_ways(build_schedule(technique, case), s.cluster, iterations=3)
    assert_same_run(ahead, events)
    assert used == arithmetic


def test_two_groups_under_one_tag_keep_every_step_an_event():
    """Two groups' all-reduces under one tag (as DiLoCo's replicas' were before each replica got its
    own tags). The engine holds a collective's ranks by tag: it would gather both groups as one."""
    gpu = CATALOG["A30"]
    cluster = Cluster("one host", (Host("h0", "s0", (gpu,) * 4, "nvlink", "per-gpu"),), ())
    devices = devices_of(cluster)
    programs = {}
    for rank in range(4):
        group = (0, 1) if rank < 2 else (2, 3)
        programs[rank] = [Compute(0.0, "work", kind="overhead", seconds=0.01 * rank),
                          Collective("allreduce", group, 3e6, "ring", ("grads",))]
    schedule = Schedule("replicas", devices, programs, dict.fromkeys(range(4), 0.0))
    ahead, events, used = both_ways(schedule, cluster)
    assert not used
    assert_same_run(ahead, events)
