"""The engine against hand-derived formulas, on tiny hand-built schedules.

With nothing contending and identical links (alpha = one-way latency + per-message
overhead, beta = 1 / min(line rate, streams x window / RTT)):
  p2p send               = handshake_rtts x RTT + alpha + n beta
  ring allreduce         = 2(p-1) alpha + 2(p-1)/p n beta
  ring reduce-scatter    = (p-1) alpha + (p-1)/p n beta     (all-gather alike)
  binomial-tree allreduce = 2 ceil(log2 p) (alpha + n beta)  (p a power of two)

Slow start is taken out of the picture by starting every connection at its full
window (initial_window_bytes = streams x window) and never restarting it
(slow_start_after_idle = False); a separate test checks the warm steady state of
the default transport too.

Over 400 lines: one file for the engine against hand-derived formulas, so each formula and its
case are read together.
"""

from __future__ import annotations

import math
from itertools import combinations

import pytest

from geosim.sim.compute import kernel_timer
from geosim.sim.engine import run_schedule
from geosim.sim.network.tcp import TCPNetwork
from geosim.sim.network.tcp import TCPNetwork
from dataclasses import replace

from geosim.inputs.params import default_params
from geosim.sim.network.tcp import Settings as TCPSettings
from geosim.inputs.scenario import gpu_catalog
from geosim.sim.schedule import Collective, Compute, Device, Recv, Schedule, Send
from geosim.inputs.specs import Cluster, Host, Link, Workload

REL = 1e-9
GPU = gpu_catalog()["A30"]  # PCIe gen 4
GPU3 = gpu_catalog()["RTX6000"]  # PCIe gen 3
WORKLOAD = Workload()
MIB = 1024**2

TCP_FIELDS = set(TCPSettings.__dataclass_fields__)  # what flat_params changes in the TCP model's settings


def flat_params(**changes):
    """Default params with slow start and NCCL's per-step flow control out of the way: every
    connection starts at its full window, a collective step costs alpha + n*beta."""
    p = default_params()
    tcp = {"collective_step_rtts": 0.0, **{k: changes.pop(k) for k in list(changes) if k in TCP_FIELDS}}
    p = p.with_values(**changes).with_network("tcp", slow_start_after_idle=False, **tcp)
    return p.with_network("tcp", initial_window_bytes=p.network("tcp").window_bytes * p.network("tcp").streams)


def pairwise_cluster(p: int, rtt_s: float, bandwidth_bps: float, gpus_per_host: int = 1, gpu=GPU) -> Cluster:
    """p hosts at p different sites, a direct link between every pair: every route is one link."""
    hosts = tuple(Host(f"h{i}", f"site{i}", (gpu,) * gpus_per_host) for i in range(p))
    links = tuple(Link(f"h{i}", f"h{j}", rtt_s, bandwidth_bps) for i, j in combinations(range(p), 2))
    return Cluster("pairwise", hosts, links)


def lan_cluster(p: int, gpu=GPU) -> Cluster:
    """p hosts at one site, no links: every route is host -> site switch -> host."""
    return Cluster("lan", tuple(Host(f"h{i}", "site", (gpu,)) for i in range(p)), ())


def devices(cluster: Cluster) -> list[Device]:
    out = []
    for host in cluster.hosts:
        for i, gpu in enumerate(host.gpus):
            out.append(Device(len(out), host.name, i, gpu))
    return out


def schedule_of(cluster: Cluster, programs: dict[int, list]) -> Schedule:
    devs = devices(cluster)
    full = {d.rank: programs.get(d.rank, []) for d in devs}
    return Schedule("hand", devs, full, {d.rank: 0.0 for d in devs})


def collective_schedule(cluster: Cluster, op: str, nbytes: float, algorithm: str, group=None) -> Schedule:
    devs = devices(cluster)
    group = tuple(d.rank for d in devs) if group is None else tuple(group)
    coll = Collective(op, group, nbytes, algorithm, ("c",), op)
    return schedule_of(cluster, {r: [coll] for r in group})


def pcie_rate(gpu, params) -> float:
    return params.pcie_bps[gpu.pcie_gen] / 8


