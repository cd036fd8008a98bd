"""What the low-communication techniques (diloco, sparseloco, hybrid) share.

They all train R replicas independently for H inner steps, then synchronize the
replicas once (an outer round). A replica is a group of hosts: one host training data
parallel over its PCIe (the default, one replica per host), or several hosts jointly
holding one replica as a pipeline (the hybrid). An inner step is not re-modelled here:
it is the study technique's own one-iteration schedule (data.py or pipeshard.py) built
on the replica's hosts, its ranks mapped onto the whole cluster's and its tags made
unique per inner step. So whatever Data or Pipeshard learn (microbatches, overheads)
the replicas inherit.

The schedule returned covers one outer round: iterations_per_program = H.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from geosim.inputs.case import Case
from geosim.inputs.runtime import runtime_of
from geosim.base.errors import GeosimError
from geosim.sim.schedule import HOST_IN_TAG, Collective, Compute, Device, Recv, Repeat, Schedule, Send
from geosim.inputs.specs import Cluster, Model, Params, Workload
from geosim.techniques import data as data_technique, fsdp as fsdp_technique, pipeshard as pipeshard_technique
from geosim.techniques._base import devices_of, overhead_op, require_divisible
from geosim.techniques._settings import option, tunable

# The outer step is element-wise over the replica's parameters, so memory-bound: about
# eight fp32 passes (read params, outer copy, momentum or error buffer, pseudo-gradient;
# write them back), i.e. 32 bytes per parameter at the GPU's memory bandwidth.
OUTER_STEP_BYTES_PER_PARAM = 32.0
# fp32 state kept beside the inner optimizer's: the outer (global) parameters, plus
# Nesterov's momentum (DiLoCo); plain SGD outer steps keep the outer copy only.
OUTER_STATE_BYTES = {"nesterov": 8.0, "sgd": 4.0}
OUTER_COPY_BYTES = 4.0
ERROR_FEEDBACK_BYTES = 4.0  # SparseLoCo's fp32 error-feedback accumulator
SYNC_BYTES_PER_PARAM = 4.0  # an updated fp32 shard shared inside a replica after the outer step


@dataclass
class Replica:
    hosts: tuple[str, ...]
    kind: str  # full (data parallel, or FSDP: its shards) | pipeline
    ranks: tuple[int, ...]  # global ranks, in host order
    programs: dict[int, list]  # one inner step, global ranks, tags not yet unique per step
    memory_parts: dict[int, dict[str, float]]
    held: dict[int, float]  # parameters each GPU holds (the model, or its pipeline stage's)
    stage_of: dict[int, int]  # rank -> pipeline stage (0 for full replicas)
    description: str


# The outer step's learning rate and momentum: what a live run trains with (live/train/techniques/); the
# simulated time depends on the outer optimizer's state, not on these. Each technique gives its paper's defaults.
def outer_lr_tunable(default: float, source: str):
    return tunable(default, "outer SGD learning rate (live runs)", low=1e-6, high=10.0, unit="factor", source=source)


def outer_momentum_tunable(default: float, source: str):
    return tunable(default, "outer Nesterov momentum, 0 for plain SGD (live runs)", low=0.0, high=0.999,
                   unit="fraction", source=source)


def replicas_option():
    return option(None, "host names of each replica (default: one replica per host)")


# Live's default where it differs, and why: a live run on CPU devices trains a few hundred steps, so H = 100
# would synchronize once or twice a run and its loss curve would show little of the technique
LIVE_DEFAULTS = {"inner_steps": 10}


def replica_hosts(cluster: Cluster, options: dict) -> list[tuple[str, ...]]:
    """options["replicas"]: lists of host names; default one replica per host."""
    groups = options.get("replicas") or [[h.name] for h in cluster.hosts]
    known = {h.name for h in cluster.hosts}
    seen: set[str] = set()
    for group in groups:
        for name in group:
            if name not in known or name in seen:
                raise GeosimError(f"replica hosts {groups} must name each host of the cluster at most once", key="replicas")
            seen.add(name)
    return [tuple(g) for g in groups]


def replica_workload(workload: Workload, replicas: int) -> Workload:
    """Each replica takes an equal share of the global batch: together they train the
    same tokens per inner step as Data does per iteration."""
    require_divisible("global_batch", workload.global_batch, replicas, "the number of replicas")
    return replace(workload, global_batch=workload.global_batch // replicas)


def build_replica(cluster: Cluster, hosts: tuple[str, ...], kind: str, model: Model, workload: Workload,
                  params: Params, technique: str, activation_compression: float = 1.0, full_inner: str = "data",
                  global_rank: dict | None = None) -> Replica:
    """One inner step of one replica, on the cluster's global ranks; a full replica's inner step is Data's,
    or FSDP's (full_inner="fsdp": the replica's GPUs shard it, INTELLECT-1's inner step). `global_rank`:
    global_ranks(cluster), which a caller building many replicas computes once."""
    sub = cluster.subset(hosts)
    case = Case(sub, model, workload, params)
    if kind == "full" and full_inner == fsdp_technique.NAME:
        inner = fsdp_technique.build(case, params.settings(fsdp_technique.NAME))
    elif kind == "full":
        inner = data_technique.build(case, params.settings(data_technique.NAME))
    else:
        inner = pipeshard_technique.build(case, replace(params.settings(pipeshard_technique.NAME),
                                                        meshes=tuple((h,) for h in hosts),
                                                        activation_compression=activation_compression))
    global_rank = global_rank if global_rank is not None else global_ranks(cluster)
    rank_of = {d.rank: global_rank[(d.host, d.local_index)] for d in inner.devices}
    overhead = overhead_op(technique, params, workload)
    # Tags are names matched within a group: the engine holds a collective's ranks, and a model
    # proves one sender per hop, by tag. Every replica runs the same inner step, so its tags get
    # the replica's name (its first host) appended: two replicas' all-reduces are two collectives,
    # not one of twice the ranks (which kept DiLoCo from the arithmetic collectives and the
    # symmetry). Appended, not prepended: a tag's first item is its label in traces.
    name = replica_name(hosts)
    programs = {}
    for local, ops in inner.programs.items():
        programs[rank_of[local]] = [overhead if type(op) is Compute and op.kind == "overhead"
                                    else _remap(op, rank_of, suffix=name) for op in ops]
    # the weights' bytes a parameter: live's JAX step keeps them fp32 whatever the precision, Alpa's in the precision
    weight_bytes = 4.0 if runtime_of(workload, params).memory_layout == "jax" else workload.bytes_per_value
    held = {rank_of[r]: parts["weights"] / weight_bytes for r, parts in inner.memory_parts.items()}
    stage_of = {rank_of[d.rank]: hosts.index(d.host) if kind == "pipeline" else 0 for d in inner.devices}
    return Replica(hosts, kind, tuple(sorted(programs)), programs,
                   {rank_of[r]: dict(p) for r, p in inner.memory_parts.items()}, held, stage_of, inner.description)


def global_ranks(cluster: Cluster) -> dict[tuple[str, int], int]:
    """{(host, local index): global rank} of the cluster's devices. Built once per build, not once per
    replica: a floor of DiLoCo on 1,024 hosts built it 1,024 times over 8,192 GPUs (1.7 of its 3.7 s; on
    4,096 hosts, 65,536 GPUs, quadratic: issue 44)."""
    return {(d.host, d.local_index): d.rank for d in devices_of(cluster)}


def replica_name(hosts: tuple[str, ...]) -> tuple:
    """What a replica's tags end with: its first host (each host is in one replica at most)."""
    return (HOST_IN_TAG, hosts[0])


