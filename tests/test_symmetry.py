"""Ranks a proven symmetry makes alike, simulated once (geosim/sim/symmetry.py), against every rank
simulated: on random clusters, symmetric, nearly symmetric (one link, GPU or NIC off) and not,
with and without token-bucket site links (every one, or one alone), for
every technique, the same times, compute, overhead, bytes and transfers to the last bit, and the
same predictions (breakdowns included). The nearly symmetric clusters are the ones where a shift
passes some of the proof's checks and not the others: dropping a check makes this test fail."""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geosim.inputs.case import Case
from geosim.base.errors import GeosimError
from geosim.inputs.params import default_params
from geosim.inputs.scenario import get_model, gpu_catalog
from geosim.sim.engine import every_rank, run_schedule
from geosim.sim.network.ideal import IdealNetwork
from geosim.sim.network.tcp import TCPNetwork
from geosim.predict import predict
from geosim.sim.schedule import Collective, Compute, Schedule
from geosim.sim.symmetry import Symmetry, find_symmetry
from geosim.inputs.specs import Cluster, Host, Link, Shaper, Workload
from geosim.techniques import build_schedule, layout_options, technique_names
from conftest import assert_same_run, examples

CATALOG = gpu_catalog()
GPUS = [CATALOG[name] for name in ("RTX6000", "A30", "H100")]
MODEL = get_model("gpt2")
_EXAMPLES = int(os.environ.get("GEOSIM_HYPOTHESIS_EXAMPLES", "0"))
PROPERTY = settings(max_examples=_EXAMPLES or 60, deadline=None, derandomize=not _EXAMPLES,
                    suppress_health_check=[HealthCheck.too_slow])


def uniform_cluster(sites: int, hosts: int, gpus: int, gpu=CATALOG["H100"], intra="nvlink", nic="per-gpu",
                    rtt=0.02, bandwidth=100e9) -> Cluster:
    made = tuple(Host(f"s{s}h{h}", f"site{s}", (gpu,) * gpus, intra, nic) for s in range(sites) for h in range(hosts))
    links = tuple(Link(f"site{a}", f"site{b}", rtt, bandwidth) for a in range(sites) for b in range(a + 1, sites))
    return Cluster(f"{sites}x{hosts}x{gpus}", made, links)


@st.composite
def clusters(draw) -> Cluster:
    sites, hosts, gpus = draw(st.sampled_from([1, 2, 3, 3])), draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4]))
    cluster = uniform_cluster(sites, hosts, gpus, draw(st.sampled_from(GPUS)), draw(st.sampled_from(["pcie", "nvlink"])),
                              draw(st.sampled_from(["shared", "per-gpu"])), draw(st.sampled_from([2e-3, 40e-3])),
                              draw(st.sampled_from([1e9, 100e9])))
    flaw = draw(st.sampled_from(["none", "none", "link", "gpu", "nic", "random"]))
    made, links = list(cluster.hosts), list(cluster.links)
    if flaw == "link" and links:  # one site link slower: sites no longer alike
        i = draw(st.integers(0, len(links) - 1))
        links[i] = dataclasses.replace(links[i], bandwidth_bps=links[i].bandwidth_bps / 10)
    elif flaw in ("gpu", "nic"):  # one host off
        i = draw(st.integers(0, len(made) - 1))
        made[i] = (dataclasses.replace(made[i], gpus=(CATALOG["T4"],) + made[i].gpus[1:]) if flaw == "gpu" else
                   dataclasses.replace(made[i], nic="shared" if made[i].nic == "per-gpu" else "per-gpu"))
    elif flaw == "random":  # each host its own GPUs, bus and NIC; each link its own RTT and bandwidth
        made = [dataclasses.replace(h, gpus=tuple(draw(st.sampled_from(GPUS)) for _ in h.gpus),
                                    intra_host=draw(st.sampled_from(["pcie", "nvlink"])),
                                    nic=draw(st.sampled_from(["shared", "per-gpu"]))) for h in made]
        links = [dataclasses.replace(link, rtt_s=draw(st.sampled_from([2e-3, 20e-3, 90e-3])),
                                     bandwidth_bps=draw(st.sampled_from([1e9, 10e9]))) for link in links]
    shaped = draw(st.sampled_from(["none", "none", "all", "one"]))  # token-bucket site links (the TCP model's shaped hop)
    if shaped != "none" and links:
        chosen = range(len(links)) if shaped == "all" else [draw(st.integers(0, len(links) - 1))]
        for i in chosen:
            links[i] = dataclasses.replace(links[i], shaper=Shaper(burst_bytes=65536))
    return Cluster(f"{cluster.name}-{flaw}-shaped-{shaped}", tuple(made), tuple(links))