def wan_alpha_beta(params, link_rtt_s: float, link_bandwidth_bps: float, gpu=GPU):
    """alpha, beta and RTT of a route GPU -PCIe- host -link- host -PCIe- GPU, derived by hand."""
    one_way = params.intra_host_latency_s + link_rtt_s / 2  # the GPU's PCIe hop, then the link
    rtt = 2 * one_way
    line_rate = min(pcie_rate(gpu, params), link_bandwidth_bps / 8)
    socket_rate = params.network("tcp").streams * params.network("tcp").stream_rate_bps / 8
    rate = min(line_rate, params.network("tcp").streams * params.network("tcp").window_bytes / rtt, socket_rate)
    return one_way + params.network("tcp").per_message_overhead_s, 1.0 / rate, rtt


def lan_alpha_beta(params, gpu=GPU):
    """Same-site hosts: host -> site switch -> host, a quarter of the LAN RTT per edge."""
    one_way = params.intra_host_latency_s + 2 * params.lan_rtt_s / 4
    rtt = 2 * one_way
    line_rate = min(pcie_rate(gpu, params), params.lan_bandwidth_bps / 8)
    socket_rate = params.network("tcp").streams * params.network("tcp").stream_rate_bps / 8
    rate = min(line_rate, params.network("tcp").streams * params.network("tcp").window_bytes / rtt, socket_rate)
    return one_way + params.network("tcp").per_message_overhead_s, 1.0 / rate, rtt


def simulate(schedule, cluster, params, iterations=1, **kw):
    kw.setdefault("network", TCPNetwork)
    return run_schedule(schedule, cluster, params, WORKLOAD, iterations=iterations, **kw)


# Two regimes: line-rate limited (short RTT, the window covers the BDP) and window-limited (long RTT).
REGIMES = {
    "line-limited": dict(rtt_s=0.5e-3, bandwidth_bps=10e9),
    "window-limited": dict(rtt_s=80e-3, bandwidth_bps=10e9),
}


@pytest.mark.parametrize("regime", REGIMES)
def test_hand_alpha_beta_matches_the_route(regime):
    """The hand derivation above is the route the network builds (one link, no detour)."""
    params = flat_params()
    cfg = REGIMES[regime]
    cluster = pairwise_cluster(3, **cfg)
    net = TCPNetwork(None, cluster, params, devices(cluster))
    alpha, beta, rtt = wan_alpha_beta(params, cfg["rtt_s"], cfg["bandwidth_bps"])
    route = net.route(0, 2)
    assert route.name == "h0->h2"
    assert route.tcp
    assert route.rtt_s == pytest.approx(rtt, rel=REL)
    assert route.one_way_s + params.network("tcp").per_message_overhead_s == pytest.approx(alpha, rel=REL)
    assert 1 / min(route.line_rate, route.window_bytes / route.rtt_s, route.stream_rate) == pytest.approx(beta, rel=REL)
    if regime == "window-limited":
        assert params.network("tcp").window_bytes / rtt < cfg["bandwidth_bps"] / 8  # really limited by the window
    else:
        assert params.network("tcp").window_bytes / rtt > cfg["bandwidth_bps"] / 8


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("handshake", [0.0, 1.0, 2.5])
@pytest.mark.parametrize("nbytes", [1.0, 64 * 1024, 100 * MIB])
def test_p2p_send(regime, handshake, nbytes):
    params = flat_params(p2p_handshake_rtts=handshake)
    cfg = REGIMES[regime]
    cluster = pairwise_cluster(2, **cfg)
    alpha, beta, rtt = wan_alpha_beta(params, cfg["rtt_s"], cfg["bandwidth_bps"])
    sched = schedule_of(cluster, {0: [Send(1, nbytes, ("x",))], 1: [Recv(0, ("x",))]})
    result = simulate(sched, cluster, params)
    assert result.iteration_end[0] == pytest.approx(handshake * rtt + alpha + nbytes * beta, rel=REL)
    assert result.bytes_sent == nbytes
    assert result.transfers == 1


def test_collective_step_pays_no_handshake():
    params = flat_params(p2p_handshake_rtts=3.0)
    cluster = pairwise_cluster(2, rtt_s=20e-3, bandwidth_bps=10e9)
    alpha, beta, _ = wan_alpha_beta(params, 20e-3, 10e9)
    n = 8 * MIB
    sched = schedule_of(cluster, {0: [Send(1, n, ("x",), p2p=False)], 1: [Recv(0, ("x",))]})
    assert simulate(sched, cluster, params).iteration_end[0] == pytest.approx(alpha + n * beta, rel=REL)


