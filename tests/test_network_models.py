"""Network backends behind the engine's protocol: a model written here plugs in; the
alpha-beta model against hand-derived ring and hierarchical formulas and against
ASTRA-sim's figures; its symmetry fast path against the full simulation on random
clusters; per-GPU NICs."""

from __future__ import annotations

import functools
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geosim.inputs.params import default_params
from geosim.inputs.scenario import gpu_catalog
from geosim.sim import collectives
from geosim.sim.engine import run_schedule
from geosim.sim.network import CountingNetwork, NetworkBackend
from geosim.sim.network import _exclusive as exclusive
from geosim.sim.network.alphabeta import AlphaBetaNetwork
from geosim.sim.network.ideal import IdealNetwork
from geosim.sim.network.tcp import TCPNetwork
from geosim.sim.schedule import Collective, Compute, Repeat, Schedule
from geosim.inputs.specs import Cluster, Host, Link, Workload
from geosim.studies.astra import QUICK, allreduce_schedule, astra_cluster, astra_params, case_named
from geosim.techniques._base import devices_of

REL = 1e-9
A30 = gpu_catalog()["A30"]
T4 = gpu_catalog()["T4"]
WORKLOAD = Workload()
_EXAMPLES = int(os.environ.get("GEOSIM_HYPOTHESIS_EXAMPLES", "0"))
PROPERTY = settings(max_examples=_EXAMPLES or 40, deadline=None, derandomize=not _EXAMPLES,
                    suppress_health_check=[HealthCheck.too_slow])
FULL = functools.partial(AlphaBetaNetwork, shortcut=False)


class FixedCostNetwork:
    """A network backend written against the protocol alone: every message takes `latency` plus
    bytes / `rate`, however many are in flight (no links, no queueing)."""

    latency = 1e-3
    rate = 1e9

    def __init__(self, clock, cluster, params, devices, trace=None):
        self.hosts = tuple(d.host for d in devices)
        self.bytes_sent, self.transfers, self.by_rank = 0.0, 0, {}

    groups_may_move = False

    def send_at(self, src, dst, nbytes, p2p, label, now):
        self.count(src, nbytes)
        return now + self.latency + nbytes / self.rate

    def send(self, src, dst, nbytes, p2p, label=""):
        return self.send_at(src, dst, nbytes, p2p, label, 0.0)

    def collective_ops(self, coll, rank):
        return collectives.expand(coll, rank, self.hosts)

    def may_shortcut(self, coll):
        return False

    def collective_time(self, coll):
        return None

    def prepare(self, programs):
        pass

    def may_precompute(self, coll):
        return False  # every step an event, the path this test is about

    def collective_ends(self, coll, arrivals):
        return exclusive.collective_ends(lambda rank: self.collective_ops(coll, rank), arrivals,
                                         self.send_at)

    def count(self, src, nbytes, transfers=1):
        self.bytes_sent += nbytes
        self.transfers += transfers
        b, t = self.by_rank.get(src, (0.0, 0))
        self.by_rank[src] = (b + nbytes, t + transfers)

    def sent(self, rank):
        return self.by_rank.get(rank, (0.0, 0))

    def shift_connections(self, src, since, delta):
        pass

    def symmetric_under(self, image):
        return False

    def reduce_to(self, symmetry):
        pass

    def least_delay_s(self, src, dst, nbytes, p2p):
        return self.latency + nbytes / self.rate


def one_collective(cluster: Cluster, op: str, nbytes: float, algorithm: str, before: dict | None = None) -> Schedule:
    devices = devices_of(cluster)
    group = tuple(d.rank for d in devices)
    coll = Collective(op, group, nbytes, algorithm, ("c",))
    programs = {r: ([Compute(before[r], "wait")] if before and before.get(r) else []) + [coll] for r in group}
    return Schedule("one collective", devices, programs, dict.fromkeys(group, 0.0))


