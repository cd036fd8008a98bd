"""A lockstep collective's rounds priced for all senders at once (geosim/sim/network/_rounds.py) against
the scalar walk (one send_at per sender per round) and against every step run as events: on random
clusters (symmetric and not, ranks arriving apart, connections idle past the restart, windows still
opening, lossy and window-capped links, Repeat blocks the engine skips), the same iteration ends,
compute and overhead to the last bit, the same bytes and transfers per rank."""

from __future__ import annotations

import functools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geosim.inputs.params import default_params
from geosim.inputs.scale import scale_scenario
from geosim.inputs.scenario import get_model, gpu_catalog
from geosim.inputs.case import Case
from geosim.sim.engine import run_schedule
from geosim.sim import collectives
from geosim.sim.network import _rounds
from geosim.sim.network._exclusive import lockstep_ends as exclusive_lockstep_ends, lockstep_rounds, one_sender_per_hop
from geosim.sim.network.tcp import Connection, TCPNetwork
from geosim.sim.schedule import Collective, Schedule
from geosim.inputs.specs import Cluster, Host, Link, Workload
from geosim.techniques import build_schedule
from geosim.techniques._base import devices_of
from test_exclusive_links import program_of as exclusive_program_of

CATALOG = gpu_catalog()
GPUS = [CATALOG[name] for name in ("RTX6000", "T4", "A30", "H100")]
_EXAMPLES = int(os.environ.get("GEOSIM_HYPOTHESIS_EXAMPLES", "0"))
PROPERTY = settings(max_examples=_EXAMPLES or 40, deadline=None, derandomize=not _EXAMPLES,
                    suppress_health_check=[HealthCheck.too_slow])


class _Arrays(TCPNetwork):
    vector_min_senders = 1  # every lockstep collective on arrays, however small


class _Scalar(TCPNetwork):
    vector_min_senders = 10 ** 9  # every one send by send


EVENTS_ONLY = functools.partial(TCPNetwork, precompute=False)


@st.composite
def clusters(draw) -> Cluster:
    hosts = draw(st.integers(2, 4))
    made = tuple(Host(f"h{i}", f"s{draw(st.integers(0, 2))}",
                      tuple(draw(st.sampled_from(GPUS)) for _ in range(draw(st.integers(1, 4)))),
                      draw(st.sampled_from(["pcie", "nvlink"])), "per-gpu")
                 for i in range(hosts))
    sites = sorted({h.site for h in made})
    links = tuple(Link(a, b, draw(st.sampled_from([2e-3, 20.2e-3, 90e-3])), draw(st.sampled_from([1e9, 10e9, 1e11])),
                       window_bytes=draw(st.sampled_from([None, 64 * 1024.0])), loss=draw(st.sampled_from([0.0, 1e-3])))
                  for i, a in enumerate(sites) for b in sites[i + 1:])
    return Cluster("random", made, links)


BLOCK = st.fixed_dictionaries(dict(
    op=st.sampled_from(["allreduce", "reduce_scatter", "all_gather"]),
    algorithm=st.sampled_from(["ring", "hierarchical"]),
    nbytes=st.sampled_from([1e3, 3e6, 2.5e8]),
    gap=st.sampled_from([0.0, 1e-3, 0.6]),  # 0.6 s: past the idle restart (RTT + 200 ms)
    repeat=st.sampled_from([1, 3, 8]),  # 8: the engine's Repeat shortcut skips some
))


def program_of(cluster: Cluster, blocks: list[dict], skew: list[float]) -> Schedule:
    """Each block a collective of every rank: test_exclusive_links' programs without its p2p sends or halves."""
    return exclusive_program_of(cluster, [dict(block, p2p=False, halves=False) for block in blocks], skew)


def three_ways(schedule: Schedule, cluster: Cluster, params=None, workload=None, iterations: int = 2):
    params, workload = params or default_params(), workload or Workload()
    sent = {}

    def keeping(model):
        def factory(*args):
            net = model(*args)
            sent[model] = net
            return net
        return factory

    runs = [run_schedule(schedule, cluster, params, workload, iterations, network=keeping(model), symmetry=False)
            for model in (_Arrays, _Scalar)]
    events = run_schedule(schedule, cluster, params, workload, iterations, network=EVENTS_ONLY, symmetry=False)
    per_rank = [[sent[model].sent(rank) for rank in schedule.programs] for model in (_Arrays, _Scalar)]
    return runs, events, per_rank, sent[_Arrays]._one_sender_per_hop


def assert_same(run, events):
    assert run.iteration_end == events.iteration_end  # to the bit
    assert run.compute_s == events.compute_s and run.overhead_s == events.overhead_s
    assert run.transfers == events.transfers
    assert run.bytes_sent == pytest.approx(events.bytes_sent, rel=1e-12)  # summed in another order


