"""Heterogeneous low-bandwidth pre-training (Obeidi et al. 2026, arXiv:2601.02360):
hosts that can hold a full replica train one each (data parallel over their PCIe);
hosts that cannot are grouped to hold one replica jointly as a pipeline (one stage per
host, Pipeshard's 1F1B schedule) whose activations and activation-gradients cross
between stages compressed (subspace projection: bytes x activation_compression).
All replicas synchronize every H steps with SparseLoCo, stage by stage: stage s of a
pipelined replica syncs its slice of the parameters with the same slice of the others.

Which hosts hold full replicas: the replicas setting (a one-host group is a full
replica, a longer group a pipeline, in stage order), else automatic: a host is a full
replica if every GPU of it fits the model, its activations and the SparseLoCo state;
the others form one pipeline. A lone host that fits nothing makes the technique
infeasible (it has no partner to pipeline with). Where every host fits, this is
SparseLoCo; where none does, one compressed pipeline (no outer synchronization).

With replica_per = "site" (per run: the planner tries it where a site holds several hosts),
what holds one full replica is a site rather than a host: a site whose GPUs fit the model
trains one replica data parallel over all of its hosts (as DiLoCo's and SparseLoCo's
replica per site does), and the hosts of the sites that do not fit form the pipeline.

Settings: SparseLoCo's (from the params file's [sparseloco]) plus activation_compression
(from [hybrid]); replicas and replica_per are per run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from geosim.base.errors import GeosimError
from geosim.sim.schedule import Schedule
from geosim.inputs.case import Case
from geosim.inputs.specs import GIB, Cluster, Model, Params, Workload
from geosim.inputs.structure import hosts_at, sites
from geosim.inputs.runtime import runtime_of
from geosim.techniques import _floor, pipeshard, sparseloco
from geosim.techniques._base import check_dims, devices_of
from geosim.techniques._pipeline_floor import iteration_floor_s
from geosim.techniques._settings import option, tunable, with_options
from geosim.techniques._lowcomm import (REPLICA_UNITS, add_outer_state, assemble, build_replica, check_replica_per,
                                        global_ranks, replica_hosts, replica_workload, site_groups, sparse_gather_ops)

NAME = "hybrid"
# counted units (geosim.cost.schedule_work) its predictions simulate per CPU second, as measured for its row
# on the largest bench cluster it runs on, 2 shared cores (docs/results/2026-11-28-every-row.md): cost.expected_seconds
SIMULATED_UNITS_PER_CPU_S = 0.67e6
LOW_COMMUNICATION = True  # more tokens for the same loss: ranked on time to a target
LABEL = "Hybrid"  # how tables and verdicts name it
DESCRIPTION = ("full replicas where memory allows, compressed pipelines of the other hosts, "
               "SparseLoCo between replicas")
BUILDS_ON = ("data", "pipeshard", "sparseloco")
PIPELINED = True  # where it pools hosts into a pipelined replica
# for convergence.py: where every host holds a full replica the run is SparseLoCo's (its token
# efficiency is SparseLoCo's), and this technique's own entry already counts its compression
WITHOUT_PIPELINE_IS = sparseloco.NAME
EFFICIENCY_COUNTS_COMPRESSION = True


@dataclass(frozen=True)
class Settings(sparseloco.Settings):
    activation_compression: float = tunable(0.1, "bytes sent between pipelined stages x this (subspace projection, "
                                            "10x)", low=1e-6, high=1.0, unit="fraction",
                                            source="Obeidi et al. 2026")
    replica_per: str = option("host", "what holds a full replica where memory allows: a host, or a site "
                              "(data parallel over its hosts)")




# whether a one-host unit holds a full replica, by what decides it (the host's GPUs, its intra-host link
# and NICs, the model, the workload, the parameters, the state and the replica count; not its name or
# site): a 1,024-GPU cluster's 128 like hosts cost one build, and the floor's layout and build()'s share
# them. The params object is held with its answer, so its id is not reused while the entry is kept.
_FITS: dict[tuple, tuple] = {}


def _fits(cluster: Cluster, hosts: tuple[str, ...], model: Model, workload: Workload, params: Params, state: float,
          replicas: int) -> bool:
    if len(hosts) != 1:
        return _fits_built(cluster, hosts, model, workload, params, state, replicas)
    host = cluster.host(hosts[0])
    key = (host.gpus, host.intra_host, host.nic, model, workload, id(params), state, replicas)
    known = _FITS.get(key)
    if known is None or known[0] is not params:
        if len(_FITS) >= 256:
            _FITS.clear()
        known = _FITS[key] = (params, _fits_built(cluster, hosts, model, workload, params, state, replicas))
    return known[1]


def _fits_built(cluster: Cluster, hosts: tuple[str, ...], model: Model, workload: Workload, params: Params,
                state: float, replicas: int) -> bool:
    # these hosts' share of the batch, rounded up until it splits over the microbatches and
    # their GPUs: a memory question, not a divisibility one (build() reports that)
    gpus = sum(len(cluster.host(h).gpus) for h in hosts)
    per_microbatch = -(-workload.global_batch // (replicas * workload.microbatches * gpus)) * gpus
    share = replace(workload, global_batch=per_microbatch * workload.microbatches)
    replica = build_replica(cluster, hosts, "full", model, share, params, NAME)
    gpus = {d.rank: d.gpu for d in devices_of(cluster)}
    return all(sum(replica.memory_parts[r].values()) + replica.held[r] * state <= gpus[r].memory_gib * GIB
               for r in replica.ranks)


def plan_replicas(cluster: Cluster, model: Model, workload: Workload, params: Params, state: float,
                  replicas: tuple | None, per: str = "host") -> list[tuple[str, ...]]:
    """The hosts of each replica (the pipelined one, if any, last)."""
    return [hosts for hosts, _ in replica_layout(cluster, model, workload, params, state, replicas, per)]


def replica_layout(cluster: Cluster, model: Model, workload: Workload, params: Params, state: float,
                   replicas: tuple | None, per: str = "host") -> list[tuple[tuple[str, ...], str]]:
    """(hosts, full | pipeline) of each replica: the replicas option's groups (one host: full; more: a
    pipeline), else every unit (a host, or a site's hosts) that fits a full replica, and the hosts of
    the others pooled into one pipeline, a stage per host."""
    if replicas:
        return [(g, "full" if len(g) == 1 else "pipeline") for g in replica_hosts(cluster, {"replicas": replicas})]
    if per not in REPLICA_UNITS:
        raise GeosimError(f"replica_per must be one of {', '.join(REPLICA_UNITS)}, got {per!r}", key="hybrid.replica_per")
    hosts = [h.name for h in cluster.hosts]
    units = [(h,) for h in hosts] if per == "host" else [hosts_at(cluster, site) for site in sites(cluster)]
    pooled: list[tuple[str, ...]] = []
    while True:  # fewer replicas means a bigger share of the batch each: re-check until stable
        full = [u for u in units if u not in pooled]
        count = len(full) + (1 if pooled else 0)
        unfit = [u for u in full if not _fits(cluster, u, model, workload, params, state, count)]
        if not unfit:
            break
        pooled += unfit
    pipeline = sorted((h for u in pooled for h in u), key=hosts.index)
    if len(pipeline) == 1:
        raise GeosimError(f"host {pipeline[0]} cannot hold a full replica and has no partner to pipeline with",
                          key="replicas")
    return [(u, "full") for u in full] + ([(tuple(pipeline), "pipeline")] if pipeline else [])


def build(case: Case, settings: Settings) -> Schedule:
    cluster, model, workload, params = case.cluster, case.model, case.workload, case.params
    check_dims(model, workload)
    s = settings
    compression = s.activation_compression
    state = sparseloco.state_bytes_per_param(s)
    devices = devices_of(cluster)
    groups = replica_layout(cluster, model, workload, params, state, s.replicas, s.replica_per)
    inner = replica_workload(workload, len(groups))
    ranks = global_ranks(cluster)  # once, not once per replica
    replicas = [build_replica(cluster, g, kind, model, inner, params, NAME, activation_compression=compression,
                              global_rank=ranks) for g, kind in groups]
    add_outer_state(replicas, state, "outer state + error feedback" if s.error_feedback else "outer state")
    sync = sparse_gather_ops(replicas, lambda n: sparseloco.payload_bytes(n, s), params.for_technique("collectives", NAME),
                             devices)
    kinds = ", ".join(("+".join(r.hosts) + (f" pipelined x{compression:g}" if r.kind == "pipeline" else " full"))
                      for r in replicas)
    pipelined = any(r.kind == "pipeline" and len(r.hosts) > 1 for r in replicas)
    return assemble(NAME, devices, replicas, s.inner_steps, sync,
                    f"{len(replicas)} replicas ({kinds}), H={s.inner_steps}, SparseLoCo top-{s.topk_fraction:g} "
                    f"x {s.bits}-bit", activation_compression=compression if pipelined else 1.0)


def plan_variants(case: Case, hosts: tuple[str, ...], layout: dict | None = None, **_):
    """What the planner tries: a full replica per host where it fits (the default), and where a site
    holds several of the hosts, a full replica per site, data parallel over its hosts, as DiLoCo and
    SparseLoCo offer (geosim.techniques._lowcomm.plan_variants). Where every site holds its replica
    that option is SparseLoCo's replica per site, which the planner already weighs, and where none
    does it is the per-host option's one pipeline: it is offered only where both kinds of replica
    are left. A layout's replica_per (--replica-per): only that one, wherever it differs or not."""
    replica_per = (layout or {}).get("replica_per")
    if replica_per == "site":
        yield {}, {"replica_per": "site"}
        return
    yield {}, None
    if replica_per is None and site_groups(case, hosts):
        on = case.on(hosts)
        state = sparseloco.state_bytes_per_param(on.params.settings(NAME))
        try:
            layout = replica_layout(on.cluster, on.model, on.workload, on.params, state, None, "site")
        except GeosimError:
            return  # predict() would say why; the per-host option already does
        # a site of several hosts holds a replica and another site's hosts pipeline: else this is either
        # SparseLoCo's replica per site or the per-host option's layout (no site fits: all pooled)
        if any(kind == "pipeline" for _, kind in layout) and any(kind == "full" and len(g) > 1 for g, kind in layout):
            yield {}, {"replica_per": "site"}


def layout_options(case: Case, hosts: tuple[str, ...], replica_per: str | None = None) -> dict:
    """--replica-per asked: what holds a full replica where memory allows, a host (the default) or a site."""
    check_replica_per(replica_per)
    return {"replica_per": replica_per}


def plan_floor_s(case: Case, hosts: tuple[str, ...], workload, options: dict | None) -> float:
    """A replica per site: the busiest GPU's inner steps and synchronization back to back
    (geosim.techniques._floor, at the cost of a build). A replica per host (the default), without a
    build: each inner step of a pipelined replica is at least Pipeshard's floor under one iteration
    of that pipeline (its busiest stage's microbatches with the fill and drain, and its microbatches'
    round trips with each crossing's least delay on the whole cluster's network, activations
    compressed), plus the hybrid's fixed overhead per step; a run is startup plus its outer rounds
    of H such steps (the synchronization counted as nothing). Where every host holds a full
    replica there is no pipeline: no floor. tests/test_plan_scale.py checks it stays under the
    prediction."""
    if options and options.get("replica_per", "host") != "host":
        return _floor.plan_floor_s(case, hosts, workload, options, NAME)
    on = case.on(hosts).with_(workload=workload)
    cluster, model, params = on.cluster, on.model, on.params
    try:
        s = with_options(params.settings(NAME), options, NAME)
        check_dims(model, workload)
        groups = replica_layout(cluster, model, workload, params, sparseloco.state_bytes_per_param(s), s.replicas,
                                s.replica_per)
        inner = replica_workload(workload, len(groups))
    except GeosimError:
        return 0.0  # predict() says why
    pipelines = [g for g, kind in groups if kind == "pipeline" and len(g) > 1]
    if not pipelines:
        return 0.0
    stage = replace(params.settings(pipeshard.NAME), activation_compression=s.activation_compression)
    b = inner.global_batch / inner.microbatches
    step = 0.0
    for pipeline in pipelines:
        sub = cluster.subset(pipeline)
        meshes = [[d for d in devices_of(sub) if d.host == h] for h in pipeline]
        if stage.intra_stage == "data" and (b != int(b) or any(int(b) % len(m) for m in meshes)):
            return 0.0  # build() refuses it: predict() says why
        try:
            layers = pipeshard.layers_per_stage(Case(sub, model, inner, params), meshes,
                                                replace(stage, meshes=tuple((h,) for h in pipeline)))
        except GeosimError:
            return 0.0
        # the whole case's network (the pipeline's sends cross it beside the other replicas' traffic)
        step = max(step, iteration_floor_s(
            case, hosts, inner, {"meshes": [[h] for h in pipeline], "layer_split": layers,
                                 "activation_compression": s.activation_compression}))
    runtime = runtime_of(workload, params)
    step += runtime.iteration_overhead_s(NAME, params, inner)  # build_replica's overhead op, per inner step
    steps = max(1.0, workload.iterations_per_epoch * workload.epochs / s.inner_steps) * s.inner_steps
    # 1e-9: the engine adds the same terms in another order, a rounding apart
    return (runtime.startup(NAME, params) + steps * step) * (1 - 1e-9)
