"""Collectives as point-to-point sends and receives, one rank's share at a time.

Each function returns the ops one member of the group runs; the engine runs every
member's ops, so contention and the slowest link fall out of the simulation rather
than out of a formula. With nothing contending and identical links:
  ring allreduce     = 2(p-1)·α + 2(p-1)/p·n·β
  ring reduce-scatter or all-gather = (p-1)·α + (p-1)/p·n·β
  binomial-tree allreduce = 2·ceil(log2 p)·(α + n·β)
  pairwise all-to-all = (p-1)·(α + n/p·β)   (n: the buffer each rank holds, 1/p of it for each rank)
"""

from __future__ import annotations

import math
from functools import lru_cache

from geosim.sim.schedule import Collective, Recv, Send

ALGORITHMS = ("ring", "tree", "hierarchical", "pairwise")


def _ring_steps(group, pos, chunk, steps, tag, phase):
    p = len(group)
    nxt, prev = group[(pos + 1) % p], group[(pos - 1) % p]
    ops = []
    for step in range(steps):
        ops.append(Send(nxt, chunk, tag + (phase, step), p2p=False))
        ops.append(Recv(prev, tag + (phase, step)))
    return ops


def ring(op: str, group: tuple[int, ...], pos: int, nbytes: float, tag: tuple, phase: str = "r") -> list:
    p = len(group)
    if p == 1:
        return []
    steps = {"allreduce": 2 * (p - 1), "reduce_scatter": p - 1, "all_gather": p - 1}[op]
    return _ring_steps(group, pos, nbytes / p, steps, tag, phase)


def tree(op: str, group: tuple[int, ...], pos: int, nbytes: float, tag: tuple) -> list:
    """Binomial tree rooted at group[0]: reduce up, then broadcast down (allreduce).
    Reduce-scatter and all-gather have no tree form in NCCL: they use the ring."""
    if op != "allreduce":
        return ring(op, group, pos, nbytes, tag)
    p = len(group)
    rounds = math.ceil(math.log2(p)) if p > 1 else 0
    reduce_ops, bcast_ops = [], []
    for r in range(rounds):
        bit = 1 << r
        low = pos & ((bit << 1) - 1)
        if low == bit:  # send my partial sum to my parent and stop
            reduce_ops.append(Send(group[pos - bit], nbytes, tag + ("up", r), p2p=False))
            break
        if low == 0 and pos + bit < p:
            reduce_ops.append(Recv(group[pos + bit], tag + ("up", r)))
    for r in reversed(range(rounds)):
        bit = 1 << r
        low = pos & ((bit << 1) - 1)
        if low == bit:
            bcast_ops.append(Recv(group[pos - bit], tag + ("down", r)))
        elif low == 0 and pos + bit < p:
            bcast_ops.append(Send(group[pos + bit], nbytes, tag + ("down", r), p2p=False))
    return reduce_ops + bcast_ops


def pairwise(group: tuple[int, ...], pos: int, nbytes: float, tag: tuple) -> list:
    """All-to-all as NCCL's pairwise exchange (and MPI's for large messages): in step k = 1 .. p-1 each
    rank sends its 1/p slice for the rank k places after it and receives from the rank k places before
    it, one step after another (an MoE layer's token dispatch and combine under expert parallelism)."""
    p = len(group)
    ops = []
    for k in range(1, p):
        ops.append(Send(group[(pos + k) % p], nbytes / p, tag + ("a2a", k), p2p=False))
        ops.append(Recv(group[(pos - k) % p], tag + ("a2a", k)))
    return ops


@lru_cache(maxsize=256)
def host_layout(group: tuple[int, ...], hosts: tuple[str, ...]) -> dict[int, tuple] | None:
    """For a hierarchical collective: rank -> (its host's ranks, its position there, its peers
    across hosts (same local position), its position among them); None where the hierarchy
    does not apply (one host, or hosts holding different numbers of the group's GPUs).
    Built once per group in O(p), so expanding every rank costs O(p) each, not O(p) more."""
    by_host: dict[str, list[int]] = {}
    for rank in group:
        by_host.setdefault(hosts[rank], []).append(rank)
    if len(by_host) == 1 or len({len(v) for v in by_host.values()}) != 1:
        return None
    locals_ = [tuple(v) for v in by_host.values()]
    peers = [tuple(local[i] for local in locals_) for i in range(len(locals_[0]))]
    layout = {}
    for h, local in enumerate(locals_):
        for i, rank in enumerate(local):
            layout[rank] = (local, i, peers[i], h)
    return layout


def hierarchical(op: str, group: tuple[int, ...], pos: int, nbytes: float, tag: tuple,
                 hosts: tuple[str, ...]) -> list:
    """Inside each host first, then across hosts among GPUs of the same local position,
    so only 1/g of the buffer crosses the slow links. Falls back to the ring when hosts
    hold different numbers of the group's GPUs."""
    layout = host_layout(group, hosts)
    if layout is None:
        return ring(op, group, pos, nbytes, tag)
    local, local_pos, peers, peer_pos = layout[group[pos]]
    g = len(local)
    if op == "allreduce":
        return (ring("reduce_scatter", local, local_pos, nbytes, tag, "h1")
                + ring("allreduce", peers, peer_pos, nbytes / g, tag, "h2")
                + ring("all_gather", local, local_pos, nbytes, tag, "h3"))
    if op == "reduce_scatter":
        return (ring("reduce_scatter", local, local_pos, nbytes, tag, "h1")
                + ring("reduce_scatter", peers, peer_pos, nbytes / g, tag, "h2"))
    return (ring("all_gather", peers, peer_pos, nbytes / g, tag, "h2")
            + ring("all_gather", local, local_pos, nbytes, tag, "h3"))