@PROPERTY
@given(cluster=clusters(), blocks=st.lists(BLOCK, min_size=1, max_size=3),
       skew=st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.7]), min_size=1, max_size=4))
def test_rounds_on_arrays_equal_the_scalar_walk_and_the_events(cluster, blocks, skew):
    schedule = program_of(cluster, blocks, skew)
    (arrays, scalar), events, (mine, theirs), _ = three_ways(schedule, cluster)
    assert_same(arrays, events)
    assert_same(scalar, events)
    assert mine == theirs  # each rank's bytes (the same additions in the same order) and transfers


@pytest.mark.parametrize("scenario,technique", [("scale:2x2x4:H100:nvlink", "shard"),
                                                ("scale:2x1x8:A30", "data"),
                                                ("scale:3x1x4:H100:nvlink", "zero2")])
def test_techniques_on_arrays_equal_the_events(scenario, technique):
    """Real schedules (Shard's per-layer all-reduces over every GPU of sites at one RTT, Data's and
    ZeRO-2's gradient collectives), every collective's rounds on arrays."""
    cluster = scale_scenario(scenario).cluster
    case = Case(cluster, get_model("gpt2-xl"), Workload(global_batch=96, microbatches=2), default_params())
    schedule = build_schedule(technique, case)
    (arrays, scalar), events, (mine, theirs), used = three_ways(schedule, cluster, workload=case.workload)
    assert used  # the collectives were timed by arithmetic at all
    assert_same(arrays, events)
    assert mine == theirs
    # under a proven symmetry (the representatives' rounds, lockstep_rounds' form) on arrays too
    reduced = run_schedule(schedule, cluster, default_params(), case.workload, 2, network=_Arrays)
    assert_same(reduced, events)


def test_a_round_of_many_senders_runs_on_arrays_by_default():
    """The default threshold: a 32-GPU ring is priced on arrays, and still equals the events."""
    cluster = Cluster("wide", tuple(Host(f"h{i}", f"s{i // 2}", (CATALOG["H100"],) * 8, "nvlink", "per-gpu")
                                   for i in range(4)), (Link("s0", "s1", 20e-3, 1e10),))
    schedule = program_of(cluster, [dict(op="allreduce", algorithm="ring", nbytes=3e6, gap=1e-3, repeat=1)], [1.0])
    built = []

    def factory(*args):
        built.append(TCPNetwork(*args))
        return built[-1]

    run = run_schedule(schedule, cluster, default_params(), Workload(), 2, network=factory, symmetry=False)
    from geosim.sim.network._rounds import Plan

    assert built[0]._shapes and all(type(rounds) is Plan for _, rounds in built[0]._shapes.values())
    events = run_schedule(schedule, cluster, default_params(), Workload(), 2, network=EVENTS_ONLY, symmetry=False)
    assert_same(run, events)


@st.composite
def hosts_alike(draw) -> Cluster:
    """Hosts of one size, so that the hierarchical form applies (a ring inside each host, then one across
    them: each phase a part of the plan's connections, the local ones without a window), mostly at one
    site with a NIC per GPU (where the ring across hosts has one sender a hop)."""
    per_host, hosts = draw(st.integers(2, 4)), draw(st.integers(2, 4))
    gpu, intra = draw(st.sampled_from(GPUS)), draw(st.sampled_from(["pcie", "nvlink"]))
    made = tuple(Host(f"h{i}", draw(st.sampled_from(["s0", "s0", "s0", "s1"])), (gpu,) * per_host, intra,
                      draw(st.sampled_from(["per-gpu", "per-gpu", "shared"]))) for i in range(hosts))
    sites = sorted({h.site for h in made})
    links = tuple(Link(a, b, draw(st.sampled_from([2e-3, 90e-3])), draw(st.sampled_from([1e9, 1e11])),
                       window_bytes=draw(st.sampled_from([None, 64 * 1024.0])))
                  for i, a in enumerate(sites) for b in sites[i + 1:])
    return Cluster("hosts alike", made, links)


@st.composite
def states(draw, cluster: Cluster):
    """A collective over every GPU (a flat ring, or hierarchical where the hosts are alike) started on a
    network with a past: each hop's backlog, each connection's window and last activity and each rank's
    arrival drawn apart (a sender's hops at different backlogs, windows still opening or past their
    largest, connections idle past the restart), so that the rounds' steady form meets every reason to
    stop, or not to start, on any round."""
    devices = devices_of(cluster)
    group = tuple(d.rank for d in devices)
    coll = Collective(draw(st.sampled_from(["allreduce", "reduce_scatter", "all_gather"])), group,
                      draw(st.sampled_from([1e3, 3e6, 2.5e8])), draw(st.sampled_from(["ring", "hierarchical"])), ("c",))
    times = st.sampled_from([0.0, 1e-4, 0.01, 0.3, 1.0, 7.5])
    return (devices, coll, [draw(times) for _ in range(4 * len(group) + 8)],
            [draw(st.sampled_from([14602.24, 1e5, 3e6, 1e9])) for _ in range(2 * len(group))],
            [draw(times) for _ in group])


