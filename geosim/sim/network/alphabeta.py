"""The plain alpha-beta network: a message of n bytes costs its route's latency (alpha)
plus n / bandwidth (beta = 1 / the slowest hop's bandwidth). No TCP window, no slow
start, no handshakes or per-message costs: the model analytical simulators such as
ASTRA-sim's analytical backend use, over geosim's topology.

Routes are topology.Topology's: the sender's and receiver's GPU ports plus, between
hosts, the links of the path; every hop a first-come-first-served server (a transfer
adds its serialization to each hop's backlog). Latency: host.latency_us inside a host;
between hosts, the sum of the path's one-way link latencies.

Symmetric collectives are timed once. When every rank of the run is in a ring (or
hierarchical) collective, all arrive at the same instant, the links it uses are idle,
each ring phase's routes cost the same and no two senders of a phase share a hop, then
the ranks are interchangeable: each one's step k arrives when its own step k does. One
representative's steps are walked, in O(p), and its time stands for every rank's;
otherwise the engine runs every rank's steps (the full simulation).
"""

from __future__ import annotations

from dataclasses import dataclass

from geosim.sim import collectives
from geosim.sim.network import CountingNetwork
from geosim.sim.network._topology import Topology
from geosim.sim.schedule import Collective, Device, Recv, Send
from geosim.inputs.specs import Cluster, Params


@dataclass(frozen=True)
class Route:
    hops: tuple[int, ...]
    name: str
    one_way_s: float
    line_rate: float  # bytes/s: the slowest hop's bandwidth


class AlphaBetaNetwork(CountingNetwork):
    def __init__(self, clock, cluster: Cluster, params: Params, devices: list[Device], trace: list | None = None,
                 shortcut: bool = True):
        super().__init__(clock, cluster, params, devices, trace)
        self.shortcut = shortcut  # False: always the full simulation (what the fast path is tested against)
        self.topology = Topology(cluster, params, devices)
        self.free_at = self.topology.free_at
        self._routes: dict[tuple[int, int], Route] = {}
        self._symmetric: dict[tuple, list | None] = {}
        self._last: tuple = (None, None)
        self.everyone = frozenset(d.rank for d in devices)

    def route(self, src: int, dst: int) -> Route:
        route = self._routes.get((src, dst))
        if route is not None:
            return route
        topo, a, b = self.topology, self.devices[src], self.devices[dst]
        names = [f"gpu{src}:out", f"gpu{dst}:in"]
        nvlink = topo.same_host_nvlink(a, b)
        rates = [topo.gpu_rate(a, nvlink), topo.gpu_rate(b, nvlink)]
        if a.host == b.host:
            one_way, name = self.params.intra_host_latency_s, f"{a.host} bus"
        else:
            one_way = 0.0
            for u, v, edge in topo.path(a.host, b.host):
                names.append(topo.hop_name(u, v, a, b))
                rates.append(edge["bandwidth_bps"] / 8)
                one_way += edge["one_way_s"]
            name = " / ".join(names[2:])
        route = self._routes[(src, dst)] = Route(tuple(topo.hop(n) for n in names), name, one_way, min(rates))
        return route

    def send_at(self, src: int, dst: int, nbytes: float, p2p: bool, label: str, now: float) -> float:
        self.count(src, nbytes)
        route = self.route(src, dst)
        serialize = nbytes / route.line_rate
        free_at = self.free_at
        done = now + serialize
        for h in route.hops:
            free_at[h] = max(free_at[h], now) + serialize
            done = max(done, free_at[h])
        arrival = done + route.one_way_s
        if self.trace is not None:
            self.trace.append(("link", route.name, str(label), now, arrival, nbytes))
        return arrival

    # --- the symmetry fast path ------------------------------------------------------

    def may_shortcut(self, coll: Collective) -> bool:
        return self._phases(coll) is not None

    def _phases(self, coll: Collective) -> list | None:
        """The ring phases' routes when coll's ranks are interchangeable on these links, else None."""
        if self._last[0] is coll:  # every rank asks about the same op in turn: skip hashing its group
            return self._last[1]
        key = (coll.op, coll.group, coll.algorithm)
        if key in self._symmetric:
            self._last = (coll, self._symmetric[key])
            return self._last[1]
        phases = None
        if self.shortcut and self.trace is None and len(coll.group) > 1 and frozenset(coll.group) == self.everyone:
            phases = collectives.ring_phases(coll, self.hosts)
            if phases is not None:
                phases = [[self.route(s, d) for s, d in pairs] for pairs in phases]
                if not all(_interchangeable(routes) for routes in phases):
                    phases = None
        self._symmetric[key] = phases
        self._last = (coll, phases)
        return phases

    def collective_time(self, coll: Collective) -> float | None:
        phases = self._phases(coll)
        now = self.env.now
        free_at = self.free_at
        if phases is None or any(free_at[h] > now for routes in phases for r in routes for h in r.hops):
            return None
        # walk one representative: its receive of step k arrives when its own send of step k does
        rank = coll.group[0]
        busy: dict[int, float] = {}
        arrival: dict[tuple, float] = {}
        clock, sent, sends = now, 0.0, 0
        for op in collectives.expand(coll, rank, self.hosts):
            if type(op) is Send:
                route = self.route(rank, op.dst)
                serialize = op.nbytes / route.line_rate
                done = clock + serialize
                for h in route.hops:
                    busy[h] = max(busy.get(h, now), clock) + serialize
                    done = max(done, busy[h])
                arrival[op.tag] = done + route.one_way_s
                sent += op.nbytes
                sends += 1
            elif type(op) is Recv:
                clock = max(clock, arrival[op.tag])
        for member in coll.group:
            self.count(member, sent, sends)
        return clock - now


def _interchangeable(routes: list[Route]) -> bool:
    """One ring phase: every route costs the same and no hop carries two senders' steps."""
    first = routes[0]
    hops = [h for r in routes for h in r.hops]
    return (all(r.line_rate == first.line_rate and r.one_way_s == first.one_way_s for r in routes)
            and len(hops) == len(set(hops)))


NAME = "alpha-beta"
BACKEND = AlphaBetaNetwork
