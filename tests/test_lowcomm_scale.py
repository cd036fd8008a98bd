"""The low-communication techniques' replicas, each under its own tags (geosim/techniques/_lowcomm.py),
and what that lets the engine do: collectives timed by arithmetic where every hop has one sender
(geosim/sim/network/_exclusive.py), with the same answers as every step run as events.

Tags are names the engine matches within a group: two replicas' all-reduces under one tag were one
collective of twice the ranks to the held-collective machinery, which the one-sender proof
therefore refused outright. Now each replica's tags end with its name; where hops still have two
senders (a GPU receiving both from its replica's ring and from the replicas' outer ring), every
step stays an event, and the answers are the same either way."""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from geosim.inputs.case import Case
from geosim.inputs.params import default_params
from geosim.inputs.scenario import get_model, gpu_catalog
from geosim.sim.engine import run_schedule
from geosim.sim.network._exclusive import SharedTag, sender_pairs
from geosim.sim.network.tcp import TCPNetwork
from geosim.sim.schedule import Collective, Repeat
from geosim.inputs.specs import Cluster, Host, Link, Workload
from geosim.techniques import build_schedule
from conftest import assert_same_run

CATALOG = gpu_catalog()
MODEL = get_model("gpt2")
PARAMS = default_params()
EVENTS_ONLY = functools.partial(TCPNetwork, precompute=False)
LOW_COMMUNICATION = [("diloco", None), ("diloco", {"overlap": True}), ("sparseloco", None), ("hybrid", None)]


def cluster_of(sites: int, hosts: int, gpus: int, gpu: str = "A30", rtt: float = 20e-3) -> Cluster:
    made = tuple(Host(f"s{s}h{h}", f"site{s}", (CATALOG[gpu],) * gpus, "nvlink", "per-gpu")
                 for s in range(sites) for h in range(hosts))
    links = tuple(Link(f"site{a}", f"site{b}", rtt, 10e9) for a in range(sites) for b in range(a + 1, sites))
    return Cluster(f"{sites}x{hosts}x{gpus}", made, links)


def schedule_of(cluster: Cluster, technique: str, options, microbatches: int = 2):
    p = sum(len(h.gpus) for h in cluster.hosts)
    workload = Workload(global_batch=p * 2 * microbatches, microbatches=microbatches, seq_len=256)
    options = dict(options or {}, inner_steps=8)  # past the engine's repeated-block shortcut
    return build_schedule(technique, Case(cluster, MODEL, workload, PARAMS), options), workload


def collectives_of(ops):
    for op in ops:
        if type(op) is Collective:
            yield op
        elif type(op) is Repeat:
            yield op
            yield from collectives_of(op.ops)


@pytest.mark.parametrize("technique,options", LOW_COMMUNICATION)
def test_each_tag_names_one_group(technique, options):
    """Every collective and repeated block's tag stands for one group across the whole schedule,
    including a hybrid with a pipelined replica beside full ones."""
    for cluster, replicas in ((cluster_of(2, 2, 2), None), (cluster_of(1, 3, 2), [["s0h0"], ["s0h1", "s0h2"]])):
        if replicas and technique != "hybrid":
            continue
        chosen = dict(options or {}, **({"replicas": replicas} if replicas else {}))
        schedule, _ = schedule_of(cluster, technique, chosen)
        group_of: dict[tuple, set] = {}
        for program in schedule.programs.values():
            for op in collectives_of(program):
                group_of.setdefault(op.tag, set()).add(frozenset(op.group))
        assert group_of and all(len(groups) == 1 for groups in group_of.values()), \
            {tag: groups for tag, groups in group_of.items() if len(groups) > 1}
        try:
            list(sender_pairs(schedule.programs, tuple(d.host for d in schedule.devices)))
        except SharedTag as shared:  # pragma: no cover - the assertion above says why
            pytest.fail(f"two groups under tag {shared}")