@pytest.mark.parametrize("step_rtts", [0.5, 1.0, 2.0])
def test_collective_step_waits_for_flow_control(step_rtts):
    """Each ring step over TCP waits step_rtts round trips for the receiver's credit:
    ring allreduce = 2(p-1)(alpha + k*RTT) + 2(p-1)/p * n * beta."""
    params = flat_params(collective_step_rtts=step_rtts)
    p, n = 4, 64 * MIB
    cluster = pairwise_cluster(p, rtt_s=20e-3, bandwidth_bps=10e9)
    alpha, beta, rtt = wan_alpha_beta(params, 20e-3, 10e9)
    result = simulate(collective_schedule(cluster, "allreduce", n, "ring"), cluster, params)
    expected = 2 * (p - 1) * (alpha + step_rtts * rtt) + 2 * (p - 1) / p * n * beta
    assert result.iteration_end[0] == pytest.approx(expected, rel=REL)


def test_a_link_overrides_the_flow_control_round_trips():
    params = flat_params(collective_step_rtts=1.0)
    cluster = pairwise_cluster(2, rtt_s=20e-3, bandwidth_bps=10e9)
    cluster = Cluster(cluster.name, cluster.hosts, tuple(replace(l, step_rtts=3.0) for l in cluster.links))
    alpha, beta, rtt = wan_alpha_beta(params, 20e-3, 10e9)
    n = 8 * MIB
    sched = schedule_of(cluster, {0: [Send(1, n, ("x",), p2p=False)], 1: [Recv(0, ("x",))]})
    assert simulate(sched, cluster, params).iteration_end[0] == pytest.approx(3.0 * rtt + alpha + n * beta, rel=REL)


def test_p2p_inside_one_host_is_pcie_only():
    params = flat_params()
    cluster = Cluster("one", (Host("h", "s", (GPU3, GPU3)),), ())
    n = 50 * MIB
    sched = schedule_of(cluster, {0: [Send(1, n, ("x",))], 1: [Recv(0, ("x",))]})
    lat = params.intra_host_latency_s
    expected = params.network("tcp").p2p_handshake_rtts * 2 * lat + lat + params.network("tcp").per_message_overhead_s + n / pcie_rate(GPU3, params)
    assert simulate(sched, cluster, params).iteration_end[0] == pytest.approx(expected, rel=REL)


def test_p2p_over_nvlink():
    params = flat_params()
    cluster = Cluster("one", (Host("h", "s", (GPU, GPU), intra_host="nvlink"),), ())
    n = 50 * MIB
    sched = schedule_of(cluster, {0: [Send(1, n, ("x",))], 1: [Recv(0, ("x",))]})
    lat = params.intra_host_latency_s
    expected = (params.network("tcp").p2p_handshake_rtts * 2 * lat + lat + params.network("tcp").per_message_overhead_s
                + n / (params.nvlink_bps / 8))
    assert simulate(sched, cluster, params).iteration_end[0] == pytest.approx(expected, rel=REL)


def test_p2p_after_compute_starts_when_the_compute_ends():
    params = flat_params()
    cluster = pairwise_cluster(2, rtt_s=20e-3, bandwidth_bps=10e9)
    alpha, beta, rtt = wan_alpha_beta(params, 20e-3, 10e9)
    flops = 3e12
    # a Compute op without Work runs at the flat rate: the peak x the GPU's GEMM fraction (its generation's)
    fraction = kernel_timer(params).constants_for(GPU).gemm_fraction
    seconds = flops / (GPU.peak_tflops(WORKLOAD.precision) * 1e12 * fraction)
    n = MIB
    sched = schedule_of(cluster, {0: [Compute(flops, "f"), Send(1, n, ("x",))], 1: [Recv(0, ("x",))]})
    expected = seconds + params.network("tcp").p2p_handshake_rtts * rtt + alpha + n * beta
    assert simulate(sched, cluster, params).iteration_end[0] == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("nbytes", [4 * 1024, 256 * MIB])
