"""Hosts, sites and links as a graph; the path between two GPUs and the link
directions ("hops") it holds. Shared by the models that route over links.

Each hop (a link direction, or a GPU's port onto its host's bus) is a
first-come-first-served server of capacity one, kept as the time it next falls free.

A host's GPUs share its links unless the host has one NIC per GPU (Host.nic ==
"per-gpu", as in GPU clusters with a NIC beside every GPU): then every GPU has its own
lane of each link leaving or entering the host (the hop's name carries the GPU's index),
each lane at the link's full bandwidth, and only the links between sites are shared.
"""

from __future__ import annotations

from heapq import heappop, heappush

from geosim.base.parameters import TABLE_BY_KEY
from geosim.sim.schedule import Device
from geosim.inputs.specs import Cluster, Params

# a PCIe generation the parameters do not name: the declared default (PCIe 3 x16), bit/s
PCIE_MISSING_BPS = TABLE_BY_KEY["host.pcie_gbps"].missing * TABLE_BY_KEY["host.pcie_gbps"].scale

# a path's latency plus this many seconds per (Gbit/s)^-1 of each edge: far below any real latency
# difference (1 us), it only decides between paths whose latencies are equal up to float rounding
TIE_BREAK_S = 1e-15


# two paths whose weights are this close (relative) count as tied: networkx then picks (see _lowest_latency_path)
NEAR_TIE = 1e-9


class Graph:
    """An undirected graph as networkx.Graph holds one (adjacency in insertion order, one attribute
    dict per edge, a repeated edge updating it), with the little the routes need: importing
    networkx costs a tenth of a second, a tenth of what the default `geosim predict` may take."""

    def __init__(self):
        self.adj: dict[str, dict[str, dict]] = {}
        self.added: list[tuple[str, str, dict]] = []  # to rebuild it in networkx, call for call

    def add_edge(self, u: str, v: str, **attributes) -> None:
        self.added.append((u, v, attributes))
        edge = self.adj.setdefault(u, {}).get(v, {})
        edge.update(attributes)
        self.adj[u][v] = edge
        self.adj.setdefault(v, {})[u] = edge

    def has_edge(self, u: str, v: str) -> bool:
        return v in self.adj.get(u, ())

    def edge(self, u: str, v: str) -> dict:
        return self.adj[u][v]

    def neighbors(self, u: str) -> list[str]:
        return list(self.adj[u])

    def to_networkx(self):
        import networkx as nx

        graph = nx.Graph()
        for u, v, attributes in self.added:
            graph.add_edge(u, v, **attributes)
        return graph


def build_topology(cluster: Cluster, params: Params) -> Graph:
    """Hosts and sites as nodes; scenario links plus a LAN edge from every host to its site."""
    graph = Graph()
    for host in cluster.hosts:
        # a host reaches its site's switch in a quarter of the LAN RTT each way
        # at its NIC's rate where the host names one (Host.nic_gbps), else the site LAN's
        graph.add_edge(host.name, f"site:{host.site}", one_way_s=params.lan_rtt_s / 4,
                       bandwidth_bps=host.nic_bps or params.lan_bandwidth_bps, link=None)
    host_names = {h.name for h in cluster.hosts}
    for link in cluster.links:
        a = link.a if link.a in host_names else f"site:{link.a}"
        b = link.b if link.b in host_names else f"site:{link.b}"
        graph.add_edge(a, b, one_way_s=link.one_way_s, bandwidth_bps=link.bandwidth_bps, link=link)
    return graph


