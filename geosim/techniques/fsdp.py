"""FSDP / ZeRO-3 (PyTorch's fully_shard, DeepSpeed's stage 3): every parameter, gradient and optimizer
state sharded over a shard group; each unit of the model (the wrap policy: unit_layers transformer
blocks; the embedding, final norm and tied head are the root unit) is all-gathered just before its
forward, resharded after it, all-gathered again before its backward (unless reshard_after_forward is
off: then it stays whole from its forward to its backward, as ZeRO-2 keeps the weights), and its
gradient is reduce-scattered into the shards as soon as its backward is done. The optimizer steps
the shard only. Every microbatch gathers and reduce-scatters again (no no_sync: its unsharded
gradients would cost the memory FSDP saves).

Shard groups (shard_group): "all" shards over every GPU (full shard); "host" or "site" shards inside
each host or site and replicates across them (hybrid shard, PyTorch's HSDP): after the last
microbatch each GPU all-reduces its reduced gradient shard with the GPUs holding the same shard in
the other replicas. Across sites that all-reduce is the only wide-area traffic.

Prefetch: the engine runs one op at a time per GPU, so a collective on NCCL's own stream is written
as non-blocking sends, as data.py does for DDP's buckets: while a unit computes, the next unit's
all-gather (forward prefetch; backward prefetch of the unit before) and the previous unit's
reduce-scatter travel. Each is written as NCCL's two-level form over the shard group's hosts, so a
host's NICs carry what a ring carries: an all-gather's rail phase (each GPU sends its shard to the GPU
of the same local index on every other host) while the unit's attention half computes, then its
host phase (each GPU sends the shards of its rail, one message, to the other GPUs of its host) while
the MLP half computes; a reduce-scatter the other way round. Each GPU sends (S-1)/S of the unit, a
ring's bytes. A GPU waits for a unit only when it needs it. Where the shard group spans sites or
its hosts differ in GPUs (or prefetch is off), every gather and reduce-scatter is a collective the
network prices with the case's algorithm, one after another on the GPU (no overlap: an upper bound).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from geosim.inputs.case import Case
from geosim.base.errors import GeosimError
from geosim.inputs.runtime import runtime_of
from geosim.sim import memory_layout
from geosim.inputs.structure import host_list
from geosim.sim.schedule import HOST_IN_TAG, Collective, Compute, Recv, Repeat, Schedule, Send
from geosim.techniques import _floor
from geosim.techniques._base import (backward_multiplier, check_dims, combined, devices_of, forward_flops, launch_ops,
                                     microbatch_per_gpu, optimizer_op, overhead_op, update_op, work)
from geosim.techniques._settings import tunable
from geosim.techniques.data import jax_placement as data_placement
from geosim.base.units import MIB

NAME = "fsdp"
LABEL = "FSDP"
DESCRIPTION = ("parameters, gradients and optimizer state sharded; each unit all-gathered for its forward and "
               "backward, gradients reduce-scattered, prefetch overlapping compute; hybrid: shard inside a host or site")
# Not in what a command runs without --technique (predict, select, plan, sweep): the study's figures and
# verdicts are Alpa's four and the low-communication ones; `--technique fsdp` or `all` asks for it.
ON_REQUEST = True
SHARD_GROUPS = ("all", "host", "site")


@dataclass(frozen=True)
class Settings:
    shard_group: str = tunable("all", "what one shard group is: all GPUs (full shard), or each host or site "
                               "(hybrid shard: replicated across them)", choices=SHARD_GROUPS,
                               source="PyTorch FSDP's FULL_SHARD and HYBRID_SHARD (HSDP)")
    unit_layers: int = tunable(1, "transformer blocks per FSDP unit (the wrap policy)", low=1, unit="blocks",
                               source="torchtitan: fully_shard on every transformer block")
    reshard_after_forward: bool = tunable(True, "free a unit's gathered parameters after its forward and gather "
                                          "them again for its backward (false: kept, ZeRO-2-like)", unit="flag",
                                          source="PyTorch FSDP2's default (FULL_SHARD)")
    prefetch: bool = tunable(True, "the next unit's all-gather and the last unit's reduce-scatter overlap compute",
                             unit="flag", source="PyTorch FSDP's forward and backward prefetch")
    reduce_bytes_per_param: float = tunable(4.0, "bytes per gradient value reduce-scattered (and kept in the shard)",
                                            low=1.0, high=8.0, fit=(1.0, 8.0), unit="B/param",
                                            source="torchtitan's default mixed_precision_reduce = float32")


@dataclass(frozen=True)
class Shape:
    """How a case's GPUs hold the model: the shard groups, and the replica groups across them."""

    groups: tuple[tuple[int, ...], ...]  # ranks of each shard group
    group_hosts: tuple[tuple[str, ...], ...]  # the hosts of each
    replicas: tuple[tuple[int, ...], ...]  # the ranks holding the same shard, one per group (hybrid)
    units: int
    unit_params: float
    root_params: float

    @property
    def size(self) -> int:
        return len(self.groups[0])


