"""Routes without networkx (geosim/sim/network/_topology.py): the path it finds between every two hosts
is the one networkx's shortest-path search found before, on random slices full of tied paths."""

import random

import networkx as nx

from geosim.inputs.params import default_params
from geosim.inputs.scenario import gpu_catalog
from geosim.sim.network._topology import TIE_BREAK_S, Topology
from geosim.inputs.specs import Cluster, Host, Link
from geosim.techniques._base import devices_of


def networkx_path(topology: Topology, a: str, b: str) -> list[str]:
    """What Topology.path chose when it searched with networkx on every call."""
    graph = topology.graph.to_networkx()
    if graph.has_edge(a, b) and graph.edges[a, b]["link"] is not None:
        return [a, b]
    if graph.degree(a) == 1 and graph.degree(b) == 1 and next(iter(graph[a])) == next(iter(graph[b])):
        return [a, next(iter(graph[a])), b]
    hosts = topology.host_names

    def weight(u, v, edge):
        if (u in hosts and u not in (a, b)) or (v in hosts and v not in (a, b)):
            return None
        return edge["one_way_s"] + TIE_BREAK_S * 1e9 / edge["bandwidth_bps"]

    try:
        return nx.shortest_path(graph, a, b, weight=weight)
    except nx.NetworkXNoPath:
        return nx.shortest_path(graph, a, b, weight="one_way_s")


def random_cluster(rng: random.Random) -> Cluster:
    gpu = gpu_catalog()["RTX6000"]
    sites = [f"S{i}" for i in range(rng.randint(1, 6))]
    hosts = tuple(Host(f"h{i}", rng.choice(sites), (gpu,) * rng.randint(1, 2)) for i in range(rng.randint(2, 7)))
    ends = sites + [h.name for h in hosts]
    links = []
    for _ in range(rng.randint(0, 10)):
        a, b = rng.sample(ends, 2)
        # few distinct values: ties of latency and bandwidth are common, 0 ms among them
        links.append(Link(a, b, rtt_s=rng.choice([0.0, 0.01, 0.02, 0.03]), bandwidth_bps=rng.choice([1e9, 10e9])))
    return Cluster("random", hosts, tuple(links))


def test_routes_match_networkx_on_random_slices():
    rng, params, compared = random.Random(14), default_params(), 0
    for _ in range(400):
        cluster = random_cluster(rng)
        topology = Topology(cluster, params, devices_of(cluster))
        names = [h.name for h in cluster.hosts]
        for a in names:
            for b in names:
                if a == b:
                    continue
                try:
                    expected = networkx_path(topology, a, b)
                except nx.NetworkXNoPath:
                    continue
                assert [u for u, _, _ in topology.path(a, b)] + [b] == expected, (cluster, a, b)
                compared += 1
    assert compared > 2000
