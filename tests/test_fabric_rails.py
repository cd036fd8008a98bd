"""NCCL's rails on the fabric model: data-parallel groups strided across hosts (one or a few ranks of each
host, several groups sharing a host's NICs), each rank on its own NIC where the host has one per GPU, and
the three ways a scenario may write a DGX's InfiniBand (the hosts' transport and NIC rate; an RDMA link
drawn between hosts; a link drawn between RDMA hosts naming no transport) giving one answer."""

from __future__ import annotations

import pytest

from geosim.inputs.params import default_params
from geosim.inputs.scenario import gpu_catalog, load_scenario
from geosim.sim.engine import run_schedule
from geosim.sim.network.fabric import FabricNetwork
from geosim.sim.schedule import Collective, Device, Schedule
from geosim.inputs.specs import Cluster, Host, Workload

A100 = gpu_catalog()["A100-80GB"]
GB = 1e9


def dgx(hosts: int, nic_gbps: float = 200.0) -> Cluster:
    """DGX A100s: 8 GPUs on NVLink, an HDR InfiniBand port (200 Gbit/s) per GPU, on one site's switch."""
    return Cluster("dc", tuple(Host(f"n{i}", "dc", (A100,) * 8, "nvlink", "per-gpu", "rdma", nic_gbps * 1e9)
                               for i in range(hosts)), ())


def devices_of(cluster: Cluster) -> list[Device]:
    return [Device(8 * k + i, host.name, i, gpu) for k, host in enumerate(cluster.hosts) for i, gpu in enumerate(host.gpus)]


def strided_all_reduces(cluster: Cluster, tp: int, nbytes: float):
    """Megatron's data-parallel groups under tensor parallelism tp: group t holds the ranks r with r % tp == t,
    so each group has 8 / tp ranks on every host; all of them all-reduce nbytes at once."""
    devices = devices_of(cluster)
    groups = {t: Collective("allreduce", tuple(d.rank for d in devices if d.rank % tp == t), nbytes, "ring",
                            ("dp", t)) for t in range(tp)}
    return groups, Schedule("dp", devices, {d.rank: [groups[d.rank % tp]] for d in devices}, {})


@pytest.mark.parametrize("tp", [8, 4, 2])
def test_strided_data_parallel_all_reduces_each_ride_their_own_rails(tp):
    """4 DGX A100, tensor parallelism tp inside each: tp data-parallel groups of 32 / tp ranks, 8 / tp of them
    on each host. By hand (NCCL's ring, Simple, 1 GiB): each group's ring leaves a host through the NICs of its
    own 8 / tp GPUs, 8 / tp x 25 GB/s x 0.95 (fabric.rdma_efficiency) together; algorithm bandwidth = that x
    n / 2(n-1); latency (8.4 + (2(n-1) - 6) x 3.4 + 6 x 9.6) us x 1.9 (2(nodes-1) = 6 steps cross the network,
    the rest NVLink; NCCL's plateau for a large multi-host all-reduce). The tp groups use disjoint NICs, so
    all of them end at one group's time: none waits for another's rails."""
    cluster, nbytes = dgx(4), 2**30
    groups, schedule = strided_all_reduces(cluster, tp, nbytes)
    params = default_params()
    eff = params.network("fabric").rdma_efficiency
    n, per_host = 32 // tp, 8 // tp
    bus = per_host * 25 * GB * eff
    steps_nvlink = 2 * (n - 1) - 6
    latency = (8.4 + steps_nvlink * 3.4 + 6 * 9.6) * 1.9e-6
    by_hand = latency + nbytes / (bus * n / (2 * (n - 1)))
    net = FabricNetwork(None, cluster, params, schedule.devices)
    choice = net.nccl_choice(groups[0])
    assert (choice.algorithm, choice.protocol) == ("ring", "Simple")
    assert net._communicator(groups[0])[0].inter_bps == pytest.approx(bus, rel=1e-12)
    assert choice.seconds == pytest.approx(by_hand, rel=1e-12)
    run = run_schedule(schedule, cluster, params, Workload(), iterations=1, network=FabricNetwork)
    assert run.iteration_time(0) == pytest.approx(by_hand, rel=1e-12)
    # one rank a host (tp 8): the ring goes NIC to NIC at one rail's rate, 23.75 GB/s of bus bandwidth
    if tp == 8:
        assert bus == pytest.approx(23.75 * GB)