# _remap makes ops field by field: a field added to an op must be added there too
_REMAPPED_FIELDS = {Send: ("dst", "nbytes", "tag", "p2p"), Recv: ("src", "tag"),
                    Collective: ("op", "group", "nbytes", "algorithm", "tag", "label"),
                    Repeat: ("ops", "count", "group", "tag", "label")}
if any(kind._fields != fields for kind, fields in _REMAPPED_FIELDS.items()):
    raise ImportError("geosim.techniques._lowcomm._remap does not know every field of the schedule's ops")


def _remap(op, rank_of: dict[int, int], prefix: tuple = (), suffix: tuple = ()):
    # each op made field by field rather than by _replace (a hybrid weighing 128 hosts remaps
    # hundreds of thousands of ops, and _replace goes through a dict of the fields)
    kind = type(op)
    if kind is Send:
        return Send(rank_of[op.dst], op.nbytes, prefix + op.tag + suffix, op.p2p)
    if kind is Recv:
        return Recv(rank_of[op.src], prefix + op.tag + suffix)
    if kind is Collective:
        return Collective(op.op, tuple(rank_of[r] for r in op.group), op.nbytes, op.algorithm,
                          prefix + op.tag + suffix, op.label)
    if kind is Repeat:  # e.g. Data's microbatches: its group and the ops inside move too
        return Repeat(tuple(_remap(inner, rank_of, prefix, suffix) for inner in op.ops), op.count,
                      tuple(rank_of[r] for r in op.group), prefix + op.tag + suffix, op.label)
    return op


