"""NCCL's own cost model of a collective: which algorithm and protocol it runs and what that takes.

NCCL predicts, for every algorithm (ring, tree) and protocol (LL, LL128, Simple), a collective's time
as latency + bytes / bandwidth and runs the quickest (src/graph/tuning.cc, ncclTopoTuneModel and
ncclTopoGetAlgoTime; read in NCCL 2.12's version, NVIDIA/nccl commit 01afd20). This module is that
model, written from its description, over what geosim knows of a communicator (a `Fabric`): its ranks
and hosts, each GPU's bandwidth inside a host and each host's NICs together. Only where every pair
of a collective's ranks talks over NVLink or RDMA does the fabric network backend (fabric.py) ask it;
sockets (TCP) keep the step-by-step simulation.

Bandwidth: a ring moves each rank's share through every rank, so its bus bandwidth is the slowest
stage of the ring: a GPU's NVLink inside a host, a host's NICs together between hosts (NCCL's channels
spread the rings over every NIC: the rails). LL carries 8 bytes of every 16 (a quarter of the bus
bandwidth in NCCL's model for an all-reduce, a third otherwise), LL128 120 of 128. A tree (all-reduce
only) reaches 0.9 of the bandwidth up to a ceiling, and moves every byte twice (its algorithm
bandwidth is half its bus bandwidth). Latency: a base cost per algorithm and protocol plus, per step,
the hardware's (NVLink, PCIe or the network) from NCCL's tables.

Sizes are a collective's whole buffer (nccl-tests' "size": what an all-reduce reduces, what an
all-gather ends with), as geosim's Collective.nbytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RING, TREE = "ring", "tree"
LL, LL128, SIMPLE = "LL", "LL128", "Simple"
PROTOCOLS = (LL, LL128, SIMPLE)

# NCCL 2.12 tuning.cc: latencies in microseconds (the algorithm's base, then a step's on each kind of hop)
BASE_LATENCY_US = {TREE: {LL: 4.4, LL128: 4.4, SIMPLE: 0.0}, RING: {LL: 3.6, LL128: 10.0, SIMPLE: 8.4}}
HW_LATENCY_US = {
    "nvlink": {TREE: {LL: 0.52, LL128: 1.2, SIMPLE: 28.0}, RING: {LL: 0.47, LL128: 1.9, SIMPLE: 3.4}},
    "pcie": {TREE: {LL: 1.0, LL128: 1.9, SIMPLE: 28.0}, RING: {LL: 1.0, LL128: 2.5, SIMPLE: 5.7}},
    "net": {TREE: {LL: 5.0, LL128: 8.5, SIMPLE: 50.0}, RING: {LL: 2.7, LL128: 4.0, SIMPLE: 9.6}},
}
# the tree's bus-bandwidth ceiling in GB/s (more than two hosts, up to two), LL128's
TREE_MAX_GBS = {True: {LL128: 105.0, "other": 80.0}, False: {LL128: 130.0, "other": 110.0}}
# a tree's measured shortfall at middle sizes, by log2(bytes / 64) for 64 B .. 128 MiB (tuning.cc)
TREE_CORRECTION = {
    LL: (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0),
    LL128: (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0),
    SIMPLE: (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9),
}
LL128_FRACTION = 120 / 128  # payload per 128-byte line (tuning.cc writes 0.92)
RING_PLATEAU = 1.9  # a multi-host ring all-reduce's latency in the Simple protocol past a size (tuning.cc)


@dataclass(frozen=True)
class Fabric:
    """What NCCL's topology search finds for one communicator, in geosim's terms."""

    ranks: int
    nodes: int  # hosts the ranks are on
    intra_bps: float  # bytes/s one GPU moves to the next inside a host (NVLink or PCIe), after protocol overhead
    inter_bps: float  # bytes/s a host's NICs move together (its rails); 0 on one host
    intra_hw: str = "nvlink"  # "nvlink" or "pcie": which latency row a step inside a host pays
    ll128: bool = True  # LL128 enabled (NCCL: where the GPUs talk over NVLink)
    # seconds a step between hosts waits beyond NCCL's network latency: a link's own propagation (an
    # RDMA link between sites kilometres apart); 0 inside a datacenter
    net_extra_s: float = 0.0


@dataclass(frozen=True)
class Choice:
    algorithm: str
    protocol: str
    seconds: float
    latency_s: float
    bandwidth: float  # bytes/s of algorithm bandwidth (the buffer's bytes / the bandwidth term)


def steps(op: str, n: int) -> int:
    return 2 * (n - 1) if op == "allreduce" else n - 1


def choices(op: str, nbytes: float, fabric: Fabric) -> list[Choice]:
    """Every algorithm and protocol NCCL would consider for this collective, with its predicted time."""
    n, nodes = fabric.ranks, fabric.nodes
    if n <= 1:
        return [Choice(RING, SIMPLE, 0.0, 0.0, math.inf)]
    per_node = n / nodes
    found = []
    for algorithm in (RING, TREE):
        if algorithm == TREE and (op != "allreduce"):
            continue  # NCCL has a tree for the all-reduce only
        for protocol in PROTOCOLS:
            if protocol == LL128 and not fabric.ll128:
                continue
            bw = _bus_bandwidth(algorithm, protocol, op, fabric, per_node)
            if bw <= 0:
                continue
            ratio = 0.5 if algorithm == TREE else n / steps(op, n)
            algbw = bw * ratio
            latency_us = _latency_us(algorithm, protocol, op, fabric, per_node)
            if algorithm == TREE:
                index = int(math.log2(max(nbytes, 64) / 64))
                if index < len(TREE_CORRECTION[protocol]):
                    algbw *= TREE_CORRECTION[protocol][index]
            if (algorithm == RING and protocol == SIMPLE and nodes > 1 and op == "allreduce"
                    and nbytes >= n / 16 * 65536):
                latency_us *= RING_PLATEAU
            latency_s = latency_us * 1e-6 + _extra_steps(algorithm, op, nodes) * fabric.net_extra_s
            found.append(Choice(algorithm, protocol, latency_s + nbytes / algbw, latency_s, algbw))
    return found


def choose(op: str, nbytes: float, fabric: Fabric, algorithm: str | None = None) -> Choice:
    """The quickest (algorithm, protocol) for the collective, as NCCL picks it; `algorithm` forces one
    (NCCL_ALGO), the protocol still chosen."""
    options = [c for c in choices(op, nbytes, fabric) if algorithm is None or c.algorithm == algorithm]
    return min(options, key=lambda c: c.seconds)


def bus_bandwidth(op: str, nbytes: float, ranks: int, seconds: float) -> float:
    """nccl-tests' bus bandwidth (bytes/s): the algorithm bandwidth (size / time) times 2(n-1)/n for an
    all-reduce, (n-1)/n for an all-gather or a reduce-scatter (doc/PERFORMANCE.md)."""
    factor = 2 * (ranks - 1) / ranks if op == "allreduce" else (ranks - 1) / ranks
    return nbytes / seconds * factor


def _bus_bandwidth(algorithm: str, protocol: str, op: str, fabric: Fabric, per_node: float) -> float:
    nodes = fabric.nodes
    raw = fabric.intra_bps if nodes == 1 else min(fabric.intra_bps, fabric.inter_bps)
    if algorithm == RING:
        if protocol == LL:
            return raw * (0.25 if nodes > 1 or op == "allreduce" else 1 / 3)
        if protocol == LL128:
            return raw * (0.7 if per_node < 2 else LL128_FRACTION)
        return raw
    # the tree: up to two hosts its bandwidth is the hosts' inside (its traffic across halves), beyond
    # them the network's; a ceiling either way
    tree_raw = fabric.intra_bps if nodes <= 2 else raw
    ceiling = TREE_MAX_GBS[nodes > 2][LL128 if protocol == LL128 else "other"] * 1e9
    bw = min(tree_raw * 0.9, ceiling)
    if protocol == LL:
        return bw / 3.8
    if protocol == LL128:
        return bw * (7 / 9 if nodes == 1 else 0.915)
    return bw


def _latency_us(algorithm: str, protocol: str, op: str, fabric: Fabric, per_node: float) -> float:
    n, nodes = fabric.ranks, fabric.nodes
    intra = HW_LATENCY_US[fabric.intra_hw][algorithm][protocol]
    inter = HW_LATENCY_US["net"][algorithm][protocol]
    if nodes > 1 and protocol == LL:
        intra *= 1.8
    base = BASE_LATENCY_US[algorithm][protocol]
    if algorithm == RING:
        total, across = steps(op, n), steps(op, nodes)
        if nodes == 1:
            return base + total * intra
        return base + (total - across) * intra + across * inter
    return base + 2 * ((per_node - 1) * intra + _log2i(nodes) * inter)


def _extra_steps(algorithm: str, op: str, nodes: int) -> int:
    """Steps between hosts a collective waits on in turn: a ring's, a tree's (up and down)."""
    if nodes <= 1:
        return 0
    return steps(op, nodes) if algorithm == RING else 2 * _log2i(nodes)


def _log2i(n: int) -> int:
    return max(0, int(n).bit_length() - 1)