def ring_phases(coll: Collective, hosts: tuple[str, ...]) -> list[list[tuple[int, int]]] | None:
    """The (sender, receiver) pairs of each ring phase of `coll`, in the order the phases run;
    None for the tree. Every rank sends to one rank per phase, each step of the phase."""
    group = coll.group
    if (coll.algorithm == "tree" and coll.op == "allreduce") or coll.op == "all_to_all":
        return None
    if len(group) == 1:
        return []
    layout = host_layout(group, hosts) if coll.algorithm == "hierarchical" else None
    if layout is None:
        return [[(group[i], group[(i + 1) % len(group)]) for i in range(len(group))]]
    rings = sorted({entry[0] for entry in layout.values()}), sorted({entry[2] for entry in layout.values()})
    local = [(r[i], r[(i + 1) % len(r)]) for r in rings[0] if len(r) > 1 for i in range(len(r))]
    across = [(r[i], r[(i + 1) % len(r)]) for r in rings[1] for i in range(len(r))]
    phases = {"allreduce": [local, across, local], "reduce_scatter": [local, across],
              "all_gather": [across, local]}[coll.op]
    return [phase for phase in phases if phase]


@lru_cache(maxsize=65536)
def expand(coll: Collective, rank: int, hosts: tuple[str, ...]) -> tuple:
    """The ops `rank` runs for `coll`; hosts[r] is rank r's host. Cached: programs repeat."""
    return tuple(_expand(coll, rank, hosts))


def position(group: tuple[int, ...], rank: int) -> int:
    """rank's index in group, from a table built once per group (not group.index: O(p) each)."""
    return _positions(group)[rank]


@lru_cache(maxsize=256)
def _positions(group: tuple[int, ...]) -> dict[int, int]:
    return {r: i for i, r in enumerate(group)}


def _expand(coll: Collective, rank: int, hosts: tuple[str, ...]) -> list:
    pos = position(coll.group, rank)
    if coll.op == "all_to_all":  # one form: the pairwise exchange (no ring or tree all-to-all)
        return pairwise(coll.group, pos, coll.nbytes, coll.tag)
    if coll.algorithm == "ring":
        return ring(coll.op, coll.group, pos, coll.nbytes, coll.tag)
    if coll.algorithm == "tree":
        return tree(coll.op, coll.group, pos, coll.nbytes, coll.tag)
    if coll.algorithm == "hierarchical":
        return hierarchical(coll.op, coll.group, pos, coll.nbytes, coll.tag, hosts)
    raise ValueError(f"unknown collective algorithm {coll.algorithm!r}")


def ring_allreduce_floor(group: tuple[int, ...], nbytes: float, algorithm: str, step, hosts: tuple[str, ...]) -> float:
    """A floor under a ring (or hierarchical) all-reduce's time for every rank, from its entry to its exit,
    as ring() and hierarchical() expand it (hosts[r]: rank r's host), where the network sends each connection's
    messages one after another and times each step as sent (step(src, dst, nbytes): the network's least_step_s,
    (least hold of the connection, least delay from issue to arrival)). A floor the planner prunes with
    (geosim/techniques/_floor.py, _pipeline_floor.py); 0 for the tree.
    The ring runs 2(n - 1) steps of a chunk c = B / n: in step k every rank sends chunk k to its successor
    (at the end of its receive of step k - 1) and receives its predecessor's. Take rank r and any edge e =
    q -> q+1: r's first send starts a chain, each link of it a send issued when the one before it has
    arrived, that reaches q in step m = (q - r) mod n; q's sends of steps m .. m + n - 2 follow one another
    on its one connection; the last one's chain goes on round to r, whose last receive (step 2n - 3) ends
    it. So r leaves at least the least delays of every edge but e, and e's credit, n - 1 least holds,
    latency and message cost: one lap of least delays plus (n - 2) x e's least hold, the largest over e.
    Hierarchical: the ring across hosts of each local position (1/g of the buffer), the least over them."""
    if algorithm not in ("ring", "hierarchical") or len(group) < 2:
        return 0.0
    layout = host_layout(group, hosts) if algorithm == "hierarchical" else None
    if layout is None:
        rings: list[tuple[int, ...]] = [group]
    else:
        rings = sorted({peers for _, _, peers, _ in layout.values()})
        nbytes /= len(next(iter(layout.values()))[0])
    least = float("inf")
    for ring in rings:
        n = len(ring)
        if n < 2:
            return 0.0
        chunk = nbytes / n
        lap, hold = 0.0, 0.0
        for i in range(n):
            held, delay = step(ring[i], ring[(i + 1) % n], chunk)
            lap += delay
            if held > hold:
                hold = held
        least = min(least, lap + (n - 2) * hold)
    return least
