"""A floor under a schedule's predicted time, from the schedule alone (no simulation).

The engine runs each GPU's ops one after another, so an iteration takes at least the
busiest GPU's ops back to back: its compute at the kernel timer's time (the engine's
own timer), and each collective at least the bytes that must cross a host's network
port or a site's wide-area links, at their full bandwidth. Those bytes follow from what
the collective computes, whatever its algorithm: an all-reduce's result on a host needs
the other hosts' whole buffer to enter it (B), a reduce-scatter's the host's share of it
(k/n x B), an all-gather's everything the host lacks ((n - k)/n x B); a ring enters every
host it spans at least once per step, a chunk of B/n each (2(n-1) steps for an all-reduce,
n-1 for the others), whichever is more. The network backend
never moves a hop's bytes faster than its bandwidth, so the floor never exceeds the
prediction (tests/test_plan_scale.py checks it). Point-to-point sends count nothing.

A ring all-reduce over sockets is also bounded by its steps' order: each rank's
sends go one after another on its one connection to its successor, and each waits for the
chunk its predecessor sent the step before; a rank leaves no sooner than one lap of the ring's
least step delays plus (n - 2) x the slowest edge's least hold of its connection
(geosim.sim.collectives.ring_allreduce_floor; the TCP window caps a flow at window / RTT: what a
wide-area ring is limited by).

The planner (geosim.studies.plan) simulates options in the order of their floors and
stops once no floor can beat the options kept: a tight floor is what lets it simulate a
handful of a 1,024-GPU cluster's options instead of all of them.
"""

from __future__ import annotations

from geosim.base.errors import GeosimError
from geosim.inputs.runtime import runtime_of
from geosim.sim.collectives import ring_allreduce_floor
from geosim.sim.engine import compute_timer
from geosim.sim.network import least_step
from geosim.sim.schedule import Collective, Compute, Repeat, Schedule
from geosim.sim.network.fabric import uses_rdma
from geosim.techniques import build_schedule


def schedule_floor_s(case, schedule: Schedule, workload) -> float:
    """startup + programs x the busiest GPU's ops back to back (seconds, slightly under)."""
    cluster, params = case.cluster, case.params
    # the compute as predict times it: under the runtime's kernel choices (fused attention, TF32, its gap)
    seconds = compute_timer(schedule, runtime_of(workload, params).applied_to(params), workload)
    host_of = {d.rank: d.host for d in schedule.devices}
    hosts = {h.name: h for h in cluster.hosts}
    ingress = {name: (h.nic_bps or params.lan_bandwidth_bps) / 8 * (len(h.gpus) if h.nic == "per-gpu" else 1)
               for name, h in hosts.items()}
    site_of = {name: h.site for name, h in hosts.items()}
    wan = _site_capacity(cluster)
    collective_cache: dict[tuple, float] = {}
    steps: list = []  # the network's step floors and ring floors known, looked up at the first ring that needs them

    # the bandwidth bounds hold for the TCP model (a hop's FCFS server never beats its bandwidth);
    # other network backends (ideal, alpha-beta) get the compute floor alone
    # (fabric is the TCP model where no route runs over NVLink or RDMA; NCCL's rings over a host's rails
    # beat one port's bandwidth, so a fabric cluster with them gets the compute floor alone)
    bounded = getattr(case, "network", "tcp") == "tcp" or (getattr(case, "network", "tcp") == "fabric"
                                                          and not uses_rdma(cluster))

    def collective_s(op: Collective) -> float:
        if not bounded:
            return 0.0
        # by the group's identity: hashing a group of 65,536 ranks on each of 328,000 calls was most of a
        # DiLoCo floor on scale:1x4096x16 (the schedule keeps its groups alive while this runs)
        key = (op.op, id(op.group), op.nbytes, op.algorithm)
        if key not in collective_cache:
            floor = _collective_floor(op, host_of, site_of, ingress, wan)
            if floor > 0 and op.op == "allreduce" and op.algorithm in ("ring", "hierarchical"):
                # across hosts (the bandwidth bound is 0 inside one: NVLink collectives are NCCL's model)
                if not steps:
                    steps.extend(_steps_of(case, schedule))
                step, rings = steps
                if step is not None:
                    ring_key = (op.group, op.nbytes, op.algorithm)
                    if ring_key not in rings:
                        rings[ring_key] = ring_allreduce_floor(op.group, op.nbytes, op.algorithm, step,
                                                               tuple(d.host for d in schedule.devices))
                    floor = max(floor, rings[ring_key])
            collective_cache[key] = floor
        return collective_cache[key]

    def ops_s(rank: int, ops) -> float:
        total = 0.0
        for op in ops:
            kind = type(op)
            if kind is Compute:
                total += op.seconds if op.kind == "overhead" else seconds(rank, op)
            elif kind is Collective:
                total += collective_s(op)
            elif kind is Repeat:
                total += op.count * ops_s(rank, op.ops)
        return total

    busiest, done = 0.0, {}
    for rank, program in schedule.programs.items():
        key = (id(program), schedule.devices[rank].gpu.name)  # ranks sharing a program and a GPU kind
        if key not in done:
            done[key] = ops_s(rank, program)
        busiest = max(busiest, done[key])
    programs = max(1.0, workload.iterations_per_epoch * workload.epochs / schedule.iterations_per_program)
    startup = runtime_of(workload, params).startup(schedule.technique, params)  # the runtime's, as predict() adds
    return (startup + programs * busiest) * (1 - 1e-9)


