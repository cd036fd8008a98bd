"""The fabric network backend (geosim/sim/network/fabric.py): NVLink and RDMA routes by their transport,
NCCL's tuning model for their collectives, the TCP model's answers to the bit where neither runs, and
the network seam's optional protocols."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from geosim.inputs.case import Case
from geosim.base.errors import GeosimError
from geosim.inputs.params import default_params, load_params
from geosim.predict import predict
from geosim.inputs.scenario import get_model, gpu_catalog, load_scenario
from geosim.sim.engine import run_schedule
from geosim.sim.network import CountingNetwork, capabilities, network_backend
from geosim.sim.network import _nccl
from geosim.sim.network.fabric import FabricNetwork, uses_rdma
from geosim.sim.network.ideal import IdealNetwork
from geosim.sim.network.tcp import TCPNetwork
from geosim.sim.schedule import Collective, Device, Schedule
from geosim.inputs.specs import Cluster, Host, Workload
from geosim.studies.nccl_tests import check_all, check_row, published_rows, summary

H100 = gpu_catalog()["H100"]
WORKLOAD = Workload()
GB = 1e9


def nodes(hosts: int, gpus: int, nic_gbps: float = 400.0, intra: str = "nvlink", transport: str = "rdma") -> Cluster:
    return Cluster("dc", tuple(Host(f"n{i}", "dc", (H100,) * gpus, intra, "per-gpu", transport, nic_gbps * 1e9)
                               for i in range(hosts)), ())


def devices_of(cluster: Cluster) -> list[Device]:
    return [Device(len([1 for h in cluster.hosts[:k] for _ in h.gpus]) + i, host.name, i, gpu)
            for k, host in enumerate(cluster.hosts) for i, gpu in enumerate(host.gpus)]


def one_collective(cluster: Cluster, op: str, nbytes: float):
    devices = devices_of(cluster)
    coll = Collective(op, tuple(d.rank for d in devices), nbytes, "ring", ("c",))
    return coll, Schedule("one", devices, {d.rank: [coll] for d in devices}, {})


# --- NCCL's tuning model, by hand --------------------------------------------------------------------

def test_ring_simple_on_one_nvlink_host_is_nccls_latency_plus_bus_bandwidth():
    """8 ranks, one host, 370 GB/s a GPU, 8 GiB all-reduce: ring/Simple; latency 8.4 us + 14 steps x 3.4 us
    (NVLink's per-step Simple latency), algorithm bandwidth = bus bandwidth x n / 2(n-1)."""
    fabric = _nccl.Fabric(ranks=8, nodes=1, intra_bps=370 * GB, inter_bps=0.0)
    n = 8 * 2**30
    choice = _nccl.choose("allreduce", n, fabric)
    assert (choice.algorithm, choice.protocol) == ("ring", "Simple")
    latency = (8.4 + 14 * 3.4) * 1e-6
    assert choice.seconds == pytest.approx(latency + n / (370 * GB * 8 / 14), rel=1e-12)
    assert _nccl.bus_bandwidth("allreduce", n, 8, choice.seconds) == pytest.approx(370 * GB, rel=2e-3)


def test_a_multi_host_ring_pays_the_network_latency_on_its_steps_across_hosts_and_the_plateau():
    """2 hosts x 4: 2(n-1) = 14 steps of which 2(nodes-1) = 2 cross the network (9.6 us each, Simple), the
    rest NVLink's 3.4 us; past n/16 x 64 KiB the ring's latency is 1.9 times that (NCCL's plateau)."""
    fabric = _nccl.Fabric(ranks=8, nodes=2, intra_bps=370 * GB, inter_bps=95 * GB)
    ring = {c.protocol: c for c in _nccl.choices("allreduce", 2**30, fabric) if c.algorithm == "ring"}
    assert ring["Simple"].latency_s == pytest.approx((8.4 + 12 * 3.4 + 2 * 9.6) * 1.9e-6, rel=1e-12)
    assert ring["Simple"].bandwidth == pytest.approx(95 * GB * 8 / 14)  # the hosts' NICs together are the stage
    assert ring["LL"].bandwidth == pytest.approx(95 * GB / 4 * 8 / 14)  # LL: 8 bytes of every 16, a quarter in NCCL
    assert ring["LL128"].bandwidth == pytest.approx(95 * GB * 120 / 128 * 8 / 14)


def test_the_tree_is_the_all_reduces_alone_and_moves_every_byte_twice():
    fabric = _nccl.Fabric(ranks=32, nodes=4, intra_bps=370 * GB, inter_bps=380 * GB)
    assert {c.algorithm for c in _nccl.choices("all_gather", 2**20, fabric)} == {"ring"}
    assert {c.algorithm for c in _nccl.choices("reduce_scatter", 2**20, fabric)} == {"ring"}
    tree = [c for c in _nccl.choices("allreduce", 2**30, fabric) if c.algorithm == "tree" and c.protocol == "Simple"][0]
    # beyond two hosts: min(0.9 x bandwidth, 80 GB/s) of bus bandwidth, half of it algorithm bandwidth
    assert tree.bandwidth == pytest.approx(80 * GB * 0.5)
    # latency: 2 x ((ranks a host - 1) x NVLink's + log2(hosts) x the network's), Simple's tree rows
    assert tree.latency_s == pytest.approx(2 * (7 * 28 + 2 * 50) * 1e-6)


@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(["allreduce", "all_gather", "reduce_scatter"]), hosts=st.integers(1, 64),
       per_host=st.integers(1, 8), size=st.floats(1e3, 1e10), intra=st.floats(10, 900), inter=st.floats(1, 900),
       more=st.floats(1.0, 10.0))