def lan_hosts(hosts: int, gpus: int, nic: str = "per-gpu", intra: str = "nvlink", gpu=A30) -> Cluster:
    return Cluster("lan", tuple(Host(f"h{i}", "dc", (gpu,) * gpus, intra, nic) for i in range(hosts)), ())


def test_a_model_written_against_the_protocol_plugs_into_the_engine():
    members = [m for m in vars(NetworkBackend) if not m.startswith("_") and callable(getattr(NetworkBackend, m))]
    # the seam's required members; the fast paths, the symmetry questions and the floor are optional protocols
    assert set(members) == {"send_at", "send", "collective_ops", "count", "sent"}
    assert all(callable(getattr(FixedCostNetwork, m, None)) for m in members)
    assert not issubclass(FixedCostNetwork, CountingNetwork)  # the protocol alone, no shared base
    cluster = lan_hosts(3, 2)
    p, n = 6, 6e6
    schedule = one_collective(cluster, "allreduce", n, "ring")
    run = run_schedule(schedule, cluster, default_params(), WORKLOAD, iterations=2, network=FixedCostNetwork)
    step = FixedCostNetwork.latency + n / p / FixedCostNetwork.rate
    assert run.iteration_time(0) == pytest.approx(2 * (p - 1) * step, rel=REL)
    assert run.iteration_time(1) == pytest.approx(2 * (p - 1) * step, rel=REL)
    assert run.transfers == 2 * p * 2 * (p - 1)
    assert run.bytes_sent == pytest.approx(2 * p * 2 * (p - 1) * n / p, rel=REL)


def test_the_ideal_network_makes_a_collective_a_barrier():
    cluster = lan_hosts(2, 2)
    schedule = one_collective(cluster, "allreduce", 1e9, "ring", before={0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0})
    schedule.programs[1].insert(0, Compute(0.0, "late", kind="overhead", seconds=0.25))
    run = run_schedule(schedule, cluster, default_params(), WORKLOAD, iterations=1, network=IdealNetwork)
    assert run.iteration_end[0] == pytest.approx(0.25, rel=REL)
    assert run.bytes_sent == 0


def test_the_ideal_networks_barrier_keeps_two_groups_under_one_tag_apart():
    """DiLoCo's replicas run their outer all-reduces under one tag: a barrier keyed by the tag alone
    let rank 0 and rank 2 (of different replicas, both early) release each other at once."""
    cluster = lan_hosts(2, 2)
    devices = devices_of(cluster)
    first, second = (Collective("allreduce", g, 1e6, "ring", ("outer",)) for g in ((0, 1), (2, 3)))
    programs = {0: [first, Compute(0.0, "after", kind="overhead", seconds=0.5)],
                1: [Compute(0.0, "late", kind="overhead", seconds=1.0), first],
                2: [second, Compute(0.0, "after", kind="overhead", seconds=0.5)],
                3: [Compute(0.0, "late", kind="overhead", seconds=1.0), second]}
    schedule = Schedule("two replicas", devices, programs, dict.fromkeys(programs, 0.0))
    run = run_schedule(schedule, cluster, default_params(), WORKLOAD, iterations=1, network=IdealNetwork)
    assert run.iteration_end[0] == pytest.approx(1.5, rel=REL)  # the early ranks wait for their own group


# --- alpha-beta against hand formulas -----------------------------------------------------

def alpha_beta_params(**changes):
    values = dict(lan_rtt_s=0.030, lan_bandwidth_bps=8e9, nvlink_bps=160e9, intra_host_latency_s=5e-6)
    return default_params().with_values(**{**values, **changes})


def inter_alpha_beta(params):
    return params.lan_rtt_s / 2, 8 / params.lan_bandwidth_bps  # two LAN edges; bytes -> bits


def intra_alpha_beta(params):
    return params.intra_host_latency_s, 8 / params.nvlink_bps