def arrays_against_the_walk(cluster: Cluster, coll: Collective, backlogs=(0.0,), windows=(14602.24,),
                            arrivals=(1.0,)) -> None:
    """lockstep_ends on arrays (its steady rounds in blocks and its whole-model rounds) against the scalar
    walk from the same past (each hop's backlog, each connection's window and last activity, each rank's
    arrival, drawn from these in turn): the same ends, backlogs, windows, last activities, bytes and
    transfers, to the bit."""
    devices = devices_of(cluster)
    nets = [_Arrays(None, cluster, default_params(), devices) for _ in range(2)]  # rounds of any size on arrays
    plan, _ = [net.ring_plan(coll, coll.group) for net in nets]  # both make the same routes, in one order
    if plan is None:
        return  # a tree, or a token bucket: walked send by send
    phases = collectives.ring_phases(coll, nets[0].hosts)
    if not all(one_sender_per_hop(phase, nets[0].route) for phase in phases):
        return  # a phase whose hops have two senders: never timed by arithmetic
    steps = [collectives.expand(coll, rank, nets[1].hosts) for rank in coll.group]
    rounds = lockstep_rounds(coll.group, steps)
    for net in nets:  # the same past on both
        for hop in range(len(net.free_at)):
            net.free_at[hop] = backlogs[hop % len(backlogs)]
        for n, pair in enumerate(sorted({pair for phase in phases for pair in phase})):
            net.connections[pair] = Connection(cwnd=windows[n % len(windows)],
                                               last_active=backlogs[-1 - n % len(backlogs)])
    start = {rank: arrivals[i % len(arrivals)] for i, rank in enumerate(coll.group)}
    ends = [_rounds.lockstep_ends(nets[0], plan, start, Connection),
            exclusive_lockstep_ends(coll.group, rounds, start, nets[1].send_at)]
    assert ends[0] == ends[1]
    assert nets[0].free_at == nets[1].free_at
    assert {k: (c.cwnd, c.last_active) for k, c in nets[0].connections.items()} == {
        k: (c.cwnd, c.last_active) for k, c in nets[1].connections.items()}
    assert nets[0]._sent == nets[1]._sent and nets[0].transfers == nets[1].transfers
    assert nets[0].bytes_sent == pytest.approx(nets[1].bytes_sent, rel=1e-12)  # summed in another order


@settings(PROPERTY, max_examples=_EXAMPLES or 150)
@given(data=st.data())
def test_a_collective_from_any_state_on_arrays_equals_the_scalar_walk(data):
    """arrays_against_the_walk from a drawn past, flat rings and hierarchical phases (which hold some of
    the plan's connections and start with a sender's hops apart)."""
    cluster = data.draw(st.one_of(clusters(), hosts_alike()))
    _, coll, backlogs, windows, arrivals = data.draw(states(cluster))
    arrays_against_the_walk(cluster, coll, backlogs, windows, arrivals)


@pytest.mark.parametrize("op", ["reduce_scatter", "allreduce", "all_gather"])
@pytest.mark.parametrize("size", [4, 8, 16])
def test_a_hop_busy_to_the_last_round_is_left_as_the_walk_leaves_it(op, size):
    """One slow GPU in a host's ring (a T4 among H100s, over PCIe): the senders into and out of it are on
    its slow port, and the one before it gets its messages at the fast GPUs' pace for the whole
    collective, so its hop is still busy when it sends again, to the last round. The steady blocks
    assume idle hops and check that they were: without that check this host's backlogs come out wrong."""
    gpus = (CATALOG["H100"],) * (size - 1) + (CATALOG["T4"],)
    cluster = Cluster("one slow", (Host("h0", "s0", gpus, "pcie", "per-gpu"),), ())
    arrays_against_the_walk(cluster, Collective(op, tuple(range(size)), 2.5e8, "ring", ("c",)))


@pytest.mark.parametrize("op", ["reduce_scatter", "allreduce"])
def test_a_hop_busy_from_before_the_collective_is_left_as_the_walk_leaves_it(op):
    """The first sender's hops (its GPU's port out, the next GPU's in) held 6.5 s past the arrivals by
    earlier traffic: its backlog grows a line time a round through the whole collective while its clock,
    the pace of the others, runs well below it. Each block checks its first round's backlog against its
    first clock (the rounds after it alone pass)."""
    cluster = Cluster("held", (Host("h0", "s0", (CATALOG["H100"],) * 8, "pcie", "per-gpu"),), ())
    arrays_against_the_walk(cluster, Collective(op, tuple(range(8)), 2.5e8, "ring", ("c",)),
                            backlogs=(7.5, 7.5) + (0.0,) * 62)