def test_more_bandwidth_is_never_slower(op, hosts, per_host, size, intra, inter, more):
    ranks = hosts * per_host
    if ranks < 2:
        return
    base = _nccl.Fabric(ranks, hosts, intra * GB, inter * GB if hosts > 1 else 0.0)
    faster = _nccl.Fabric(ranks, hosts, intra * GB * more, inter * GB * more if hosts > 1 else 0.0)
    assert _nccl.choose(op, size, faster).seconds <= _nccl.choose(op, size, base).seconds * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(per_host=st.integers(2, 8), exponent=st.integers(30, 33))
def test_on_one_host_large_all_reduces_run_the_ring(per_host, exponent):
    """NCCL's model never picks its tree for a large buffer on one NVLink host: the tree's bus bandwidth
    is capped (110 GB/s) and counts half, where the ring has every GPU's NVLink."""
    choice = _nccl.choose("allreduce", 2.0**exponent, _nccl.Fabric(per_host, 1, 370 * GB, 0.0))
    assert choice.algorithm == "ring"


# --- the model in the engine ---------------------------------------------------------------------------

def test_the_engine_times_a_direct_collective_by_nccls_model():
    cluster = nodes(2, 8)
    coll, schedule = one_collective(cluster, "allreduce", 2**30)
    params = default_params()
    run = run_schedule(schedule, cluster, params, WORKLOAD, iterations=1, network=FabricNetwork)
    net = FabricNetwork(None, cluster, params, schedule.devices)
    expected = net.nccl_choice(coll)
    f = params.network("fabric")
    # the rails: 8 NICs x 400 Gbit/s x the RDMA efficiency a host; a GPU's NVLink x NVLink's efficiency
    fabric = net._communicator(coll)[0]
    assert fabric.inter_bps == pytest.approx(8 * 50 * GB * f.rdma_efficiency)
    assert fabric.intra_bps == pytest.approx(450 * GB * f.nvlink_efficiency)
    assert run.iteration_time(0) == pytest.approx(expected.seconds, rel=1e-12)
    assert run.bytes_sent == pytest.approx(16 * 2**30 * 2 * 15 / 16)