@pytest.mark.slow  # ~3.5 s of CPU: a few large random clusters, every rank and once per class (the whole suite runs it)
@PROPERTY
@given(cluster=clusters(), technique=st.sampled_from(sorted(technique_names())),
       algorithm=st.sampled_from(["ring", "hierarchical", "tree"]), microbatches=st.sampled_from([1, 2, 8]),
       exact=st.booleans())
def test_simulating_alike_ranks_once_changes_no_figure(cluster, technique, algorithm, microbatches, exact):
    p = sum(len(h.gpus) for h in cluster.hosts)
    params = default_params()
    params = dataclasses.replace(params, collectives={**params.collectives, technique: algorithm})
    workload = Workload(global_batch=p * microbatches * 2, microbatches=microbatches, seq_len=256)
    case = Case(cluster, MODEL, workload, params)
    try:
        schedule = build_schedule(technique, case)
    except GeosimError:
        return  # infeasible on this cluster (too few layers for the stages, a batch that does not divide)
    assert_reduced_is_full(schedule, cluster, params, workload, exact, p)
    with every_rank():
        every = predict(case, technique).to_dict()
    once = predict(case, technique).to_dict()
    for answer in (every, once):
        answer.pop("wall_s"), answer.pop("simulated_events")
    assert once == every


def assert_reduced_is_full(schedule, cluster, params, workload, exact: bool, ranks: int) -> None:
    """On the TCP and the ideal network: the run with its proven symmetry is the run of every rank."""
    for network in (TCPNetwork, IdealNetwork):
        full = run_schedule(schedule, cluster, params, workload, iterations=2, network=network, exact=exact,
                            symmetry=False)
        reduced = run_schedule(schedule, cluster, params, workload, iterations=2, network=network, exact=exact)
        assert full.simulated_ranks == ranks and reduced.simulated_ranks <= ranks
        assert_same_run(full, reduced)


def test_a_symmetric_cluster_runs_one_host_or_one_site():
    """Data's ring over one site of identical hosts: one host's GPUs stand for all; over identical
    sites, one site's. The answers are the full run's (the property above), with far fewer events."""
    params = default_params()
    for cluster, ranks in ((uniform_cluster(1, 4, 4), 4), (uniform_cluster(3, 2, 4), 8)):
        workload = Workload(global_batch=96, microbatches=2, seq_len=256)
        schedule = build_schedule("data", Case(cluster, MODEL, workload, params))
        reduced = run_schedule(schedule, cluster, params, workload, iterations=2, network=TCPNetwork)
        full = run_schedule(schedule, cluster, params, workload, iterations=2, network=TCPNetwork, symmetry=False)
        assert (reduced.simulated_ranks, full.simulated_ranks) == (ranks, 16 if ranks == 4 else 24)
        assert_same_run(full, reduced)
        assert reduced.events < full.events