def single_host_replicas(cluster: Cluster, options: dict, model: Model, workload: Workload, params: Params,
                         technique: str, state_bytes_per_param: float, state_part: str,
                         inner: str = "data") -> list[Replica]:
    """Full replicas (DiLoCo, SparseLoCo), each with its outer state: one per host by default, or
    the groups of options["replicas"], each data parallel over all of its hosts' GPUs (or sharded
    over them: inner="fsdp")."""
    groups = replica_hosts(cluster, options)
    inner_workload = replica_workload(workload, len(groups))
    ranks = global_ranks(cluster)
    replicas = [build_replica(cluster, g, "full", model, inner_workload, params, technique, full_inner=inner,
                              global_rank=ranks) for g in groups]
    add_outer_state(replicas, state_bytes_per_param, state_part)
    return replicas


def inner_step(replica: Replica, rank: int, step: int) -> list:
    """The replica's inner-step ops for `rank`, tagged with the step: the engine matches a
    send to its receive by tag within one program, and a program holds H steps."""
    identity = {r: r for r in replica.ranks}
    return [_remap(op, identity, ("inner", step)) for op in replica.programs[rank]]


def outer_step_op(device: Device, parameters: float, label: str = "outer step") -> Compute:
    """The outer optimizer's element-wise update of `parameters`, memory-bound."""
    seconds = parameters * OUTER_STEP_BYTES_PER_PARAM / (device.gpu.memory_bandwidth_gbs * 1e9)
    return Compute(0.0, label, kind="overhead", seconds=seconds)


def add_outer_state(replicas: list[Replica], state_bytes_per_param: float, part: str) -> None:
    """Memory: `state_bytes_per_param` fp32 bytes for every parameter a GPU holds."""
    if state_bytes_per_param <= 0:
        return
    for replica in replicas:
        for rank in replica.ranks:
            replica.memory_parts[rank][part] = replica.held[rank] * state_bytes_per_param


def sparse_gather_ops(replicas: list[Replica], payload_bytes, algorithm: str, devices: list[Device],
                      tag: tuple = ("outer",)) -> dict[int, list]:
    """SparseLoCo's synchronization: every replica's compressed pseudo-gradient is
    all-gathered (sparse payloads cannot be summed on the way like a ring all-reduce),
    then each replica decompresses, averages and steps locally.

    The parameters are cut into segments: one per pipeline stage if a replica is a
    pipeline (stage s of every replica syncs with stage s's slice of the others), else
    the whole model. A segment is sharded over the k GPUs that every replica has holding
    it: GPU j of each replica gathers shard j, steps it, and then shares it inside its
    replica (an all-gather over PCIe). payload_bytes(parameters) is the wire size.
    Every rank runs its collectives in one global order (segment, then phase), so no
    two ranks can wait on each other.
    """
    ops: dict[int, list] = {r: [] for rep in replicas for r in rep.ranks}
    pipelines = [rep for rep in replicas if rep.kind == "pipeline"]
    stages = len(pipelines[0].hosts) if pipelines else 1
    if any(len(p.hosts) != stages for p in pipelines):
        raise GeosimError("pipelined replicas must have the same number of stages", key="replicas")
    R = len(replicas)
    for s in range(stages):
        owners = []
        for rep in replicas:
            holding = [r for r in rep.ranks if rep.kind == "full" or rep.stage_of[r] == s]
            if rep.kind == "full":  # spread the segments' work over the replica's GPUs
                shift = s % len(holding)
                holding = holding[shift:] + holding[:shift]
            owners.append(holding)
        reference = pipelines[0] if pipelines else replicas[0]
        parameters = max(reference.held[r] for r in owners[replicas.index(reference)])
        k = min(len(o) for o in owners)
        for j in range(k):
            group = tuple(o[j] for o in owners)
            if R > 1:
                gather = Collective("all_gather", group, R * payload_bytes(parameters) / k, algorithm,
                                    tag + (s, "gather", j), "sparse pseudo-gradient all-gather")
                for rank in group:
                    ops[rank].append(gather)
            for rank in group:
                ops[rank].append(outer_step_op(devices[rank], parameters / k))
        for rep, o in zip(replicas, owners):
            if len(o) > 1:
                share = Collective("all_gather", tuple(sorted(o)), parameters * SYNC_BYTES_PER_PARAM, "ring",
                                   tag + (s, "share") + replica_name(rep.hosts),
                                   "updated parameters inside the replica")
                for rank in o:
                    ops[rank].append(share)
    return ops