@pytest.mark.parametrize("op,steps_per_p", [("allreduce", 2), ("reduce_scatter", 1), ("all_gather", 1)])
@pytest.mark.parametrize("p", [2, 3, 8])
@pytest.mark.parametrize("network", [AlphaBetaNetwork, FULL])
def test_alpha_beta_ring_matches_the_formula(op, steps_per_p, p, network):
    params, n = alpha_beta_params(), 48e6
    cluster = lan_hosts(p, 1)
    alpha, beta = inter_alpha_beta(params)
    run = run_schedule(one_collective(cluster, op, n, "ring"), cluster, params, WORKLOAD, 1, network=network)
    assert run.iteration_end[0] == pytest.approx(steps_per_p * (p - 1) * (alpha + n / p * beta), rel=REL)


@pytest.mark.parametrize("hosts,gpus", [(2, 2), (3, 4), (4, 2)])
@pytest.mark.parametrize("network", [AlphaBetaNetwork, FULL])
def test_alpha_beta_hierarchical_matches_the_formula(hosts, gpus, network):
    """reduce-scatter in the host + ring all-reduce of n/g across hosts + all-gather in the host:
    2(g-1)(a1 + n/g b1) + 2(h-1)(a2 + n/(g h) b2), with one NIC per GPU."""
    params, n = alpha_beta_params(), 48e6
    cluster = lan_hosts(hosts, gpus)
    (a1, b1), (a2, b2) = intra_alpha_beta(params), inter_alpha_beta(params)
    expected = 2 * (gpus - 1) * (a1 + n / gpus * b1) + 2 * (hosts - 1) * (a2 + n / (gpus * hosts) * b2)
    run = run_schedule(one_collective(cluster, "allreduce", n, "hierarchical"), cluster, params, WORKLOAD, 1,
                       network=network)
    assert run.iteration_end[0] == pytest.approx(expected, rel=REL)


def test_shared_nic_lanes_queue_and_per_gpu_nics_do_not():
    """The g GPUs of a host share its one link when they share a NIC: without latency to hide
    it, each of the two cross-host steps takes g serializations instead of one."""
    params, n, hosts, gpus = alpha_beta_params(lan_rtt_s=0.0), 48e6, 2, 4
    times = {}
    for nic in ("shared", "per-gpu"):
        cluster = lan_hosts(hosts, gpus, nic=nic)
        times[nic] = run_schedule(one_collective(cluster, "allreduce", n, "hierarchical"), cluster, params,
                                  WORKLOAD, 1, network=AlphaBetaNetwork).iteration_end[0]
    a2, b2 = inter_alpha_beta(params)
    step = n / (gpus * hosts) * b2
    assert times["shared"] - times["per-gpu"] == pytest.approx(2 * (hosts - 1) * (gpus - 1) * step, rel=1e-6)


@pytest.mark.parametrize("name", QUICK)
def test_astra_sim_cases_within_a_thousandth(name):
    """ASTRA-sim 2.x (commit 518bd51, analytical congestion-unaware backend) simulated these;
    geosim's alpha-beta model with per-GPU NICs must agree within 0.1%."""
    case = case_named(name)
    cluster = astra_cluster(case.hosts, case.gpus_per_host)
    run = run_schedule(allreduce_schedule(cluster, case.algorithm), cluster, astra_params(), WORKLOAD, 1,
                       network=AlphaBetaNetwork)
    assert run.iteration_end[0] * 1e3 == pytest.approx(case.reference_ms, rel=1e-3)


# --- the symmetry fast path == the full simulation -----------------------------------------

@st.composite
def clusters(draw, symmetric: bool):
    hosts = draw(st.integers(1, 5))
    gpus = draw(st.integers(1, 4))
    if symmetric:
        intra, nic, gpu = draw(st.sampled_from(["pcie", "nvlink"])), "per-gpu", draw(st.sampled_from([A30, T4]))
        made = tuple(Host(f"h{i}", "dc", (gpu,) * gpus, intra, nic) for i in range(hosts))
        return Cluster("symmetric", made, ())
    made = []
    for i in range(hosts):
        n = draw(st.integers(1, 4))
        made.append(Host(f"h{i}", draw(st.sampled_from(["s0", "s1"])),
                         tuple(draw(st.sampled_from([A30, T4])) for _ in range(n)),
                         draw(st.sampled_from(["pcie", "nvlink"])), draw(st.sampled_from(["shared", "per-gpu"]))))
    links = (Link("s0", "s1", draw(st.sampled_from([1e-3, 20e-3])), draw(st.sampled_from([1e9, 10e9]))),)
    return Cluster("asymmetric", tuple(made), links)