def test_no_symmetry_is_used_where_it_is_not_proven():
    params = default_params()
    workload = Workload(global_batch=96, microbatches=2, seq_len=256)
    uneven = uniform_cluster(3, 2, 4)
    uneven = dataclasses.replace(uneven, links=(dataclasses.replace(uneven.links[0], rtt_s=0.09),) + uneven.links[1:])
    shared = uniform_cluster(1, 4, 4, nic="shared")
    for cluster, technique in ((uneven, "data"), (shared, "diloco")):
        # uneven: the ring meets a slower link once; diloco: its replicas' rings share the host's NIC
        schedule = build_schedule(technique, Case(cluster, MODEL, workload, params))
        run = run_schedule(schedule, cluster, params, workload, iterations=2, network=TCPNetwork)
        assert run.simulated_ranks == 24 if cluster is uneven else 16
    # with a trace every rank runs: a trace lists every rank's transfers
    cluster = uniform_cluster(1, 4, 4)
    schedule = build_schedule("data", Case(cluster, MODEL, workload, params))
    assert run_schedule(schedule, cluster, params, workload, iterations=1, network=TCPNetwork, trace=True).simulated_ranks == 16


def test_a_shift_renames_and_files_messages_for_representatives():
    s = Symmetry(size=12, segment=6, shift=2)  # two segments of 6, each moving on 2 places
    assert [s.image(r) for r in range(12)] == [2, 3, 4, 5, 0, 1, 8, 9, 10, 11, 6, 7]
    assert s.representatives() == [0, 1, 6, 7] and s.copies == 3
    assert [s.representative(r) for r in range(12)] == [0, 1, 0, 1, 0, 1, 6, 7, 6, 7, 6, 7]
    # 4 -> 9 renamed by σ^-1 (9 is one shift past 7): 2 -> 7; 3 -> 4 renamed by σ^-2: 5 -> 0
    assert s.canonical(4, 9) == (2, 7) and s.canonical(3, 4) == (5, 0)
    for src in range(12):
        for dst in range(12):
            a, b = s.canonical(src, dst)
            assert b == s.representative(dst)
            k = 0  # the power of σ that takes (a, b) back to (src, dst)
            while (a, b) != (src, dst):
                a, b, k = s.image(a), s.image(b), k + 1
                assert k < s.copies


def test_find_symmetry_needs_the_networks_word():
    cluster, params = uniform_cluster(1, 2, 2), default_params()
    workload = Workload(global_batch=8, microbatches=2, seq_len=256)
    schedule = build_schedule("data", Case(cluster, MODEL, workload, params))

    class Unproven:  # the protocol's members the proof reads (geosim.sim.network.NetworkBackend)
        hosts = tuple(d.host for d in schedule.devices)
        groups_may_move = False

        def symmetric_under(self, image):
            return False

    class Proven(Unproven):
        def symmetric_under(self, image):
            return True

    assert find_symmetry(schedule, Unproven()) is None
    assert find_symmetry(schedule, Proven()) is not None  # the programs and GPUs of Data's ranks map


def _three_sites_one_slow_link():
    cluster = uniform_cluster(3, 1, 2)
    slow = dataclasses.replace(cluster.links[0], bandwidth_bps=cluster.links[0].bandwidth_bps / 10)
    return dataclasses.replace(cluster, links=(slow,) + cluster.links[1:])


def _one_host_of_other_gpus():
    cluster = uniform_cluster(2, 1, 2)
    other = dataclasses.replace(cluster.hosts[1], gpus=(CATALOG["T4"],) * 2)
    return dataclasses.replace(cluster, hosts=(cluster.hosts[0], other))