def test_ring_allreduce(regime, p, nbytes):
    params = flat_params()
    cfg = REGIMES[regime]
    cluster = pairwise_cluster(p, **cfg)
    alpha, beta, _ = wan_alpha_beta(params, cfg["rtt_s"], cfg["bandwidth_bps"])
    result = simulate(collective_schedule(cluster, "allreduce", nbytes, "ring"), cluster, params)
    expected = 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta
    assert result.iteration_end[0] == pytest.approx(expected, rel=REL)
    # every rank sends 2(p-1) chunks of n/p
    assert result.bytes_sent == pytest.approx(p * 2 * (p - 1) * nbytes / p, rel=REL)
    assert result.transfers == p * 2 * (p - 1)


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("p", [2, 3, 4, 7])
def test_ring_reduce_scatter_and_all_gather(op, regime, p):
    params = flat_params()
    cfg = REGIMES[regime]
    cluster = pairwise_cluster(p, **cfg)
    alpha, beta, _ = wan_alpha_beta(params, cfg["rtt_s"], cfg["bandwidth_bps"])
    nbytes = 64 * MIB
    result = simulate(collective_schedule(cluster, op, nbytes, "ring"), cluster, params)
    expected = (p - 1) * alpha + (p - 1) / p * nbytes * beta
    assert result.iteration_end[0] == pytest.approx(expected, rel=REL)
    assert result.bytes_sent == pytest.approx((p - 1) * nbytes, rel=REL)


@pytest.mark.parametrize("p", [2, 3, 6])
def test_ring_allreduce_over_a_lan(p):
    """Same-site hosts without links meet at their site's switch: the LAN edges set alpha and beta."""
    params = flat_params()
    cluster = lan_cluster(p)
    net = TCPNetwork(None, cluster, params, devices(cluster))
    assert net.route(0, 1).name == "h0->site:site / site:site->h1"
    alpha, beta, _ = lan_alpha_beta(params)
    nbytes = 32 * MIB
    result = simulate(collective_schedule(cluster, "allreduce", nbytes, "ring"), cluster, params)
    assert result.iteration_end[0] == pytest.approx(2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta, rel=REL)


@pytest.mark.parametrize("p", [2, 4])
def test_ring_allreduce_inside_one_host(p):
    params = flat_params()
    cluster = Cluster("one", (Host("h", "s", (GPU3,) * p),), ())
    nbytes = 32 * MIB
    alpha = params.intra_host_latency_s + params.network("tcp").per_message_overhead_s
    beta = 1 / pcie_rate(GPU3, params)
    result = simulate(collective_schedule(cluster, "allreduce", nbytes, "ring"), cluster, params)
    assert result.iteration_end[0] == pytest.approx(2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta, rel=REL)


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("nbytes", [4 * 1024, 64 * MIB])
def test_tree_allreduce(regime, p, nbytes):
    params = flat_params()
    cfg = REGIMES[regime]
    cluster = pairwise_cluster(p, **cfg)
    alpha, beta, _ = wan_alpha_beta(params, cfg["rtt_s"], cfg["bandwidth_bps"])
    result = simulate(collective_schedule(cluster, "allreduce", nbytes, "tree"), cluster, params)
    assert result.iteration_end[0] == pytest.approx(2 * math.ceil(math.log2(p)) * (alpha + nbytes * beta), rel=REL)
    # a tree moves the whole buffer over each of its p-1 edges, up and down
    assert result.bytes_sent == pytest.approx(2 * (p - 1) * nbytes, rel=REL)


@pytest.mark.parametrize("p", [3, 5, 6, 7])
def test_tree_allreduce_not_a_power_of_two_is_within_the_bound(p):
    params = flat_params()
    cluster = pairwise_cluster(p, rtt_s=30e-3, bandwidth_bps=10e9)
    alpha, beta, _ = wan_alpha_beta(params, 30e-3, 10e9)
    nbytes = 16 * MIB
    result = simulate(collective_schedule(cluster, "allreduce", nbytes, "tree"), cluster, params)
    rounds = math.ceil(math.log2(p))
    assert result.iteration_end[0] <= 2 * rounds * (alpha + nbytes * beta) * (1 + REL)
    assert result.iteration_end[0] >= 2 * (rounds - 1) * (alpha + nbytes * beta) * (1 - REL)
    assert result.bytes_sent == pytest.approx(2 * (p - 1) * nbytes, rel=REL)


def test_tree_reduce_scatter_falls_back_to_the_ring():
    params = flat_params()
    cluster = pairwise_cluster(4, rtt_s=30e-3, bandwidth_bps=10e9)
    nbytes = 16 * MIB
    tree = simulate(collective_schedule(cluster, "reduce_scatter", nbytes, "tree"), cluster, params)
    ring = simulate(collective_schedule(cluster, "reduce_scatter", nbytes, "ring"), cluster, params)
    assert tree.iteration_end == ring.iteration_end


