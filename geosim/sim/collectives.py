"""Collectives as point-to-point sends and receives, one rank's share at a time.

Each function returns the ops one member of the group runs; the engine runs every
member's ops, so contention and the slowest link fall out of the simulation rather
than out of a formula. With nothing contending and identical links:
  ring allreduce     = 2(p-1)·α + 2(p-1)/p·n·β
  ring reduce-scatter or all-gather = (p-1)·α + (p-1)/p·n·β
  binomial-tree allreduce = 2·ceil(log2 p)·(α + n·β)
"""

from __future__ import annotations

import math
from functools import lru_cache
from collections.abc import Callable

from geosim.sim.schedule import Collective, Recv, Send

ALGORITHMS = ("ring", "tree", "hierarchical")


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


def hierarchical(op: str, group: tuple[int, ...], pos: int, nbytes: float, tag: tuple,
                 host_of: Callable[[int], str]) -> list:
    """Inside each host first, then across hosts among GPUs of the same local position,
    so only 1/g of the buffer crosses the slow links. Falls back to the ring when hosts
    hold different numbers of the group's GPUs."""
    hosts: dict[str, list[int]] = {}
    for rank in group:
        hosts.setdefault(host_of(rank), []).append(rank)
    sizes = {len(v) for v in hosts.values()}
    if len(hosts) == 1 or len(sizes) != 1:
        return ring(op, group, pos, nbytes, tag)
    me = group[pos]
    local = tuple(hosts[host_of(me)])
    local_pos = local.index(me)
    g = len(local)
    peers = tuple(ranks[local_pos] for ranks in hosts.values())
    peer_pos = peers.index(me)
    if op == "allreduce":
        return (ring("reduce_scatter", local, local_pos, nbytes, tag, "h1")
                + ring("allreduce", peers, peer_pos, nbytes / g, tag, "h2")
                + ring("all_gather", local, local_pos, nbytes, tag, "h3"))
    if op == "reduce_scatter":
        return (ring("reduce_scatter", local, local_pos, nbytes, tag, "h1")
                + ring("reduce_scatter", peers, peer_pos, nbytes / g, tag, "h2"))
    return (ring("all_gather", peers, peer_pos, nbytes / g, tag, "h2")
            + ring("all_gather", local, local_pos, nbytes, tag, "h3"))


@lru_cache(maxsize=65536)
def expand(coll: Collective, rank: int, hosts: tuple[str, ...]) -> tuple:
    """The ops `rank` runs for `coll`; hosts[r] is rank r's host. Cached: programs repeat."""
    return tuple(_expand(coll, rank, hosts.__getitem__))


def _expand(coll: Collective, rank: int, host_of: Callable[[int], str]) -> list:
    pos = coll.group.index(rank)
    if coll.algorithm == "ring":
        return ring(coll.op, coll.group, pos, coll.nbytes, coll.tag)
    if coll.algorithm == "tree":
        return tree(coll.op, coll.group, pos, coll.nbytes, coll.tag)
    if coll.algorithm == "hierarchical":
        return hierarchical(coll.op, coll.group, pos, coll.nbytes, coll.tag, host_of)
    raise ValueError(f"unknown collective algorithm {coll.algorithm!r}")
