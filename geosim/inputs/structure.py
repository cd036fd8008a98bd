"""A cluster's structure: which hosts are interchangeable, its sites and how far apart they are.

The planner searches over this structure instead of over hosts. Hosts with the same GPUs,
the same link inside them and the same NIC at the same site are interchangeable: any
option on some of them is worth the same on others, so they form one group with a count.
A 1,024-GPU cluster of 128 such hosts at 8 sites has 8 groups; the planner orders sites
and groups, never hosts, and chooses "how many hosts of each group", never every subset.

Plain data and arithmetic only (no simulation): the techniques' plan_variants and the
planner (geosim.studies.plan) both use it.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

from geosim.inputs.specs import Cluster

PERMUTED_SITES = 4  # up to this many sites every order is tried; beyond, nearest-neighbour chains


@dataclass(frozen=True)
class HostGroup:
    site: str
    gpus: tuple[str, ...]  # GPU names of one host
    intra_host: str
    nic: str
    hosts: tuple[str, ...]  # in the scenario's order

    @property
    def count(self) -> int:
        return len(self.hosts)


def host_groups(cluster: Cluster) -> list[HostGroup]:
    """Interchangeable hosts, grouped by (site, GPUs, intra-host link, NIC) and how they talk (transport, NIC
    rate, TCP window), in order of first appearance."""
    found: dict[tuple, list[str]] = {}
    for h in cluster.hosts:
        key = (h.site, tuple(g.name for g in h.gpus), h.intra_host, h.nic, h.transport, h.nic_bps, h.tcp_window_bytes,
               h.kernel_window)
        found.setdefault(key, []).append(h.name)
    return [HostGroup(*key[:4], tuple(names)) for key, names in found.items()]


def sites(cluster: Cluster) -> list[str]:
    """The cluster's sites in order of first appearance."""
    return list(dict.fromkeys(h.site for h in cluster.hosts))


def hosts_at(cluster: Cluster, site: str) -> tuple[str, ...]:
    return tuple(h.name for h in cluster.hosts if h.site == site)


def site_distances(cluster: Cluster) -> dict[tuple[str, str], float]:
    """One-way seconds of the lowest-latency path between every two sites over the scenario's
    links (a link may join hosts or sites; a host stands for its site). For ordering sites only:
    the floors that prune options ask the network backend itself."""
    site_of = {h.name: h.site for h in cluster.hosts}
    graph: dict[str, dict[str, float]] = {}
    for link in cluster.links:
        a, b = site_of.get(link.a, link.a), site_of.get(link.b, link.b)
        if a == b:
            continue
        w = min(graph.get(a, {}).get(b, float("inf")), link.one_way_s)
        graph.setdefault(a, {})[b] = w
        graph.setdefault(b, {})[a] = w
    names = sites(cluster)
    out = {}
    for start in names:
        best = {start: 0.0}
        queue = [(0.0, start)]
        while queue:
            d, u = heapq.heappop(queue)
            if d > best.get(u, float("inf")):
                continue
            for v, w in graph.get(u, {}).items():
                if d + w < best.get(v, float("inf")):
                    best[v] = d + w
                    heapq.heappush(queue, (d + w, v))
        for other in names:
            out[(start, other)] = best.get(other, float("inf"))
    return out


def site_orders(cluster: Cluster, chosen: list[str] | None = None) -> list[tuple[str, ...]]:
    """Orders of sites for pipeline stages: every order up to PERMUTED_SITES sites; beyond, the
    scenario's order and a nearest-neighbour chain from each site (a pipeline pays each crossing
    once per microbatch, so a short path through the sites matters, and which site holds the
    first and last stage does). At most sites + 1 orders, each once."""
    chosen = chosen or sites(cluster)
    if len(chosen) <= PERMUTED_SITES:
        return list(itertools.permutations(chosen))
    distance = site_distances(cluster)
    orders = [tuple(chosen)]
    for start in chosen:
        chain, left = [start], [s for s in chosen if s != start]
        while left:
            nearest = min(left, key=lambda s: (distance[(chain[-1], s)], chosen.index(s)))
            chain.append(nearest)
            left.remove(nearest)
        orders.append(tuple(chain))
    return list(dict.fromkeys(orders))


PAIRED_GROUPS = 4  # up to this many host groups, every pair of them is a subset too
SMALL_COUNT = 4  # every count of a group's hosts up to this; beyond, powers of two


def host_counts(count: int) -> list[int]:
    """How many hosts of a group of `count` the planner tries."""
    return sorted({k for k in range(1, min(count, SMALL_COUNT) + 1)}
                  | {2 ** i for i in range(count.bit_length()) if 2 ** i <= count} | {count})