def test_ring_beats_tree_for_large_buffers_and_tree_beats_ring_for_small_ones():
    params = flat_params()
    cluster = pairwise_cluster(8, rtt_s=50e-3, bandwidth_bps=10e9)

    def t(n, algorithm):
        return simulate(collective_schedule(cluster, "allreduce", n, algorithm), cluster, params).iteration_end[0]

    assert t(512 * MIB, "ring") < t(512 * MIB, "tree")
    assert t(1024, "tree") < t(1024, "ring")


def test_steady_state_iteration_matches_the_formula_with_the_default_transport():
    """Default transport (slow start after idle on): once the window has opened and the
    connection is never idle longer than an RTO, the next iteration is the formula."""
    params = default_params()
    p, rtt_s, bw, nbytes = 4, 30e-3, 10e9, 256 * MIB
    cluster = pairwise_cluster(p, rtt_s, bw)
    alpha, beta, rtt = wan_alpha_beta(params, rtt_s, bw)
    result = simulate(collective_schedule(cluster, "allreduce", nbytes, "ring"), cluster, params, iterations=3)
    alpha += params.network("tcp").collective_step_rtts * rtt  # NCCL's flow control, on by default
    expected = 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta
    assert result.iteration_time(0) > expected  # cold: slow start from the initial window
    assert result.iteration_time(1) == pytest.approx(expected, rel=REL)
    assert result.iteration_time(2) == pytest.approx(expected, rel=REL)


def test_slow_start_after_idle_restarts_the_window():
    """A connection idle for longer than RTT + idle_restart goes back towards the initial window."""
    rtt_s, n = 40e-3, 64 * MIB
    cluster = pairwise_cluster(2, rtt_s, 10e9)
    idle_flops = 1e15  # a long compute between the sends: far longer than the RTO
    program = {0: [Compute(idle_flops, "idle"), Send(1, n, ("x",), p2p=False)], 1: [Recv(0, ("x",))]}
    sched = schedule_of(cluster, program)
    warm = simulate(sched, cluster, default_params().with_network("tcp", slow_start_after_idle=False), iterations=2)
    cold = simulate(sched, cluster, default_params(), iterations=2)
    assert cold.iteration_end[0] == warm.iteration_end[0]  # the first send starts cold either way
    assert cold.iteration_time(1) > warm.iteration_time(1)


@pytest.mark.parametrize("h,g", [(2, 2), (2, 4), (3, 2), (4, 4)])
def test_hierarchical_allreduce_sends_one_gth_across_hosts(h, g):
    """Hierarchical: each GPU sends 2(h-1)/h of n/g across hosts, i.e. 1/g of what the flat
    ring's GPU at a host boundary sends; in all 2(h-1) n cross the WAN instead of about 2 h n."""
    params = flat_params()
    cluster = pairwise_cluster(h, rtt_s=30e-3, bandwidth_bps=10e9, gpus_per_host=g)
    nbytes = 64 * MIB

    def wan_bytes(algorithm):
        result = simulate(collective_schedule(cluster, "allreduce", nbytes, algorithm), cluster, params, trace=True)
        rows = [r for r in result.trace if r[0] == "link"]
        assert sum(r[5] for r in rows) == pytest.approx(result.bytes_sent, rel=REL)
        return sum(r[5] for r in rows if not r[1].endswith(" pcie")), result

    hier, hier_result = wan_bytes("hierarchical")
    flat, _ = wan_bytes("ring")
    p = h * g
    assert hier == pytest.approx(2 * (h - 1) * nbytes, rel=REL)
    assert flat == pytest.approx(h * 2 * (p - 1) * nbytes / p, rel=REL)
    assert hier < flat
    # per GPU: 2(h-1)/h x n/g over the WAN
    per_gpu = 2 * (h - 1) / h * nbytes / g
    assert hier / p == pytest.approx(per_gpu, rel=REL)
    # and inside each host, a reduce-scatter plus an all-gather of the full buffer
    intra = sum(r[5] for r in hier_result.trace if r[0] == "link" and r[1].endswith(" pcie"))
    assert intra == pytest.approx(p * 2 * (g - 1) * nbytes / g, rel=REL)


def test_hierarchical_with_one_gpu_per_host_is_the_ring():
    params = flat_params()
    cluster = pairwise_cluster(4, rtt_s=30e-3, bandwidth_bps=10e9)
    nbytes = 64 * MIB
    hier = simulate(collective_schedule(cluster, "allreduce", nbytes, "hierarchical"), cluster, params)
    ring = simulate(collective_schedule(cluster, "allreduce", nbytes, "ring"), cluster, params)
    assert hier.iteration_end[0] == pytest.approx(ring.iteration_end[0], rel=REL)