def shape(case: Case, settings: Settings, devices) -> Shape:
    model = case.model
    if model.n_layer % settings.unit_layers:
        raise GeosimError(f"{model.name}'s {model.n_layer} layers are not a whole number of units of "
                          f"{settings.unit_layers}", key=f"{NAME}.unit_layers")
    host_of = {h.name: h for h in case.cluster.hosts}
    by: dict[str, list] = {}
    for d in devices:
        key = {"all": "all", "host": d.host, "site": host_of[d.host].site}[settings.shard_group]
        by.setdefault(key, []).append(d)
    groups = [tuple(d.rank for d in ds) for ds in by.values()]
    if len({len(g) for g in groups}) != 1:
        raise GeosimError(f"hybrid shard per {settings.shard_group} needs as many GPUs in every "
                          f"{settings.shard_group} (got {', '.join(str(len(g)) for g in groups)})", key="workload")
    hosts = tuple(tuple(dict.fromkeys(d.host for d in ds)) for ds in by.values())
    replicas = tuple(zip(*groups)) if len(groups) > 1 else ()
    return Shape(tuple(groups), hosts, replicas, model.n_layer // settings.unit_layers,
                 float(settings.unit_layers * model.params_per_layer), float(model.embedding_params))


def build(case: Case, settings: Settings) -> Schedule:
    model, workload, params = case.model, case.workload, case.params
    check_dims(model, workload)
    devices = devices_of(case.cluster)
    sh = shape(case, settings, devices)
    per_gpu = microbatch_per_gpu(workload, len(devices))
    runtime = runtime_of(workload, params)
    algorithm = params.for_technique("collectives", NAME)
    value = workload.bytes_per_value  # the 16-bit (or fp32) parameters gathered
    s = settings
    programs = {}
    overlapped = []
    for group, hosts in zip(sh.groups, sh.group_hosts):
        # hybrid: a group's tags carry its first host (two groups' collectives and blocks are two, not one of
        # twice the ranks); one group's carry none, so a symmetry that moves its hosts keeps its tags
        name = (HOST_IN_TAG, hosts[0]) if len(sh.groups) > 1 else ()
        rails = _rails(case, group, hosts, devices) if s.prefetch else None
        overlapped.append(rails is not None)
        unit = _Unit(model, workload, per_gpu, s.unit_layers, sh.unit_params * value,
                     sh.unit_params * s.reduce_bytes_per_param, rails, group, name, algorithm, launch_ops(runtime))
        for rank in group:
            micro = _microbatch(rank, unit, sh, s, name, algorithm, runtime, value, model, workload, per_gpu)
            programs[rank] = [Repeat(tuple(micro), workload.microbatches, group, ("microbatch",) + name,
                                     "microbatches")]
    shard_params = model.num_params / sh.size
    for j, replica in enumerate(sh.replicas):
        sync = combined("allreduce", replica, shard_params * s.reduce_bytes_per_param, algorithm,
                        ("fsdp-replicas", j), "gradient shard all-reduce across replicas", params, workload)
        for rank in replica:
            programs[rank].append(sync)
    for d in devices:
        programs[d.rank] += [optimizer_op(model, shard_params, flat_flops=10.0 * shard_params),
                             overhead_op(NAME, params, workload)]
    memory = memory_layout.per_device(
        devices, model, workload, params, runtime,
        lambda options: memory_layout.fsdp(model, per_gpu, workload.seq_len, sh.size, sh.unit_params,
                                           sh.root_params, options, s.reduce_bytes_per_param,
                                           2 if s.prefetch else 1, s.reshard_after_forward),
        lambda: jax_placement(model, workload.global_batch, workload.microbatches, len(devices)))
    kind = "full shard" if len(sh.groups) == 1 else f"hybrid shard per {s.shard_group} ({len(sh.groups)} replicas)"
    how = ("prefetched, overlapping compute" if all(overlapped)
           else "collectives one after another (no overlap)" if not any(overlapped) else "prefetched where a group "
           "is inside one site")
    return Schedule(NAME, devices, programs, {r: sum(m.values()) for r, m in memory.items()}, memory,
                    f"FSDP {kind} over {sh.size} GPUs, {sh.units} units of {s.unit_layers} block(s) "
                    f"({sh.unit_params * value / MIB:.1f} MiB gathered each), {how}; "
                    f"{workload.microbatches} microbatches of {per_gpu:g} sequences")