def test_a_group_the_shift_moves_elsewhere_is_refused():
    """Two pairs all-reducing under one tag, the second rank of each late: moving the ranks two
    places on maps each rank's program onto another's, but each pair onto the other pair, not onto
    itself (only the group check tells). Under TCP the one tag names two groups, so nothing is
    reduced; the ideal network's barriers are keyed by their group and await its running ranks, so
    there the pair moved onto the other pair runs once, and its barrier still waits for the late rank."""
    cluster, params = uniform_cluster(1, 1, 4), default_params()
    workload = Workload(global_batch=8, microbatches=1, seq_len=256)
    devices = build_schedule("data", Case(cluster, MODEL, workload, params)).devices

    def program(rank):
        pair = (0, 1) if rank < 2 else (2, 3)
        return [Compute(0.0, "late", kind="overhead", seconds=0.1 * (rank % 2)),
                Collective("allreduce", pair, 1e6, "ring", ("pairs",))]

    schedule = Schedule("pairs", devices, {r: program(r) for r in range(4)}, dict.fromkeys(range(4), 0.0))
    for network in (TCPNetwork, IdealNetwork):
        full = run_schedule(schedule, cluster, params, workload, iterations=1, network=network, symmetry=False)
        reduced = run_schedule(schedule, cluster, params, workload, iterations=1, network=network)
        assert_same_run(full, reduced)
        assert reduced.simulated_ranks == (4 if network is TCPNetwork else 2)


def test_each_check_of_the_proof_refuses_its_counterexample():
    """Clusters where a shift passes every check but one: moving data's ring one site on, where one
    site link is slower (only the routes' costs tell); one host's GPUs other than the other's (only
    the devices tell). Each runs in full, and the answers agree; without the check they would not."""
    params = default_params()
    workload = Workload(global_batch=24, microbatches=2, seq_len=256)
    for cluster in (_three_sites_one_slow_link(), _one_host_of_other_gpus()):
        p = sum(len(h.gpus) for h in cluster.hosts)
        schedule = build_schedule("data", Case(cluster, MODEL, dataclasses.replace(workload, global_batch=4 * p), params))
        for network in (TCPNetwork, IdealNetwork):
            full = run_schedule(schedule, cluster, params, workload, iterations=2, network=network, symmetry=False)
            reduced = run_schedule(schedule, cluster, params, workload, iterations=2, network=network)
            assert_same_run(full, reduced)
            if network is TCPNetwork:
                assert reduced.simulated_ranks == p


# 60 random 3D layouts in the whole suite (HYPOTHESIS_PROFILE=ci), 20 in the quick tier (3.5 s less on
# 2 cores). Not the property above: its time is in a few large clusters that 20 examples draw too.
@settings(PROPERTY, max_examples=_EXAMPLES or examples(60, 20))
@given(cluster=clusters(), tensor=st.sampled_from([1, 2, 4]), pipeline=st.sampled_from([1, 2, 3]),
       microbatches=st.sampled_from([1, 2, 4]), exact=st.booleans())
def test_a_3d_layout_simulated_once_per_replica_changes_no_figure(cluster, tensor, pipeline, microbatches, exact):
    """Pipeshard's 3D layouts (tensor groups inside hosts, stages of whole hosts, data over the rest):
    hops with several senders (a GPU's port takes its tensor ring's, the data ring's and the previous
    stage's bytes; a shared NIC takes every GPU's). Where a shift moves replicas onto replicas and no
    sender's copies share a hop, one replica runs and its run checks that no two senders reserve one hop
    at one instant (else every rank runs): the same figures to the bit either way."""
    params = default_params()
    p = sum(len(h.gpus) for h in cluster.hosts)
    workload = Workload(global_batch=p * microbatches * 2, microbatches=microbatches, seq_len=256)
    case = Case(cluster, MODEL, workload, params)
    hosts = tuple(h.name for h in cluster.hosts)
    try:
        options = layout_options("pipeshard", case, hosts, tensor=tensor, pipeline=pipeline)
        schedule = build_schedule("pipeshard", case, options)
    except GeosimError:
        return  # a layout these hosts cannot take
    assert_reduced_is_full(schedule, cluster, params, workload, exact, p)


