"""The fabric network backend: every link priced by the transport that carries it (what a case runs by default).

A datacenter job talks over three transports, and NCCL picks one per peer:
  - NVLink (NVSwitch) inside a host whose GPUs have it (Host.intra_host = "nvlink");
  - RDMA (InfiniBand or RoCE, NCCL's IB transport) between hosts that say so (Host.transport =
    "rdma" for a host's links to its site, Link.transport = "rdma" for a scenario's link), each NIC a
    rail at its rate (Host.nic_gbps; with nic = "per-gpu" one per GPU);
  - TCP sockets everywhere else: WAN paths, Ethernet without RDMA, the study's FABRIC VMs. These
    routes are the TCP model's (tcp.py), to the bit: a cluster without NVLink or RDMA runs exactly
    as `--network tcp`.

A route over NVLink or RDMA only (a "direct" route) has no window, no slow start, no socket cost:
latency plus bytes at the slowest hop's rate times the bus efficiency NCCL reaches on it. A
collective whose every pair of ranks is direct is timed by NCCL's own model (_nccl.py: ring or tree,
LL, LL128 or Simple, whichever NCCL predicts quickest; a ring's channels spread over all of a host's
NICs), once its last rank has arrived and the links it uses are free; a collective that crosses a
socket runs its steps as the TCP model does, each step on its own route's transport.
"""

from __future__ import annotations

from dataclasses import dataclass

from geosim.base.parameters import Scalar
from geosim.sim import collectives
from geosim.sim.network import _nccl
from geosim.sim.network.tcp import Route, TCPNetwork
from geosim.sim.symmetry import OrderMatters
from geosim.sim.schedule import Collective, Device
from geosim.inputs.specs import Cluster, Params

NAME = "fabric"

TABLE = "fabric"
PARAMETERS: tuple[Scalar, ...] = (
    Scalar("fabric.nvlink_efficiency", "nvlink_efficiency", "fraction",
           "share of NVLink's line rate NCCL's Simple protocol moves (its bus bandwidth on NVLink)",
           "NCCL's topology model (src/graph/topo.h): 20.0 GB/s per NVLink 3 link (A100) and 20.6 per NVLink 4 "
           "link (H100) of 25 line; NCCL's maintainer: ~370 of 450 GB/s on H100 (NVIDIA/nccl-tests#212)",
           range=(0.01, 1.0), fit=(0.3, 1.0)),
    Scalar("fabric.rdma_efficiency", "rdma_efficiency", "fraction",
           "share of a NIC's line rate NCCL's IB transport moves",
           "ASTRA-sim's NCCL bus-bandwidth model (calbusbw.h): ConnectX-6 23.5 of 25 GB/s, ConnectX-7 48.5 of 50",
           range=(0.01, 1.0), fit=(0.3, 1.0)),
    Scalar("fabric.rdma_latency_us", "rdma_latency_s", "us",
           "one-way latency of a message between GPUs of two hosts over RDMA (NIC, switch, GPUDirect)",
           "NCCL's per-step network latency, ring LL (2.7 us, src/graph/tuning.cc)", range=(0.0, 1e5)),
)


@dataclass(frozen=True)
class Settings:
    """The fabric model's own constants (its [fabric] table), SI units; the TCP routes read [transport]."""

    nvlink_efficiency: float
    rdma_efficiency: float
    rdma_latency_s: float

    @classmethod
    def from_params(cls, params: Params) -> "Settings":
        return params.network(NAME)