def _rails(case: Case, group, hosts, devices) -> dict | None:
    """rank -> (its rail peers on the other hosts, its host's other GPUs), for the two-level form; None
    where the group spans sites or its hosts hold different numbers of its GPUs."""
    site_of = {h.name: h.site for h in case.cluster.hosts}
    if len({site_of[h] for h in hosts}) > 1:
        return None
    on_host: dict[str, list[int]] = {h: [] for h in hosts}
    for r in group:
        on_host[devices[r].host].append(r)
    if len({len(v) for v in on_host.values()}) != 1:
        return None
    out = {}
    for h, ranks in on_host.items():
        for j, r in enumerate(ranks):
            out[r] = (tuple(on_host[o][j] for o in hosts if o != h), tuple(q for q in ranks if q != r))
    return out


@dataclass(frozen=True)
class _Unit:
    """What one unit's ops need: its compute, its bytes, and the group's two-level peers."""

    model: object
    workload: object
    sequences: float
    layers: int
    gather_bytes: float  # the unit's parameters, gathered whole
    reduce_bytes: float  # the unit's gradient, reduced
    rails: dict | None
    group: tuple
    name: tuple
    algorithm: str
    launch: tuple

    def compute(self, phase: str, part: str) -> Compute:
        """The forward or backward of the unit's attention or MLP half, or of the head and loss ("head")."""
        head = part == "head"
        flops = forward_flops(self.model, self.workload, self.sequences, 0 if head else self.layers, head)
        flops *= (1.0 if head else 0.5) * (backward_multiplier(self.workload) if phase == "backward" else 1.0)
        return Compute(flops, f"{phase} {part}",
                       work=work(phase, self.model, self.workload, self.sequences, 0 if head else self.layers, head,
                                 False, part="block" if head else part))

    def collective(self, op: str, tag: str) -> tuple:
        nbytes = self.gather_bytes if op == "all_gather" else self.reduce_bytes
        if len(self.group) == 1:
            return ()
        return self.launch + (Collective(op, self.group, nbytes, self.algorithm, (tag,) + self.name,
                                         f"unit {'all-gather' if op == 'all_gather' else 'reduce-scatter'}"),)

    def phase(self, rank: int, op: str, hop: str, tag: tuple) -> tuple[list, list]:
        """(sends, receives) of one hop of a unit's all-gather or reduce-scatter (the two-level form)."""
        rail, local = self.rails[rank]
        share = (self.gather_bytes if op == "ag" else self.reduce_bytes) / len(self.group)
        peers, nbytes = (rail, share) if hop == "rail" else (local, share * (len(rail) + 1))
        return ([Send(q, nbytes, (f"fsdp-{op}-{hop}",) + tag, p2p=False) for q in peers],
                [Recv(q, (f"fsdp-{op}-{hop}",) + tag) for q in peers])