def test_hierarchical_beats_the_flat_ring_over_a_slow_wan():
    params = flat_params()
    cluster = pairwise_cluster(2, rtt_s=80e-3, bandwidth_bps=1e9, gpus_per_host=4)
    nbytes = 256 * MIB

    def t(algorithm):
        return simulate(collective_schedule(cluster, "allreduce", nbytes, algorithm), cluster, params).iteration_end[0]

    assert t("hierarchical") < t("ring")


def test_contention_two_flows_share_a_link():
    """Two sends over the same link direction at once: the second waits for the first's serialization."""
    params = flat_params()
    cluster = pairwise_cluster(2, rtt_s=0.5e-3, bandwidth_bps=1e9, gpus_per_host=2)
    alpha, beta, _ = wan_alpha_beta(params, 0.5e-3, 1e9)
    n = 64 * MIB
    one = schedule_of(cluster, {0: [Send(2, n, ("a",), p2p=False)], 2: [Recv(0, ("a",))]})
    two = schedule_of(cluster, {0: [Send(2, n, ("a",), p2p=False)], 2: [Recv(0, ("a",))],
                                1: [Send(3, n, ("b",), p2p=False)], 3: [Recv(1, ("b",))]})
    t1 = simulate(one, cluster, params).iteration_end[0]
    t2 = simulate(two, cluster, params).iteration_end[0]
    assert t1 == pytest.approx(alpha + n * beta, rel=REL)
    assert t2 == pytest.approx(alpha + 2 * n * beta, rel=REL)  # line-limited: queued behind the first


def test_unmatched_send_raises():
    params = flat_params()
    cluster = pairwise_cluster(2, rtt_s=1e-3, bandwidth_bps=1e9)
    sched = schedule_of(cluster, {0: [Send(1, 10, ("x",))], 1: []})
    with pytest.raises(RuntimeError, match="unmatched"):
        simulate(sched, cluster, params)


def test_an_explicit_link_between_same_site_hosts_is_their_path():
    """TACC-TACC's two VMs share a site; the scenario's link between them is still the path,
    so an RTT what-if on it takes effect even where the site LAN would be quicker."""
    params = flat_params()
    hosts = (Host("a", "site", (GPU,)), Host("b", "site", (GPU,)))
    for rtt_s in (0.1e-3, 50e-3):
        cluster = Cluster("same-site", hosts, (Link("a", "b", rtt_s, 10e9),))
        route = TCPNetwork(None, cluster, params, devices(cluster)).route(0, 1)
        assert route.name == "a->b"
        assert route.rtt_s == pytest.approx(rtt_s + 2 * params.intra_host_latency_s, rel=REL)


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("p", [2, 3, 5])
def test_pairwise_all_to_all(regime, p):
    """The pairwise exchange over a full mesh of identical links: p-1 steps, each rank sending its 1/p
    slice for the rank k places on and waiting for the one from k places back, so
    all-to-all = (p-1)(alpha + n/p beta); every rank sends (p-1)/p of its buffer."""
    params = flat_params()
    cfg = REGIMES[regime]
    cluster = pairwise_cluster(p, **cfg)
    alpha, beta, _ = wan_alpha_beta(params, cfg["rtt_s"], cfg["bandwidth_bps"])
    nbytes = 48 * MIB
    result = simulate(collective_schedule(cluster, "all_to_all", nbytes, "pairwise"), cluster, params)
    assert result.iteration_end[0] == pytest.approx((p - 1) * (alpha + nbytes / p * beta), rel=REL)
    assert result.bytes_sent == pytest.approx((p - 1) * nbytes, rel=REL)
    assert result.transfers == p * (p - 1)


def test_all_to_all_sends_to_every_peer_once():
    """Rank i's k-th step goes to i+k and comes from i-k: each ordered pair exactly once."""
    from geosim.sim import collectives

    group = (4, 7, 1, 9)
    pairs = [(r, op.dst) for r in group
             for op in collectives.expand(Collective("all_to_all", group, 8.0, "pairwise", ("t",)), r, ("h",) * 10)
             if type(op) is Send]
    assert sorted(pairs) == sorted((a, b) for a in group for b in group if a != b)