def test_a_send_over_rdma_has_no_window_and_pays_microseconds():
    cluster = nodes(2, 1, nic_gbps=200)
    params = default_params()
    net = FabricNetwork(None, cluster, params, devices_of(cluster))
    f = params.network("fabric")
    nbytes = 2**30
    arrival = net.send_at(0, 1, nbytes, True, "x", 0.0)
    assert arrival == pytest.approx(f.rdma_latency_s + nbytes / (25 * GB * f.rdma_efficiency), rel=1e-12)
    tcp = TCPNetwork(None, nodes(2, 1, nic_gbps=200, transport="tcp"), params, devices_of(cluster))
    assert tcp.send_at(0, 1, nbytes, True, "x", 0.0) > 2 * arrival  # a socket's window and rendezvous


def test_a_socket_on_the_way_keeps_the_tcp_steps():
    """One host of three reaches its site over TCP: the collective runs as the TCP model's steps."""
    cluster = nodes(3, 2)
    cluster = Cluster("mixed", cluster.hosts[:2] + (Host("n2", "dc", (H100,) * 2, "nvlink", "per-gpu", "tcp",
                                                         400e9),), ())
    coll, schedule = one_collective(cluster, "allreduce", 2**26)
    net = FabricNetwork(None, cluster, default_params(), schedule.devices)
    assert net.nccl_choice(coll) is None
    assert net.is_direct(0, 1) and net.is_direct(0, 2) and not net.is_direct(0, 4)


def test_the_fabric_model_is_the_tcp_model_to_the_bit_on_the_studys_slices():
    scenario = load_scenario("utah-gpn")
    assert not uses_rdma(scenario.cluster)
    for technique in ("data", "pipeshard", "shard"):
        base = Case(scenario.cluster, get_model("gpt2m"), scenario.workload(epochs=1), load_params(), network="tcp")
        tcp, fabric = predict(base, technique), predict(base.with_(network="fabric"), technique)
        assert tcp.total_time_s == fabric.total_time_s and tcp.iteration_time_s == fabric.iteration_time_s


def test_an_nvlink_host_exposes_less_communication_on_the_fabric_model():
    """One 8-GPU NVLink host (the issue's case): the TCP model's per-message costs made its all-reduce
    slower than alpha-beta's; the fabric model prices it by NCCL's model on NVLink."""
    cluster = Cluster("one", (Host("n0", "dc", (H100,) * 8, "nvlink"),), ())
    case = Case(cluster, get_model("gpt2l"), Workload(global_batch=64, microbatches=1, epochs=1), load_params())
    comm = {net: predict(case.with_(network=net), "data").iteration_breakdown.exposed_comm_s
            for net in ("tcp", "fabric", "alpha-beta")}
    assert comm["fabric"] < comm["tcp"] and comm["fabric"] <= comm["alpha-beta"] * 1.5


# --- the published nccl-tests table ------------------------------------------------------------------

def test_published_nccl_tests_bus_bandwidth_within_the_issues_bounds():
    checked = check_all()
    assert len(checked) >= 10 and all(c.row.source.startswith("https://") for c in checked)
    median, worst = summary(checked)
    assert median <= 0.15 and worst <= 0.40, [(c.row.id, round(c.error, 3)) for c in checked]
    assert {c.row.op for c in checked} == {"allreduce", "all_gather", "reduce_scatter"}