def gpu_speed(cluster: Cluster, host: str, precision: str) -> float:
    """A host's peak tensor FLOP/s: how the planner orders groups from fast to slow."""
    return sum(g.peak_tflops(precision) for g in cluster.host(host).gpus)


def structured_subsets(cluster: Cluster, precision: str = "fp16") -> list[tuple[str, ...]]:
    """The sets of hosts worth planning on, bounded by the number of sites and groups, not of hosts:
    every host; each site alone; each group alone; one host of each group; every host but one
    site's, or but one group's; the fastest groups (1, 2, ... of them, fastest first); each site
    with its nearest neighbour. Each set in the scenario's host order, each once."""
    order = [h.name for h in cluster.hosts]
    groups = host_groups(cluster)
    names = sites(cluster)
    everyone = set(order)
    wanted: list[set[str]] = [everyone]
    wanted += [set(hosts_at(cluster, s)) for s in names]
    wanted += [set(g.hosts) for g in groups]
    wanted += [{g.hosts[0]} for g in groups]
    for g in groups:  # how many hosts of a group: a few, every count up to SMALL_COUNT, powers of two
        wanted += [set(g.hosts[:k]) for k in host_counts(g.count)]
    if len(groups) <= PAIRED_GROUPS:  # one host of each of two groups (few groups: a small cluster)
        wanted += [{a.hosts[0], b.hosts[0]} for a, b in itertools.combinations(groups, 2)]
    most = max(g.count for g in groups)
    for k in host_counts(most):  # k hosts of every group: the whole cluster trimmed evenly
        wanted.append(set().union(*(g.hosts[:k] for g in groups)))
    if len(names) > 1:
        wanted += [everyone - set(hosts_at(cluster, s)) for s in names]
    if len(groups) > 1:
        wanted += [everyone - set(g.hosts) for g in groups]
    quickest = sorted(order, key=lambda h: -gpu_speed(cluster, h, precision))  # stable: ties in scenario order
    wanted += [set(quickest[:k]) for k in host_counts(len(quickest))]  # the fastest k hosts
    fastest = sorted(groups, key=lambda g: -gpu_speed(cluster, g.hosts[0], precision))
    for k in range(1, len(fastest)):
        wanted.append(set().union(*(g.hosts for g in fastest[:k])))
    if len(names) > 2:
        distance = site_distances(cluster)
        for s in names:
            nearest = min((o for o in names if o != s), key=lambda o: (distance[(s, o)], names.index(o)))
            wanted.append(set(hosts_at(cluster, s)) | set(hosts_at(cluster, nearest)))
    seen, out = set(), []
    for hosts in wanted:
        key = _equivalence(cluster, hosts)
        if hosts and key not in seen:
            seen.add(key)
            out.append(tuple(h for h in order if h in hosts))
    return out


def _equivalence(cluster: Cluster, hosts: set[str]):
    """Sets of hosts that plan alike: hosts at one site are joined by the same LAN wherever that
    site is, so such a set is its groups' kinds and counts; a set spanning sites is itself."""
    chosen = [h for h in cluster.hosts if h.name in hosts]
    own_links = any(link.a in hosts or link.b in hosts for link in cluster.links)  # not only the LAN
    if len({h.site for h in chosen}) > 1 or own_links:
        return frozenset(hosts)
    kinds: dict[tuple, int] = {}
    for h in chosen:
        kind = (tuple(g.name for g in h.gpus), h.intra_host, h.nic, h.transport, h.nic_bps or 0.0,
                h.tcp_window_bytes or 0.0, h.kernel_window)
        kinds[kind] = kinds.get(kind, 0) + 1
    return ("one site", tuple(sorted(kinds.items())))


def host_list(hosts) -> str:
    """VM names joined by '+', runs of three or more numbered alike written as a range
    (utah-0+utah-1+utah-2+utah-3 -> utah-[0-3]): a 128-VM option stays one readable line."""
    import re

    parts, run = [], []

    def flush():
        if len(run) >= 3:
            parts.append(f"{run[0][0]}[{run[0][1]}-{run[-1][1]}]")
        else:
            parts.extend(f"{p}{n}" for p, n in run)
        run.clear()

    for name in hosts:
        m = re.fullmatch(r"(.*?)(\d{1,9})", name)  # bounded digits: int() of thousands of digits raises
        numbered = m is not None and str(int(m.group(2))) == m.group(2)  # no leading zeros: s01 stays s01
        if numbered and run and m.group(1) == run[-1][0] and int(m.group(2)) == run[-1][1] + 1:
            run.append((m.group(1), int(m.group(2))))
            continue
        flush()
        if numbered:
            run.append((m.group(1), int(m.group(2))))
        else:
            parts.append(name)
    flush()
    return "+".join(parts)