def assemble(technique: str, devices: list[Device], replicas: list[Replica], inner_steps: int,
             sync_ops: dict[int, list], description: str, activation_compression: float = 1.0) -> Schedule:
    """H inner steps of every replica, then each rank's synchronization ops.

    The inner steps are one Repeat block per replica: a replica's steps are alike and its
    traffic stays inside it, so the engine simulates a few and skips the rest as it does
    for any other technique's repeated blocks (each step's tags are made unique by the
    block's repetition index)."""
    programs = {}
    for rep in replicas:
        for rank in rep.ranks:
            steps = Repeat(tuple(rep.programs[rank]), inner_steps, rep.ranks, ("inner",) + replica_name(rep.hosts),
                           "inner steps")
            programs[rank] = [steps] + sync_ops.get(rank, [])
    memory_parts = {r: parts for rep in replicas for r, parts in rep.memory_parts.items()}
    return Schedule(technique, devices, programs, {r: sum(p.values()) for r, p in memory_parts.items()}, memory_parts,
                    description, iterations_per_program=inner_steps,
                    activation_compression=activation_compression)


REPLICA_UNITS = ("host", "site")  # what holds one replica (--replica-per)


def check_replica_per(replica_per: str) -> None:
    if replica_per not in REPLICA_UNITS:
        raise GeosimError(f"must be one of {', '.join(REPLICA_UNITS)}, got {replica_per!r}", source="--replica-per")


def plan_variants(case: Case, hosts: tuple[str, ...], layout: dict | None = None, **_):
    """What a low-communication technique's planner tries (DiLoCo, SparseLoCo): a replica per host
    (the default), and where a site holds several hosts, a replica per site, data parallel inside
    it (what a cross-region run does: the wide-area links carry only the outer synchronization).
    A layout's replica_per (--replica-per): only that one."""
    replica_per = (layout or {}).get("replica_per")
    if replica_per != "site":
        yield {}, None
    if replica_per == "host":
        return
    groups = site_groups(case, hosts) if replica_per is None else by_site(case, hosts)
    if groups:
        yield {}, {"replicas": groups}


def layout_options(case: Case, hosts: tuple[str, ...], replica_per: str | None = None) -> dict:
    """--replica-per asked (DiLoCo, SparseLoCo): a replica per host (their default), or per site: the
    hosts asked of each site train one replica, data parallel over them."""
    check_replica_per(replica_per)
    return {"replicas": by_site(case, hosts)} if replica_per == "site" else {}


def by_site(case: Case, hosts: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The chosen hosts grouped by site, in the scenario's order."""
    groups: dict[str, list[str]] = {}
    for h in case.cluster.hosts:
        if h.name in hosts:
            groups.setdefault(h.site, []).append(h.name)
    return [tuple(v) for v in groups.values()]


def site_groups(case: Case, hosts: tuple[str, ...]) -> list[tuple[str, ...]] | None:
    """The chosen hosts by site (scenario order), where a replica per site differs from one per host
    and from a single replica: several sites, one of them with several hosts; else None."""
    groups = by_site(case, hosts)
    return groups if len(groups) > 1 and any(len(g) > 1 for g in groups) else None


def jax_placement(model, global_batch: int, microbatches: int, devices: int, stages: int | None = None):
    """How live's low-communication step places a replica on a device, for the memory model: Data's
    placement (each replica trains data parallel) plus 8 bytes a parameter, the fp32 outer parameters
    and the outer momentum (DiLoCo) or the error-feedback buffer (SparseLoCo), counted whole on every
    device: an upper bound, the buffer is sharded over a replica's devices."""
    inner = data_technique.jax_placement(model, global_batch, microbatches, devices)
    return replace(inner, extra_state_bytes=8.0 * model.num_params)