PROPERTY = settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@example(sites=1, hosts=8, gpu="A30", rtt=2e-3, which=0, exact=False)  # eight replicas: 874 events, not 2,054
@example(sites=2, hosts=4, gpu="H100", rtt=40e-3, which=0, exact=True)
@given(sites=st.integers(1, 3), hosts=st.integers(1, 3), gpu=st.sampled_from(["A30", "H100", "T4"]),
       rtt=st.sampled_from([2e-3, 40e-3]), which=st.integers(0, len(LOW_COMMUNICATION) - 1), exact=st.booleans())
def test_one_gpu_replicas_take_the_arithmetic_path_with_the_same_answers(sites, hosts, gpu, rtt, which, exact):
    """Replicas of one GPU each: every hop has one sender, so the replicas' collectives are timed
    by arithmetic (far fewer events than every step as events), with every figure the same to the
    bit as every step run as events, and as the full run (symmetry=False)."""
    technique, options = LOW_COMMUNICATION[which]
    if sites * hosts < 2:
        return
    cluster = cluster_of(sites, hosts, 1, gpu, rtt)
    schedule, workload = schedule_of(cluster, technique, options)
    run = functools.partial(run_schedule, schedule, cluster, PARAMS, workload, iterations=2, exact=exact)
    arithmetic, events = run(network=TCPNetwork), run(network=EVENTS_ONLY)
    full = run(network=TCPNetwork, symmetry=False)
    assert_same_run(arithmetic, events)
    assert_same_run(arithmetic, full)
    if technique == "diloco" and options is None:  # its outer all-reduce's steps are timed at once
        assert full.events < events.events / (2 if sites * hosts >= 8 else 1)
    # alike hosts and sites: a shift moves each replica onto another's (its group and the host its
    # tags name), so some replicas stand for the others. Not streaming DiLoCo: each replica sends
    # its fragments straight to every other, so past two replicas a GPU's receiving port has
    # several senders
    several_senders = bool(options and options.get("overlap")) and sites * hosts > 2
    assert full.simulated_ranks == sites * hosts
    assert (arithmetic.simulated_ranks < sites * hosts) != several_senders


def test_one_gpu_replicas_at_one_site_run_one_replica():
    """Eight replicas of one GPU at one site: one stands for all (a shift moves each replica's
    group and tags onto the next one's), and the answer is the full run's."""
    cluster = cluster_of(1, 8, 1)
    for technique, options in LOW_COMMUNICATION:
        if options and options.get("overlap"):
            continue  # streaming: every replica sends into every other's GPU (several senders a port)
        schedule, workload = schedule_of(cluster, technique, options)
        run = functools.partial(run_schedule, schedule, cluster, PARAMS, workload, iterations=2)
        reduced, full = run(network=TCPNetwork), run(network=TCPNetwork, symmetry=False)
        assert_same_run(reduced, full)
        assert (reduced.simulated_ranks, full.simulated_ranks) == (1, 8)
        assert reduced.events < full.events / 4


def test_a_gpu_receiving_from_its_replica_and_from_the_outer_ring_keeps_every_step_an_event():
    """Hosts of several GPUs: GPU 0 of a host receives from its replica's ring predecessor (the
    host's last GPU) and from its outer ring or gather predecessor (on another host), into one
    receiving port. Those two senders' order there is the timing's to decide, so no collective is
    held: every step is an event, and the answer is the events' own. The replicas are alike, and no
    replica's copies share a hop, so one replica's ranks run for all three (the shared-hop symmetry:
    its run checks that the port's two senders never meet at one instant)."""
    cluster = cluster_of(1, 3, 2)
    for technique, options in LOW_COMMUNICATION:
        schedule, workload = schedule_of(cluster, technique, options)
        run = functools.partial(run_schedule, schedule, cluster, PARAMS, workload, iterations=2)
        reduced, events = run(network=TCPNetwork), run(network=EVENTS_ONLY, symmetry=False)
        every = run(network=TCPNetwork, symmetry=False)
        assert_same_run(reduced, events)
        assert_same_run(every, events)
        assert every.events == events.events  # nothing held
        # streaming DiLoCo's replicas each send fragments to every other replica's GPU: two senders
        # reach one port at one instant, the run's check finds it and every rank runs
        assert reduced.simulated_ranks == (6 if options else 2)
        assert (reduced.events < events.events) == (not options)