def _microbatch(rank, unit: _Unit, sh: Shape, s: Settings, name, algorithm, runtime, value, model, workload,
                per_gpu) -> list:
    """One microbatch on `rank`: the root gathered, the forward unit by unit, the backward, the root's
    gradient reduce-scattered, the shard's gradient accumulated."""
    L = sh.units
    root = _Unit(model, workload, per_gpu, 0, sh.root_params * value, sh.root_params * s.reduce_bytes_per_param,
                 None, unit.group, name, algorithm, unit.launch)
    ops = list(root.collective("all_gather", "fsdp-root-ag"))
    ops.append(Compute(0.0, "forward embedding", work=work("forward", model, workload, per_gpu, 0, False, True)))
    ops += _forward(rank, unit, L)
    ops += [unit.compute("forward", "head"), unit.compute("backward", "head")]
    ops += _backward(rank, unit, L, s.reshard_after_forward)
    ops.append(Compute(0.0, "backward embedding", work=work("backward", model, workload, per_gpu, 0, False, True)))
    ops += root.collective("reduce_scatter", "fsdp-root-rs")
    ops.append(update_op(model, model.num_params / sh.size))
    return ops


def _forward(rank, unit: _Unit, L: int) -> list:
    if unit.rails is None:
        each = unit.collective("all_gather", "fsdp-ag") + (unit.compute("forward", "attention"),
                                                           unit.compute("forward", "mlp"))
        return [Repeat(each, L, unit.group, ("fsdp-fwd",) + unit.name, "units forward")]
    ops = list(unit.collective("all_gather", "fsdp-ag-first"))
    if L > 1:  # unit i computes while unit i + 1 is gathered
        body = _overlap(rank, unit, "forward", ("attention", "mlp"), gather=True, reduce=False)
        ops.append(Repeat(tuple(body), L - 1, unit.group, ("fsdp-fwd",) + unit.name, "units forward, prefetched"))
    return ops + [unit.compute("forward", "attention"), unit.compute("forward", "mlp")]


def _backward(rank, unit: _Unit, L: int, reshard: bool) -> list:
    if unit.rails is None:
        each = ((unit.collective("all_gather", "fsdp-ag") if reshard else ())
                + (unit.compute("backward", "mlp"), unit.compute("backward", "attention"))
                + unit.collective("reduce_scatter", "fsdp-rs"))
        # the last unit's parameters are still whole from its forward (FSDP keeps what the backward needs next)
        first = (unit.compute("backward", "mlp"), unit.compute("backward", "attention")) + unit.collective(
            "reduce_scatter", "fsdp-rs-last")
        ops = list(first)
        if L > 1:
            ops.append(Repeat(each, L - 1, unit.group, ("fsdp-bwd",) + unit.name, "units backward"))
        return ops
    parts = ("mlp", "attention")  # a block's backward runs its MLP half first
    if L == 1:
        return [unit.compute("backward", p) for p in parts] + list(unit.collective("reduce_scatter", "fsdp-rs-0"))
    # the last unit: still whole; the one before it gathered meanwhile
    ops = _overlap(rank, unit, "backward", parts, gather=reshard, reduce=False, tag=("last",))
    if L > 2:  # unit i computes while unit i - 1 is gathered and unit i + 1's gradient reduce-scattered
        body = _overlap(rank, unit, "backward", parts, gather=reshard, reduce=True)
        ops.append(Repeat(tuple(body), L - 2, unit.group, ("fsdp-bwd",) + unit.name, "units backward, prefetched"))
    ops += _overlap(rank, unit, "backward", parts, gather=False, reduce=True, tag=("first",))
    return ops + list(unit.collective("reduce_scatter", "fsdp-rs-0"))