class Topology:
    """Paths between hosts and the hop indices a route holds (free_at[hop])."""

    def __init__(self, cluster: Cluster, params: Params, devices: list[Device]):
        self.params = params
        self.devices = devices
        self.graph = build_topology(cluster, params)
        self.intra_kind = {h.name: h.intra_host for h in cluster.hosts}
        self.per_gpu_nic = {h.name for h in cluster.hosts if h.nic == "per-gpu"}
        self._hop_index: dict[str, int] = {}
        self.free_at: list[float] = []  # per hop: when its current reservation ends
        self._paths: dict[tuple[str, str], list] = {}
        self.host_names = {h.name for h in cluster.hosts}

    def hop(self, name: str) -> int:
        index = self._hop_index.get(name)
        if index is None:
            index = self._hop_index[name] = len(self.free_at)
            self.free_at.append(0.0)
        return index

    def gpu_rate(self, device: Device, nvlink: bool) -> float:
        p = self.params
        bps = p.nvlink_bps if nvlink else p.pcie_bps.get(device.gpu.pcie_gen, PCIE_MISSING_BPS)
        return bps / 8

    def same_host_nvlink(self, a: Device, b: Device) -> bool:
        return a.host == b.host and self.intra_kind.get(a.host) == "nvlink"

    def path(self, a: str, b: str) -> list[tuple[str, str, dict]]:
        """The edges (u, v, attributes) from host a to host b."""
        key = (a, b)
        edges = self._paths.get(key)
        if edges is None:
            graph = self.graph
            # a link the scenario draws between the two hosts is their path, even where the
            # site LAN would be quicker (what-if edits of that link must take effect)
            if graph.has_edge(a, b) and graph.edge(a, b)["link"] is not None:
                nodes = [a, b]
            elif len(graph.adj[a]) == 1 and len(graph.adj[b]) == 1 and graph.neighbors(a) == graph.neighbors(b):
                # two hosts whose only edge is to the same site's switch: no other path exists
                # (and a search per pair would cost O(hosts) each on a large site)
                nodes = [a, graph.neighbors(a)[0], b]
            else:
                nodes = self._lowest_latency_path(a, b)
            edges = self._paths[key] = [(u, v, graph.edge(u, v)) for u, v in zip(nodes, nodes[1:])]
        return edges

    def _lowest_latency_path(self, a: str, b: str) -> list[str]:
        """The lowest-latency path through the sites' switches: a VM does not forward other VMs'
        traffic, so another host is a hop only where no site path exists. Paths of equal latency
        (e.g. every WAN link at 0 ms) go to the most bandwidth: a tie must not be broken by float
        rounding, which made a what-if at 1 ms take a faster path than the same slice at 0 ms
        (docs/reference/properties.md)."""
        hosts = self.host_names

        def weight(u, v, edge):
            if (u in hosts and u not in (a, b)) or (v in hosts and v not in (a, b)):
                return None  # no transit through another VM
            return edge["one_way_s"] + TIE_BREAK_S * 1e9 / edge["bandwidth_bps"]

        nodes = _unique_shortest_path(self.graph, a, b, weight)
        if nodes is not None:
            return nodes
        # two paths (nearly) tied, or none without transit: networkx decides, as it always has
        import networkx as nx

        graph = self.graph.to_networkx()
        try:
            return nx.shortest_path(graph, a, b, weight=weight)
        except nx.NetworkXNoPath:  # hosts linked only through other hosts: the path must cross one
            return nx.shortest_path(graph, a, b, weight="one_way_s")

    def hop_name(self, u: str, v: str, src: Device, dst: Device) -> str:
        """A link direction; with per-GPU NICs, the sending or receiving GPU's own lane of it."""
        name = f"{u}->{v}"
        if u == src.host and u in self.per_gpu_nic:
            name += f"#{src.local_index}"
        if v == dst.host and v in self.per_gpu_nic:
            name += f"@{dst.local_index}"
        return name


def _unique_shortest_path(graph: Graph, a: str, b: str, weight) -> list[str] | None:
    """The shortest path from a to b (Dijkstra; weight(u, v, edge) None hides an edge) when it is the
    only one, every other path longer by more than NEAR_TIE: then any shortest-path search, whatever
    order it adds in, finds this one. None when two paths are that close, or no path exists."""
    dist = {a: 0.0}
    done: set[str] = set()
    heap = [(0.0, 0, a)]
    pushed = 1
    while heap:
        d, _, u = heappop(heap)
        if u in done:
            continue
        done.add(u)
        if u == b:
            break
        for v, edge in graph.adj[u].items():
            w = weight(u, v, edge)
            if w is None or v in done:
                continue
            if d + w < dist.get(v, float("inf")):
                dist[v] = d + w
                heappush(heap, (d + w, pushed, v))
                pushed += 1
    if b not in done:
        return None
    path = [b]
    while path[-1] != a:
        v = path[-1]
        tight = [u for u, edge in graph.adj[v].items() if u in dist and (w := weight(u, v, edge)) is not None
                 and abs(dist[u] + w - dist[v]) <= NEAR_TIE * max(dist[v], 1e-300)]
        if len(tight) != 1:
            return None
        path.append(tight[0])
    return path[::-1]