def _scenario(tmp_path, hosts: int, host_keys: str, link_keys: str | None) -> Cluster:
    text = ['name = "dgx"']
    for i in range(hosts):
        text += ["[[hosts]]", f'name = "n{i}"', 'site = "DC"', 'gpus = ' + str(["A100-80GB"] * 8).replace("'", '"'),
                 'intra_host = "nvlink"', 'nic = "per-gpu"', 'transport = "rdma"', host_keys]
    if link_keys is not None:
        for i in range(hosts):
            for j in range(i + 1, hosts):
                text += ["[[links]]", f'between = ["n{i}", "n{j}"]', "rtt_ms = 0.01", "bandwidth_gbps = 200",
                         link_keys]
    path = tmp_path / "dgx.toml"
    path.write_text("\n".join(text) + "\n")
    return load_scenario(path).cluster


def test_every_way_of_writing_a_dgx_fabric_gives_the_same_strided_all_reduce(tmp_path):
    """The hosts' NIC rate with no link (the site's switch); RDMA links drawn between the hosts (each GPU its
    own lane of a link, as the sends' routes have it, so a ring's stage is the group's lanes x the link, not
    one link, and not the hosts' unused LAN edge); links drawn between RDMA hosts naming no transport (their
    NICs are its ends: RDMA). Before the fix the second ran at the default LAN's 25 Gbit/s a lane and the
    third as TCP sockets."""
    forms = {
        "switch": _scenario(tmp_path, 4, "nic_gbps = 200", None),
        "rdma links": _scenario(tmp_path, 4, "", 'transport = "rdma"'),
        "links, no transport": _scenario(tmp_path, 4, "nic_gbps = 200", ""),
    }
    assert forms["links, no transport"].links[0].transport == "rdma"
    times = {}
    for name, cluster in forms.items():
        groups, schedule = strided_all_reduces(cluster, 2, 2**30)
        net = FabricNetwork(None, cluster, default_params(), schedule.devices)
        assert net._communicator(groups[0])[0].inter_bps == pytest.approx(4 * 25 * GB * 0.95), name
        times[name] = run_schedule(schedule, cluster, default_params(), Workload(), iterations=1,
                                   network=FabricNetwork).iteration_time(0)
    # the drawn links' 10 us round trip: 5 us one way, 2.3 us beyond NCCL's network latency, on each of the
    # ring's 2(nodes-1) = 6 steps across
    extra = 6 * (5e-6 - default_params().network("fabric").rdma_latency_s)
    assert times["rdma links"] == times["links, no transport"] == pytest.approx(times["switch"] + extra, rel=1e-12)


def test_a_link_between_hosts_that_do_not_both_run_rdma_stays_tcp(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[[hosts]]\nname = "a"\nsite = "x"\ngpus = ["H100"]\ntransport = "rdma"\n'
                    '[[hosts]]\nname = "b"\nsite = "x"\ngpus = ["H100"]\n'
                    '[[hosts]]\nname = "c"\nsite = "y"\ngpus = ["H100"]\ntransport = "rdma"\n'
                    '[[hosts]]\nname = "d"\nsite = "x"\ngpus = ["H100"]\ntransport = "rdma"\n'
                    '[[links]]\nbetween = ["a", "b"]\nbandwidth_gbps = 100\nrtt_ms = 0.01\n'
                    '[[links]]\nbetween = ["a", "c"]\nbandwidth_gbps = 100\nrtt_ms = 1\n'
                    '[[links]]\nbetween = ["a", "d"]\nbandwidth_gbps = 100\nrtt_ms = 0.01\ntransport = "tcp"\n')
    links = load_scenario(path).cluster.links
    # b has no RDMA; c is another site (a WAN path: sockets); d's link says tcp
    assert [link.transport for link in links] == ["tcp", "tcp", "tcp"]


def test_a_send_between_dgx_hosts_runs_at_its_nics_rate_as_nccls_rings_do():
    """GPUDirect RDMA: an A100's send to a GPU of another DGX moves at its NIC's 25 GB/s x 0.95 after NCCL's
    network latency, the rate the collectives' rails have; not capped by host.pcie_gbps (PCIe 4: 160 Gbit/s,
    the copy rate to host memory that a socket pays). FSDP's prefetched rail sends ride this route."""
    cluster = dgx(2)
    params = default_params()
    f = params.network("fabric")
    net = FabricNetwork(None, cluster, params, devices_of(cluster))
    nbytes = 25 * 2**20
    assert net.send_at(0, 8, nbytes, False, "x", 0.0) == pytest.approx(
        f.rdma_latency_s + nbytes / (25 * GB * f.rdma_efficiency), rel=1e-12)
    assert 25 * GB * f.rdma_efficiency > params.pcie_bps[4] / 8  # the cap it no longer has