def test_each_size_on_one_communicator_gets_nccls_choice_for_its_own_bytes():
    """NCCL's choice is kept per (op, bytes, communicator): one group's all-reduces of several sizes in one
    run, again and again, each end the previous one's plus its own size's choice, to the bit; the sizes
    span LL, LL128 and Simple, and a forced ring where the tree would win, so a choice kept under a key
    too coarse would price some with another size's protocol."""
    cluster = nodes(2, 8)
    devices = devices_of(cluster)
    group = tuple(d.rank for d in devices)
    sizes = [2**10, 2**30, 2**20, 2**10, 2**30, 2**16]
    params = default_params()
    for forced in (None, "ring"):
        program = [Collective("allreduce", group, n, "ring", ("c", i)) for i, n in enumerate(sizes)]
        schedule = Schedule("sizes", devices, {d.rank: program for d in devices}, {})
        run = run_schedule(schedule, cluster, params, WORKLOAD, iterations=1,
                           network=lambda *a, **k: FabricNetwork(*a, **k, algorithm=forced))
        net = FabricNetwork(None, cluster, params, devices, algorithm=forced)
        fabric = net._communicator(program[0])[0]
        chosen = [_nccl.choose("allreduce", n, fabric, forced) for n in sizes]
        assert len({(c.algorithm, c.protocol) for c in chosen}) >= 2
        end = 0.0
        for choice in chosen:
            end = end + choice.seconds
        assert run.iteration_end[0] == end


def test_a_forced_ring_is_honoured_where_ncccls_tree_would_win():
    row = next(r for r in published_rows() if r.id == "h100-2x4-ib200-1G")
    assert check_row(row).algorithm == "ring"


# --- scenario keys and the seam ----------------------------------------------------------------------

def test_scenario_transport_keys_and_their_mistakes(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[[hosts]]\nname = "a"\nsite = "x"\ngpus = ["H100"]\ntransport = "rdma"\nnic_gbps = 400\n'
                    '[[hosts]]\nname = "b"\nsite = "y"\ngpus = ["H100"]\ntransport = "rdma"\n'
                    '[[links]]\nbetween = ["x", "y"]\nbandwidth_gbps = 100\nrtt_ms = 0.01\ntransport = "rdma"\n')
    cluster = load_scenario(path).cluster
    assert cluster.hosts[0].transport == "rdma" and cluster.hosts[0].nic_bps == 400e9
    assert cluster.links[0].transport == "rdma" and uses_rdma(cluster)
    path.write_text('[[hosts]]\nname = "a"\nsite = "x"\ngpus = ["H100"]\ntransport = "infiniband"\n')
    with pytest.raises(GeosimError, match="must be tcp or rdma") as err:
        load_scenario(path)
    assert err.value.key == "hosts[0].transport"


def test_a_model_that_implements_send_at_alone_runs_and_gets_the_defaults():
    class Constant(CountingNetwork):  # one method: the seam's one requirement
        def send_at(self, src, dst, nbytes, p2p, label, now):
            self.count(src, nbytes)
            return now + 1e-3

    cluster = nodes(1, 4)
    coll, schedule = one_collective(cluster, "allreduce", 1e6)
    caps = capabilities(Constant(None, cluster, default_params(), schedule.devices))
    assert (caps.may_shortcut(coll), caps.may_precompute(coll), caps.symmetric_under(None),
            caps.least_delay_s(0, 1, 1.0, True)) == (False, False, False, 0.0)
    run = run_schedule(schedule, cluster, default_params(), WORKLOAD, iterations=1, network=Constant)
    assert run.iteration_time(0) == pytest.approx(6 * 1e-3)  # 2(p-1) ring steps of a millisecond


def test_capabilities_are_the_models_own_methods_where_it_has_the_protocol():
    cluster = nodes(1, 2)
    devices = devices_of(cluster)
    tcp = capabilities(network_backend("tcp")(None, cluster, default_params(), devices))
    assert tcp.groups_may_move and tcp.least_delay_s.__self__.__class__ is TCPNetwork
    ideal = capabilities(IdealNetwork(None, cluster, default_params(), devices))
    assert ideal.symmetric_under(None) is True and ideal.may_precompute.__name__ == "_no"