class FabricNetwork(TCPNetwork):
    """TCPNetwork's routes where sockets run; NVLink and RDMA routes priced by their own transport,
    and their collectives by NCCL's model."""

    def __init__(self, clock, cluster: Cluster, params: Params, devices: list[Device], trace: list | None = None,
                 precompute: bool = True, algorithm: str | None = None):
        super().__init__(clock, cluster, params, devices, trace, precompute)
        self.fabric = Settings.from_params(params)
        self.algorithm = algorithm  # NCCL_ALGO: "ring" or "tree" forces one; None lets NCCL's model choose
        self.host_of = {h.name: h for h in cluster.hosts}
        self.direct_hosts = {h.name for h in cluster.hosts if h.transport == "rdma"}
        self._direct: dict[tuple[int, int], bool] = {}
        self._nccl: dict[tuple, tuple | None] = {}  # (op, group) -> (its Fabric, its ring's hops) or None
        self._nccl_seen: dict[tuple, tuple] = {}  # (op, id(group)) -> (group, what _nccl holds for it)
        self._chosen: dict[tuple, _nccl.Choice] = {}  # (op, bytes, id of a _nccl entry) -> NCCL's choice

    # --- routes -------------------------------------------------------------------------------------

    def route(self, src: int, dst: int) -> Route:
        key = (src, dst)
        known = self._routes.get(key)
        if known is not None:
            return known
        direct = self._direct_route(src, dst)
        if direct is None:
            return super().route(src, dst)
        self._routes[key] = direct
        return direct

    def is_direct(self, src: int, dst: int) -> bool:
        """Whether src's messages to dst go over NVLink or RDMA only (no socket on the way): a property of
        the two hosts (and, inside one, of its NVLink), so asked once per pair of hosts."""
        a, b = self.devices[src].host, self.devices[dst].host
        key = (a, b)
        known = self._direct.get(key)
        if known is None:
            known = self._direct[key] = self._direct_route(src, dst) is not None
        return known

    def _direct_route(self, src: int, dst: int) -> Route | None:
        a, b = self.devices[src], self.devices[dst]
        topo, f = self.topology, self.fabric
        names = [f"gpu{src}:out", f"gpu{dst}:in"]
        if a.host == b.host:
            if not topo.same_host_nvlink(a, b):
                return None  # PCIe inside a host: the TCP model's route, as it always was
            rate = min(self._nvlink_rate(a), self._nvlink_rate(b)) * f.nvlink_efficiency
            one_way, name = self.params.intra_host_latency_s, f"{a.host} nvlink"
            return Route(hops=tuple(topo.hop(n) for n in names), name=name, one_way_s=one_way, rtt_s=2 * one_way,
                         line_rate=rate, window_bytes=0.0, stream_rate=0.0, step_rtts=0.0, tcp=False)
        # GPUDirect RDMA: the NIC reads and writes the GPU's memory peer to peer across PCIe, not through the
        # host's memory (host.pcie_gbps is that copy rate, what a socket pays); the NIC's rate x
        # fabric.rdma_efficiency is NCCL's figure for the whole path, as its collectives here price it
        rates = []
        one_way = 0.0
        for u, v, edge in topo.path(a.host, b.host):
            link = edge["link"]
            if link is None:  # a host's edge to its site: its NIC's transport
                host = u if u in self.host_of else v
                if host not in self.direct_hosts:
                    return None
                one_way += f.rdma_latency_s / 2  # two edges (host, switch, host) make one RDMA hop
            elif link.transport != "rdma":
                return None
            else:
                one_way += link.one_way_s
            names.append(topo.hop_name(u, v, a, b))
            rates.append(edge["bandwidth_bps"] / 8)
        rate = min(rates) * f.rdma_efficiency
        return Route(hops=tuple(topo.hop(n) for n in names), name=" / ".join(names[2:]), one_way_s=one_way,
                     rtt_s=2 * one_way, line_rate=rate, window_bytes=0.0, stream_rate=0.0, step_rtts=0.0, tcp=False)

    def _nvlink_rate(self, device: Device) -> float:
        """bytes/s a GPU's NVLink carries a direction: its catalog figure, else the parameters' host.nvlink_gbps."""
        gbs = device.gpu.nvlink_gbs
        return gbs * 1e9 if gbs else self.params.nvlink_bps / 8

    # --- collectives by NCCL's model -----------------------------------------------------------------

    def _communicator(self, coll: Collective) -> tuple | None:
        """(the Fabric NCCL would see, the hops its rings hold) where every pair of coll's ranks is
        direct; None where a socket is on the way (the collective then runs step by step)."""
        # asked for every rank of every collective: keyed by the group's identity, not its value (hashing
        # a 1,024-rank tuple each time was 4 s of a 1,024-GPU Shard row); the entry holds the group, so
        # its id stays its own while the entry lives
        group = coll.group
        known = self._nccl_seen.get((coll.op, id(group)))
        if known is not None and known[0] is group:
            return known[1]
        key = (coll.op, group)
        if key in self._nccl:
            self._nccl_seen[(coll.op, id(group))] = (group, self._nccl[key])
            return self._nccl[key]
        found = None
        if coll.op == "all_to_all":  # NCCL's model here is its ring and tree: the pairwise exchange runs step by step
            self._nccl[key] = None
            return None
        hosts: dict[str, list[int]] = {}
        for rank in group:
            hosts.setdefault(self.devices[rank].host, []).append(rank)
        firsts = [ranks[0] for ranks in hosts.values()]
        if len(group) > 1 and all(self.is_direct(r[0], r[1]) for r in hosts.values() if len(r) > 1) and all(
                self.is_direct(s, d) for s in firsts for d in firsts if s != d):
            intra = min((self.route(r[i], r[(i + 1) % len(r)]).line_rate for r in hosts.values() if len(r) > 1
                         for i in range(len(r))), default=float("inf"))
            inter, extra = 0.0, 0.0
            if len(hosts) > 1:
                # a link's own propagation beyond NCCL's network latency (an RDMA link between sites)
                extra = max(max(self.route(s, d).one_way_s for s in firsts for d in firsts if s != d)
                            - self.fabric.rdma_latency_s, 0.0)
                # the ring's stage between hosts: every edge its hops cross from one host to the next, each
                # at its rate times the lanes the group's rails have on it
                names = list(hosts)
                inter = min(self._ring_hop_bps(names[i], names[(i + 1) % len(names)], hosts)
                            for i in range(len(names)))
            if intra == float("inf"):  # one GPU a host: its NIC is the only stage
                intra = inter
            nvlink = all(self.topology.intra_kind.get(h) == "nvlink" for h in hosts)
            fabric = _nccl.Fabric(ranks=len(group), nodes=len(hosts), intra_bps=intra, inter_bps=inter,
                                  intra_hw="nvlink" if nvlink else "pcie", ll128=nvlink, net_extra_s=extra)
            hops = sorted({h for i, s in enumerate(group) for h in self.route(s, group[(i + 1) % len(group)]).hops})
            found = (fabric, tuple(hops))
        self._nccl[key] = found
        self._nccl_seen[(coll.op, id(group))] = (group, found)
        return found

    def _ring_hop_bps(self, a: str, b: str, hosts: dict[str, list[int]]) -> float:
        """bytes/s a ring's channels move from host a to host b together: the slowest edge of their path.
        NCCL spreads a communicator's channels over the NICs of its ranks (the rails): on a host with a
        NIC per GPU, each of the group's k ranks there drives its own NIC, and the topology gives each GPU
        its own lane of every edge leaving or entering that host (the host's NIC edge or a link the
        scenario draws to it), so such an edge carries k lanes; an edge between two sites is one, shared."""
        per_gpu = self.topology.per_gpu_nic
        slowest = float("inf")
        for u, v, edge in self.topology.path(a, b):
            lanes = [len(hosts[h]) for h in (u, v) if h in per_gpu and h in hosts]
            rate = edge["bandwidth_bps"] / 8 * self.fabric.rdma_efficiency * (min(lanes) if lanes else 1)
            slowest = min(slowest, rate)
        return slowest

    def nccl_choice(self, coll: Collective) -> _nccl.Choice | None:
        """What NCCL runs for coll and its time, where its ranks talk over NVLink and RDMA only."""
        found = self._communicator(coll)
        return None if found is None else _nccl.choose(coll.op, coll.nbytes, found[0], self._forced(coll))

    def _forced(self, coll: Collective) -> str | None:
        # a forced tree applies to the all-reduce only (NCCL has no tree for the others)
        return self.algorithm if self.algorithm == "ring" or coll.op == "allreduce" else None

    def may_precompute(self, coll: Collective) -> bool:
        if self._communicator(coll) is not None:
            return True
        return super().may_precompute(coll)

    def collective_ends(self, coll: Collective, arrivals: dict[int, float]) -> dict[int, float]:
        found = self._communicator(coll)
        if found is None:
            return super().collective_ends(coll, arrivals)
        fabric, hops = found
        if self._fixed_hops and not self._fixed_hops.isdisjoint(hops):
            # under a symmetry, a hop every copy of the group holds: the copies' collectives would queue there
            raise OrderMatters(next(iter(self._fixed_hops.intersection(hops))))
        # NCCL's choice is a function of the op, its bytes, the communicator and a forced algorithm: made once
        # per (op, bytes, communicator), not at every held collective (10% of a 1,280-GPU Pipeshard run)
        key = (coll.op, coll.nbytes, id(found))
        choice = self._chosen.get(key)
        if choice is None:
            choice = self._chosen[key] = _nccl.choose(coll.op, coll.nbytes, fabric, self._forced(coll))
        free_at = self.free_at
        start = max(max(arrivals.values()), max((free_at[h] for h in hops), default=0.0))
        end = start + choice.seconds
        for h in hops:  # its rings hold every link they use while it runs
            free_at[h] = end
        n = len(coll.group)
        volume = coll.nbytes * (2 * (n - 1) / n if coll.op == "allreduce" else (n - 1) / n)
        for rank in arrivals:
            self.count(rank, volume, _nccl.steps(coll.op, n))
        if self.trace is not None:
            self.trace.append(("link", f"nccl {choice.algorithm}/{choice.protocol}", coll.label or coll.op, start,
                               end, coll.nbytes))
        return dict.fromkeys(arrivals, end)

    def collective_ops(self, coll: Collective, rank: int) -> tuple:
        return collectives.expand(coll, rank, self.hosts)


def uses_direct(cluster: Cluster) -> bool:
    """Whether any route of the cluster may run over NVLink or RDMA (the fabric model then differs from tcp)."""
    return (any(h.intra_host == "nvlink" or h.transport == "rdma" for h in cluster.hosts)
            or any(link.transport == "rdma" for link in cluster.links))


def uses_rdma(cluster: Cluster) -> bool:
    """Whether any route between hosts may run over RDMA: then NCCL's rings over a host's rails may beat the
    bandwidth of one network port (the planner's floors, geosim/techniques/_floor.py, hold without it)."""
    return any(h.transport == "rdma" for h in cluster.hosts) or any(link.transport == "rdma" for link in cluster.links)


BACKEND = FabricNetwork