def test_a_3d_layout_runs_one_replica_where_each_gpu_has_its_nic():
    """Tensor 4 x pipeline 2 x data 2 on four hosts of four GPUs, one site: with a NIC per GPU the
    replicas' copies use distinct hops, so one replica (a pipeline of two hosts: 8 ranks) runs for both,
    on the TCP and the ideal network; with one shared NIC per host a host's GPUs send activations
    through it at one instant, and every rank runs. The figures are the full run's either way."""
    params = default_params()
    workload = Workload(global_batch=64, microbatches=4, seq_len=256)
    for nic, ranks in (("per-gpu", 8), ("shared", 16)):
        cluster = uniform_cluster(1, 4, 4, nic=nic)
        case = Case(cluster, MODEL, workload, params)
        options = layout_options("pipeshard", case, tuple(h.name for h in cluster.hosts), tensor=4, pipeline=2)
        schedule = build_schedule("pipeshard", case, options)
        for network, expected in ((TCPNetwork, ranks), (IdealNetwork, 8)):
            full = run_schedule(schedule, cluster, params, workload, iterations=2, network=network, symmetry=False)
            reduced = run_schedule(schedule, cluster, params, workload, iterations=2, network=network)
            assert_same_run(full, reduced)
            assert reduced.simulated_ranks == expected


def _full_walk_symmetric_under(net, image) -> bool:
    """ExclusiveLinks.symmetric_under as it was before the fixed-hop refusal: the hop image over every pair
    the run sends over (each route's cost computed afresh), then shared_hops_map on the whole of it."""
    from geosim.sim.network._exclusive import _cost, shared_hops_map
    if not net._pairs_complete:
        return False
    hop_image: dict[int, int] = {}
    for src, dst in net._pairs_used:
        mine, theirs = net.route(src, dst), net.route(image(src), image(dst))
        if len(mine.hops) != len(theirs.hops) or _cost(mine) != _cost(theirs):
            return False
        for hop, other in zip(mine.hops, theirs.hops):
            if hop_image.setdefault(hop, other) != other:
                return False
    if len(set(hop_image.values())) != len(hop_image):
        return False
    return net._one_sender_per_hop or shared_hops_map(net._pairs_used, net.route, image, hop_image) is not None


@PROPERTY
@given(cluster=clusters(), technique=st.sampled_from(sorted(technique_names())), tensor=st.sampled_from([0, 1, 2, 4]),
       pipeline=st.sampled_from([1, 2, 3]), fabric=st.booleans())
def test_refusing_a_fixed_shared_hop_early_refuses_only_what_the_whole_walk_refuses(cluster, technique, tensor,
                                                                                      pipeline, fabric):
    """The proof's network half stops at the first shared hop that is its own image (a symmetry moves every
    rank, so that hop's orbit is shorter than its senders'): for every shift the search tries, on the TCP and
    the fabric model, it answers what the full walk and shared_hops_map answer (tensor 0: the technique's
    own schedule; else a Pipeshard layout)."""
    from geosim.sim.kernel import Clock
    from geosim.sim.network.fabric import FabricNetwork
    params = default_params()
    p = sum(len(h.gpus) for h in cluster.hosts)
    workload = Workload(global_batch=p * 4, microbatches=2, seq_len=256)
    case = Case(cluster, MODEL, workload, params)
    try:
        if tensor:
            schedule = build_schedule("pipeshard", case, layout_options(
                "pipeshard", case, tuple(h.name for h in cluster.hosts), tensor=tensor, pipeline=pipeline))
        else:
            schedule = build_schedule(technique, case)
    except GeosimError:
        return
    net = (FabricNetwork if fabric else TCPNetwork)(Clock(), cluster, params, schedule.devices)
    net.prepare(schedule.programs)
    size = len(schedule.devices)
    for segment in (d for d in range(2, size + 1) if size % d == 0):
        for shift in (d for d in range(1, segment) if segment % d == 0):
            image = Symmetry(size, segment, shift).image
            assert net.symmetric_under(image) == _full_walk_symmetric_under(net, image), (segment, shift)