def _hops(rank, unit: _Unit, tag: tuple, gather_hop: str | bool, reduce_hop: str | bool) -> tuple[list, list]:
    """The sends and receives of one hop of the all-gather (if `gather_hop` names it) and then one of the
    reduce-scatter (if `reduce_hop` does)."""
    sends, recvs = [], []
    for kind, hop in (("ag", gather_hop), ("rs", reduce_hop)):
        if hop:
            s, r = unit.phase(rank, kind, hop, tag)
            sends += s
            recvs += r
    return sends, recvs


def _overlap(rank, unit: _Unit, phase: str, parts: tuple[str, str], gather: bool, reduce: bool,
             tag: tuple = ()) -> list:
    """A unit's compute in its two halves, a neighbour's all-gather (rail hop, then host hop) and another's
    reduce-scatter (host hop, then rail hop) travelling meanwhile, each hop's receives where the GPU next
    needs them."""
    first_sends, first_recvs = _hops(rank, unit, tag, gather and "rail", reduce and "local")
    second, second_recvs = _hops(rank, unit, tag, gather and "local", reduce and "rail")
    ops = first_sends + [unit.compute(phase, parts[0])] + first_recvs
    return ops + second + [unit.compute(phase, parts[1])] + second_recvs


def plan_floor_s(case: Case, hosts: tuple[str, ...], workload, options: dict | None) -> float:
    """The busiest GPU's compute and its blocking collectives back to back (geosim.techniques._floor): the
    prefetched gathers and reduce-scatters are sends, which count nothing, so overlap cannot undercut it."""
    return _floor.plan_floor_s(case, hosts, workload, options, NAME)


def layout_options(case: Case, hosts: tuple[str, ...], replica_per: str | None = None) -> dict:
    """--replica-per host|site: hybrid shard, sharded inside each host (site) and replicated across them."""
    if replica_per not in SHARD_GROUPS[1:]:
        raise GeosimError(f"must be one of {', '.join(SHARD_GROUPS[1:])}, got {replica_per!r}", source="--replica-per")
    return {"shard_group": replica_per}


def plan_variants(case: Case, hosts: tuple[str, ...], layout: dict | None = None, **_):
    """Full shard, and where the hosts asked span several hosts (sites), hybrid shard per host (site)."""
    asked = (layout or {}).get("replica_per")
    if asked is not None:
        yield {}, {"shard_group": asked}
        return
    yield {}, None
    chosen = [h for h in case.cluster.hosts if h.name in hosts]
    if len(chosen) > 1 and len({len(h.gpus) for h in chosen}) == 1 and len(chosen[0].gpus) > 1:
        yield {}, {"shard_group": "host"}
    sites = {}
    for h in chosen:
        sites.setdefault(h.site, []).append(h)
    if len(sites) > 1 and any(len(v) > 1 for v in sites.values()):
        yield {}, {"shard_group": "site"}


def variant_label(hosts: tuple[str, ...], workload, options: dict | None) -> str:
    group = (options or {}).get("shard_group", "all")
    how = "full shard" if group == "all" else f"hybrid shard per {group}"
    return f"{LABEL} on {host_list(hosts)} ({how})"


def jax_placement(model, global_batch: int, microbatches: int, devices: int, stages: int | None = None):
    """live's FSDP step (live/train/techniques/fsdp.py): parameters and Adam's moments sharded over the data
    axis (1/n each, fp32), the gradient summed onto the shards; a microbatch's whole gradient (before its
    reduce-scatter) counted as ZeRO-2's is. Against XLA's CPU buffer assignment of that step on 4 devices
    (tiny, fp32, bench/bench_memory.py's cases): -4.0% at 2 microbatches, -6.0% with remat, -10.3% at 4
    (docs/results/2026-11-28-fsdp.md)."""
    shard = model.num_params / devices
    return replace(data_placement(model, global_batch, microbatches, devices), params_held=shard, grads_held=shard,
                   optimizer_held=shard, tree_accumulator=False)