def fast_and_full(cluster, op, algorithm, nbytes, late: dict, repeat: int):
    schedule = one_collective(cluster, op, nbytes, algorithm)
    for rank, seconds in late.items():
        if rank < len(schedule.devices):
            schedule.programs[rank].insert(0, Compute(0.0, "late", kind="overhead", seconds=seconds))
    if repeat > 1:  # the collective as combined buffers, one after another
        for rank, ops in schedule.programs.items():
            ops[-1] = Repeat((ops[-1],), repeat, ops[-1].group, ("buffers",))
    params = alpha_beta_params()
    fast = run_schedule(schedule, cluster, params, WORKLOAD, 2, network=AlphaBetaNetwork)
    full = run_schedule(schedule, cluster, params, WORKLOAD, 2, network=FULL)
    return fast, full


COLLECTIVE = dict(op=st.sampled_from(["allreduce", "reduce_scatter", "all_gather"]),
                  algorithm=st.sampled_from(["ring", "hierarchical", "tree"]),
                  nbytes=st.sampled_from([1e3, 4e6, 3e8]), repeat=st.sampled_from([1, 6]))


def assert_same(fast, full):
    assert fast.iteration_end == pytest.approx(full.iteration_end, rel=REL)
    assert fast.bytes_sent == pytest.approx(full.bytes_sent, rel=REL)
    assert fast.transfers == full.transfers


@PROPERTY
@given(cluster=clusters(symmetric=True), **COLLECTIVE)
def test_fast_path_equals_full_simulation_on_symmetric_clusters(cluster, op, algorithm, nbytes, repeat):
    fast, full = fast_and_full(cluster, op, algorithm, nbytes, {}, repeat)
    assert_same(fast, full)
    uniform_ring = algorithm == "hierarchical" or len(cluster.hosts) == 1 or cluster.num_gpus == len(cluster.hosts)
    if cluster.num_gpus > 2 and uniform_ring and not (algorithm == "tree" and op == "allreduce"):
        assert fast.events < full.events  # the fast path did run (a flat ring mixing bus and network steps cannot)


@PROPERTY
@given(cluster=clusters(symmetric=False), late=st.dictionaries(st.integers(0, 8), st.sampled_from([0.0, 1e-3, 0.5])),
       **COLLECTIVE)
def test_fast_path_equals_full_simulation_on_asymmetric_clusters(cluster, late, op, algorithm, nbytes, repeat):
    fast, full = fast_and_full(cluster, op, algorithm, nbytes, late, repeat)
    assert_same(fast, full)


@PROPERTY
@given(cluster=clusters(symmetric=True), late=st.dictionaries(st.integers(0, 8), st.sampled_from([1e-3, 0.5]),
                                                             min_size=1), **COLLECTIVE)
def test_fast_path_equals_full_simulation_when_ranks_arrive_apart(cluster, late, op, algorithm, nbytes, repeat):
    fast, full = fast_and_full(cluster, op, algorithm, nbytes, late, repeat)
    assert_same(fast, full)


def test_tcp_model_still_routes_shared_nics_over_one_link():
    cluster = lan_hosts(2, 2, nic="shared", intra="pcie")
    net = TCPNetwork(None, cluster, default_params(), devices_of(cluster))
    assert net.route(0, 2).hops[2:] == net.route(1, 3).hops[2:]
    cluster = lan_hosts(2, 2, nic="per-gpu", intra="pcie")
    net = TCPNetwork(None, cluster, default_params(), devices_of(cluster))
    assert not set(net.route(0, 2).hops) & set(net.route(1, 3).hops)
    assert math.isclose(net.route(0, 2).one_way_s, net.route(1, 3).one_way_s)