def test_an_rdma_link_between_sites_adds_its_propagation_to_each_step_across():
    """Two sites joined by an RDMA link of 1 ms RTT: a ring's steps between hosts wait its 0.5 ms one way
    beyond NCCL's network latency (2(nodes-1) of them for an all-reduce)."""
    hosts = tuple(Host(f"n{i}", f"s{i}", (H100,) * 8, "nvlink", "per-gpu", "rdma", 400e9) for i in range(2))
    from geosim.inputs.specs import Link
    near = Cluster("near", hosts, (Link("s0", "s1", 0.0, 3.2e12, transport="rdma"),))
    far = Cluster("far", hosts, (Link("s0", "s1", 1e-3, 3.2e12, transport="rdma"),))
    times = []
    for cluster in (near, far):
        coll, schedule = one_collective(cluster, "allreduce", 2**30)
        net = FabricNetwork(None, cluster, default_params(), schedule.devices, algorithm="ring")
        times.append(net.nccl_choice(coll).seconds)
    assert times[1] - times[0] == pytest.approx(2 * 0.5e-3, rel=1e-3)


@pytest.mark.parametrize("technique", ["data", "shard", "pipeshard"])
def test_ranks_simulated_once_give_the_full_runs_answer_on_an_rdma_cluster(technique):
    """A proven symmetry (geosim.sim.symmetry) runs representatives only: the same figures to the bit
    as every rank, with NCCL's model timing the collectives over NVLink and RDMA."""
    from geosim.sim.engine import every_rank

    case = Case(nodes(2, 4), get_model("gpt2m"), Workload(global_batch=16, microbatches=2, epochs=1), load_params())
    reduced = predict(case, technique)
    with every_rank():
        full = predict(case, technique)
    assert reduced.status == full.status == "ok"
    assert reduced.iteration_time_s == full.iteration_time_s and reduced.bytes_per_iteration == full.bytes_per_iteration


def test_tensor_parallel_comm_overlap_hides_the_all_reduces_under_the_gemms(tmp_path):
    """Megatron's --tp-comm-overlap (a runtime's tp_comm_overlap) on one NVLink host: the same compute, the
    same bytes as ring all-reduces, and most of the communication under the GEMM chunks."""
    from geosim.inputs.params import load_params as load

    path = tmp_path / "p.toml"
    path.write_text("[runtime.pytorch]\ntp_comm_overlap = true\n")
    cluster = Cluster("one", (Host("n0", "dc", (H100,) * 8, "nvlink"),), ())
    workload = Workload(global_batch=16, microbatches=1, epochs=1, runtime="pytorch")
    blocking = predict(Case(cluster, get_model("gpt2l"), workload, load()), "shard")
    overlapped = predict(Case(cluster, get_model("gpt2l"), workload, load(path)), "shard")
    assert "tp_comm_overlap" in overlapped.description and "tp_comm_overlap" not in blocking.description
    assert overlapped.iteration_breakdown.compute_s == pytest.approx(blocking.iteration_breakdown.compute_s, rel=1e-9)
    # the all-reduces' bytes, 4 a layer of the activation: each rank sends 2(p-1)/p of it (the layers'
    # all-reduces are what the two runs share; the head's and the update's are alike)
    activation = 16 * 1024 * get_model("gpt2l").n_embd * workload.bytes_per_value
    layer_bytes = get_model("gpt2l").n_layer * 4 * activation * 2 * 7 / 8 * 8
    assert overlapped.bytes_per_iteration == pytest.approx(blocking.bytes_per_iteration, rel=1e-9)
    assert overlapped.bytes_per_iteration >= layer_bytes
    assert overlapped.iteration_breakdown.exposed_comm_s < 0.5 * blocking.iteration_breakdown.exposed_comm_s
    with __import__("geosim.sim.engine", fromlist=["every_rank"]).every_rank():
        full = predict(Case(cluster, get_model("gpt2l"), workload, load(path)), "shard")
    assert full.iteration_time_s == overlapped.iteration_time_s