def _site_capacity(cluster) -> dict[str, float]:
    """Bytes per second that can enter each site over the scenario's links (links inside a site excluded)."""
    site_of = {h.name: h.site for h in cluster.hosts}
    capacity: dict[str, float] = {}
    for link in cluster.links:
        a, b = site_of.get(link.a, link.a), site_of.get(link.b, link.b)
        if a != b:
            for site in (a, b):
                capacity[site] = capacity.get(site, 0.0) + link.bandwidth_bps / 8
    return capacity


def _collective_floor(op: Collective, host_of, site_of, ingress, wan) -> float:
    n = len(op.group)
    if n < 2:
        return 0.0
    per_host: dict[str, int] = {}
    for r in op.group:
        per_host[host_of[r]] = per_host.get(host_of[r], 0) + 1
    if len(per_host) < 2:
        return 0.0  # inside one host: PCIe or NVLink, not bounded here
    per_site: dict[str, int] = {}
    for h, k in per_host.items():
        per_site[site_of[h]] = per_site.get(site_of[h], 0) + k

    entering: dict[str, int] = {}  # a ring all-reduce: its edges into each host and each site
    if op.algorithm == "ring" and op.op == "allreduce":
        for i, r in enumerate(op.group):
            before, here = op.group[i - 1], host_of[r]
            if host_of[before] != here:
                entering["host", here] = entering.get(("host", here), 0) + 1
                if site_of[host_of[before]] != site_of[here]:
                    entering["site", site_of[here]] = entering.get(("site", site_of[here]), 0) + 1

    def must_enter(k: int, where: tuple) -> float:
        if op.op == "all_to_all":  # each of the k ranks receives 1/n of its buffer from each rank elsewhere
            return op.nbytes * k * (n - k) / n
        if op.algorithm == "ring" and op.op == "allreduce":
            # from any rank's entry on, each edge of the ring sends n - 1 chunks of B / n before that rank
            # can leave (geosim.sim.collectives.ring_allreduce_floor), through the port of the host (site)
            # it enters; all 2(n - 1) may not: ranks reach a repeated all-reduce apart, a sender's first
            # chunks leave before a late rank arrives (tests/test_ring_floor.py found a case)
            return op.nbytes * (n - 1) / n * entering.get(where, 0)
        if op.algorithm == "ring":  # the ring enters a host at least once per step: a chunk of B / n
            return op.nbytes * (n - 1) / n
        if op.op == "allreduce":
            return op.nbytes
        if op.op == "reduce_scatter":
            return op.nbytes * k / n
        return op.nbytes * (n - k) / n  # all_gather

    worst = max(must_enter(k, ("host", h)) / ingress[h] for h, k in per_host.items())
    if len(per_site) > 1:
        worst = max(worst, max(must_enter(k, ("site", s)) / wan[s] if wan.get(s) else 0.0 for s, k in per_site.items()))
    return worst


# (id of the params, network, each rank's host) -> (the cluster's links and hosts, the params, the network's
# least_step_s, the ring floors known): the planner weighs thousands of options on a few sets of VMs; a
# network of a 1,024-GPU cluster prices its routes once, not at every option
_STEPS: dict[tuple, tuple] = {}


def _steps_of(case, schedule: Schedule) -> tuple:
    """(the network's least_step_s or None, a dict of ring floors by group, bytes and algorithm) for the case's
    cluster and the schedule's devices, cached."""
    cluster, params = case.cluster, case.params
    network = getattr(case, "network", "tcp")
    key = (id(params), network, tuple(d.host for d in schedule.devices))
    known = _STEPS.get(key)
    if (known is None or known[0] is not cluster.links or known[2] is not params or len(known[1]) != len(cluster.hosts)
            or any(a is not b for a, b in zip(known[1], cluster.hosts))):
        if len(_STEPS) >= 8:  # a 1,024-GPU network holds a route per pair of ranks it was asked: keep few
            _STEPS.clear()
        known = _STEPS[key] = (cluster.links, cluster.hosts, params,
                               least_step(network, cluster, params, schedule.devices), {})
    return known[3:]


def plan_floor_s(case, hosts: tuple[str, ...], workload, options: dict | None, technique: str) -> float:
    """A technique's floor on `hosts`: its schedule's (0 where the schedule cannot be built: predict()
    reports why, at the cost of a build)."""
    on = case.on(hosts).with_(workload=workload)
    try:
        schedule = build_schedule(technique, on, options)
    except GeosimError:
        return 0.0
    return schedule_floor_s(on, schedule, workload)
