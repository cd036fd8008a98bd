"""Pipeshard's planner: what `geosim plan` tries for it (stage layouts, microbatches, intra-stage
parallelism, layer splits), how an option is named, and a floor under its time. The schedule itself
is pipeshard.py's; the registry reaches these through pipeshard.PLANNER.
"""

from __future__ import annotations

import itertools
import math

from geosim.inputs.case import Case
from geosim.base.errors import GeosimError
from geosim.inputs.runtime import runtime_of
from geosim.inputs.scenario import WORKLOAD_RANGES
from geosim.inputs.structure import host_groups, host_list, hosts_at, site_distances, site_orders, sites
from geosim.techniques._interleave import planned_interleaves
from geosim.techniques._pipeline_floor import iteration_floor_s, stage_gpus
from geosim.techniques._pipeline_layout import FLAGS, LAYOUT_KEYS, asked_variants
from geosim.sim.schedule import Device
from geosim.techniques.pipeshard import INTRA_STAGES, LABEL, NAME, _mesh_seconds, layers_per_stage, split_layers, split_text

MAX_SPLITS = 400  # per pipeline shape: up to this many splits every one is tried, beyond it a few
MAX_HOST_STAGES = 16  # a stage per host is tried up to this many hosts; beyond, a stage per site
# the structured search tries shard-data unasked on up to this many GPUs: a larger option costs
# seconds to simulate (every GPU runs its layers' all-reduces) and its floor is loose (the hosts'
# gradient rings are bounded one at a time), so a few of them would take the search's whole budget
MAX_DEFAULT_SHARD_DATA_GPUS = 128
SHARD_DATA_ORDERS = 2  # per set of VMs, shard-data unasked on this many stage orders (the shortest paths)
FEW_SPLITS = 64  # the structured search still tries every split where there are this few (2 stages)
NEIGHBOUR_STAGES = 8  # up to this many stages the balanced split's one-layer neighbours are tried too


def layer_splits(n_layer: int, stages: int, speeds: list[float] | None = None,
                 extra: list[float] | None = None, every: bool = True, most: int | None = None) -> list[list[int]]:
    """Every way to give each stage >= 1 layer while there are at most MAX_SPLITS of them (FEW_SPLITS
    unless `every`; `most` if given); else (3+ stages of a deep model: millions) the uniform split, the
    split balanced by the stages' speeds (split_layers: the least slowest stage) and every split one
    layer away from it."""
    if stages == 1:
        return [[n_layer]]
    if n_layer < stages:
        return []
    if math.comb(n_layer - 1, stages - 1) <= (most if most is not None else MAX_SPLITS if every else FEW_SPLITS):
        cuts = itertools.combinations(range(1, n_layer), stages - 1)
        return [[b - a for a, b in zip((0, *c), (*c, n_layer))] for c in cuts]
    found = [split_layers(n_layer, [1.0] * stages, "uniform")]
    balanced = split_layers(n_layer, speeds or [1.0] * stages, "balanced", extra=extra)
    found.append(balanced)
    for s in range(stages - 1 if stages <= NEIGHBOUR_STAGES else 0):  # one layer across each boundary, either way
        for give in (1, -1):
            moved = list(balanced)
            moved[s], moved[s + 1] = moved[s] - give, moved[s + 1] + give
            if min(moved) >= 1:
                found.append(moved)
    return [list(t) for t in dict.fromkeys(map(tuple, found))]


MAX_MICROBATCHES = WORKLOAD_RANGES["microbatches"][1]


def _microbatch_choices(batch: int, exhaustive: bool, current: int) -> list[int]:
    """Every divisor of the batch (exhaustive), else powers of two that divide it and the workload's own;
    at most MAX_MICROBATCHES, a workload's own bound (each microbatch is simulated: a batch of 10
    million would otherwise offer 10 million microbatches and run for hours)."""
    if exhaustive:
        divisors = {d for i in range(1, math.isqrt(batch) + 1) if batch % i == 0 for d in (i, batch // i)}
        return sorted(m for m in divisors if m <= MAX_MICROBATCHES)
    powers = {m for m in (2 ** k for k in range(batch.bit_length())) if batch % m == 0 and m <= MAX_MICROBATCHES}
    return sorted(powers | {current})


def _stage_layouts(case: Case, hosts: tuple[str, ...], exhaustive: bool) -> list[list[list[str]]]:
    """Meshes (host names per stage, in stage order) to try. Exhaustive (a few VMs): one stage per VM
    in every order, except between two VMs with the same GPUs. Structured: one stage per site in the
    orders geosim.inputs.structure.site_orders gives, and one stage per host (sites in those orders, each
    site's hosts in the scenario's order: same-group hosts are interchangeable) up to MAX_HOST_STAGES."""
    if exhaustive:
        same = {h.name: (tuple(g.name for g in h.gpus), h.intra_host) for h in case.cluster.hosts}
        orders = [hosts] if len(hosts) == 2 and same[hosts[0]] == same[hosts[1]] else itertools.permutations(hosts)
        return [[[h] for h in order] for order in orders]
    sub = case.cluster.subset(hosts)
    layouts = []
    orders = site_orders(sub, sites(sub))
    for i, order in enumerate(orders):
        if len(order) > 1:
            layouts.append([list(hosts_at(sub, site)) for site in order])
        # a stage per host: the sites' first two orders only (a deep pipeline's ends matter less),
        # the groups inside each site in every order where there are few (a slow GPU's place matters)
        if i < 2 and len(hosts) <= min(MAX_HOST_STAGES, case.model.n_layer):
            for inside in _group_orders(sub, order):
                layouts.append([[h] for part in inside for h in part])
    unique = {tuple(map(tuple, m)): m for m in layouts}
    return list(unique.values())


def _group_orders(cluster, order) -> list[list[tuple[str, ...]]]:
    """Each site's host groups (geosim.inputs.structure.host_groups) in every order, sites in `order`; the
    scenario's order alone where that would be more than a few layouts."""
    groups = host_groups(cluster)
    per_site = [[g.hosts for g in groups if g.site == site] for site in order]
    choices = [list(itertools.permutations(site_groups)) for site_groups in per_site]
    if math.prod(len(c) for c in choices) > 6:
        return [[hosts for site_groups in per_site for hosts in site_groups]]
    return [[hosts for perm in combo for hosts in perm] for combo in itertools.product(*choices)]


# `geosim plan`'s flag for this technique's own choice, as data the command renders (geosim.techniques.add_plan_arguments)
PLAN_FLAGS = ({"flag": "--intra-stage", "choices": (*INTRA_STAGES, "both", "all"),
               "help": "what a Pipeshard stage does across its GPUs: data parallel, sharded over all of them, or "
                       "shard-data (sharded inside each host, data parallel across the stage's hosts) "
                       "(default: the parameters file's pipeshard.intra_stage, and above two VMs shard-data "
                       "where a stage spans several hosts; 'both': data and shard, ~40x slower to plan; "
                       "'all': every kind)"},)


def plan_choices(args) -> dict:
    """--intra-stage as plan_variants' intra_stages (None: the parameters file's, and shard-data where it applies)."""
    chosen = getattr(args, "intra_stage", None)
    if chosen and any(getattr(args, FLAGS[k][2:].replace("-", "_"), None) is not None for k in ("tensor", "pipeline",
                                                                                                 "data")):
        raise GeosimError("the layout's degrees say what a stage does across its GPUs (tensor 1: data, else "
                          "shard-data); give one or the other", source="--intra-stage")
    kinds = {"both": ("data", "shard"), "all": INTRA_STAGES}
    return {"intra_stages": kinds.get(chosen, (chosen,) if chosen else None)}


def plan_variants(case: Case, hosts: tuple[str, ...], intra_stages: tuple[str, ...] | None = None,
                  exhaustive: bool = True, layout: dict | None = None):
    """Stage layout x microbatches x intra-stage parallelism x layer split, as (workload changes,
    options). Stage order matters (the first stage holds the embeddings, the last the LM head).
    exhaustive=False (large clusters, geosim.studies.plan): layouts by site and host group,
    powers-of-two microbatches, and the balanced layer split with its neighbours; unless the
    caller names the intra-stage kinds, stages of several multi-GPU hosts also try shard-data
    (sharded inside each host, data parallel across the stage's hosts: Megatron's 3D layout),
    and pipelines of 1F1B stages their interleaved schedules (PLANNED_VIRTUAL_STAGES).
    A layout asked (--tensor-parallel and its kin: plan, select, sweep): that layout alone, on
    each set of hosts it fits (geosim.techniques._pipeline_layout.asked_variants)."""
    if layout and any(layout.get(k) is not None for k in LAYOUT_KEYS):
        yield from asked_variants(case, hosts, {k: layout.get(k) for k in LAYOUT_KEYS},
                                  _microbatch_choices(case.workload.global_batch, exhaustive, case.workload.microbatches),
                                  layers_per_stage)
        return
    gpus = {h.name: len(h.gpus) for h in case.cluster.hosts}
    batch = case.workload.global_batch
    settings = case.params.settings(NAME)
    structured_default = intra_stages is None and not exhaustive
    intra_stages = intra_stages or (case.params.settings(NAME).intra_stage,)
    if len(hosts) == 1 and gpus[hosts[0]] > 1:
        layouts = [None]  # one VM: one GPU per stage, as Alpa runs it
    else:
        layouts = _stage_layouts(case, hosts, exhaustive)
    unasked = ([] if not structured_default or layouts == [None] or "shard-data" in intra_stages
               else _shard_data_layouts(case, layouts, gpus))
    for meshes in layouts:
        kinds = intra_stages
        if any(meshes is chosen for chosen in unasked):
            kinds = (*kinds, "shard-data")
        for m in _microbatch_choices(batch, exhaustive, case.workload.microbatches):
            for intra in kinds:
                # intra-stage data parallelism splits each microbatch over a mesh's GPUs, shard-data over its hosts
                # (exhaustive: as the planner always has, a lone VM's GPU count, though its stages hold one each)
                stage_sizes = ([sum(gpus[h] for h in mesh) for mesh in meshes] if meshes
                               else [gpus[hosts[0]] if exhaustive else 1])
                if intra == "data" and any((batch // m) % g for g in stage_sizes):
                    continue
                if intra == "shard-data" and (not meshes or not _shard_data_applies(meshes, gpus)
                                              or any((batch // m) % len(mesh) for mesh in meshes)):
                    continue
                shape = {"intra_stage": intra} if meshes is None else {"meshes": meshes, "intra_stage": intra}
                stages = stage_gpus(case, hosts, shape)
                if len(stages) > case.model.n_layer:
                    continue
                # shard-data on a large cluster: also tensor groups of fewer GPUs than a host's (t = 2, 4 on
                # 8-GPU hosts), data parallel over the rest (Megatron-LM's tables)
                tensors = ([None] + _smaller_tensors(meshes, gpus, batch // m)
                           if intra == "shard-data" and not exhaustive else [None])
                for t in tensors:
                    spans = ([len(mesh) * (gpus[mesh[0]] // t if t else 1) for mesh in meshes] if meshes
                             else [1] * len(stages))  # hosts (tensor groups) per stage
                    speeds, extra = ((None, None) if exhaustive
                                     else _split_weights(case, stages, batch // m, intra, spans))
                    # shard-data (stages of like hosts): the balanced split and its neighbours, never every split
                    most = 0 if intra == "shard-data" else None
                    chosen = {**shape, "tensor": t} if t else shape
                    for split in layer_splits(case.model.n_layer, len(stages), speeds, extra, exhaustive, most):
                        yield {"microbatches": m}, {**chosen, "layer_split": split}
                    for v, split in ([] if exhaustive else planned_interleaves(settings, case.model.n_layer,
                                                                               len(stages), m)):
                        yield {"microbatches": m}, {**chosen, "interleave": v, "layer_split": split}


def _smaller_tensors(meshes, gpus: dict[str, int], microbatch: int) -> list[int]:
    """Tensor degrees below a host's GPU count that divide it (each stage's hosts alike), where the
    microbatch splits over the stage's tensor groups."""
    per_host = gpus[meshes[0][0]]
    if any(gpus[h] != per_host for mesh in meshes for h in mesh):
        return []
    return [t for t in range(2, per_host) if per_host % t == 0
            and all(microbatch % (len(mesh) * (per_host // t)) == 0 for mesh in meshes)]


def _shard_data_layouts(case: Case, layouts: list, gpus: dict[str, int]) -> list:
    """The layouts the structured search tries shard-data on unasked: those it applies to, of up to
    MAX_DEFAULT_SHARD_DATA_GPUS GPUs, and of them the SHARD_DATA_ORDERS whose stages' sites make the
    shortest path (a microbatch crosses every boundary; the data-parallel stages try every order)."""
    fit = [m for m in layouts if m and _shard_data_applies(m, gpus)
           and sum(gpus[h] for mesh in m for h in mesh) <= MAX_DEFAULT_SHARD_DATA_GPUS]
    if len(fit) <= SHARD_DATA_ORDERS:
        return fit
    site_of = {h.name: h.site for h in case.cluster.hosts}
    distance = site_distances(case.cluster)

    def path(meshes) -> float:
        stage_sites = [site_of[mesh[0]] for mesh in meshes]
        return sum(distance[(a, b)] for a, b in zip(stage_sites, stage_sites[1:]))

    return sorted(fit, key=path)[:SHARD_DATA_ORDERS]  # sorted() is stable: ties keep the search's order


def _shard_data_applies(meshes, gpus: dict[str, int]) -> bool:
    """Whether a layout's stages can run shard-data and differ from the options already tried: some
    stage spans several hosts of more than one GPU, and each stage's hosts have as many GPUs."""
    return (any(len(mesh) > 1 and gpus[mesh[0]] > 1 for mesh in meshes)
            and all(len({gpus[h] for h in mesh}) == 1 for mesh in meshes))


def _split_weights(case: Case, stages: list[tuple], microbatch: int, intra: str, hosts: list[int]):
    """(speeds, extra) for split_layers' balanced split: each stage's layers per second on its
    slowest GPU kind, and the LM head on the last stage in layer-equivalents (as build() weighs them);
    hosts: how many hosts each stage spans."""
    def seconds(gpus, layers, head, k):
        return _mesh_seconds(case, [Device(i, "", i, g) for i, g in enumerate(gpus)], microbatch, layers, head, intra, k)

    layer_s = [seconds(gpus, 1, False, k) for gpus, k in zip(stages, hosts)]
    head = seconds(stages[-1], 0, True, hosts[-1]) / layer_s[-1]
    return [1.0 / t for t in layer_s], [0.0] * (len(stages) - 1) + [head]


def _order(hosts: tuple[str, ...], options: dict | None) -> tuple[str, ...]:
    """Each stage's VMs (a mesh of several written as geosim.inputs.structure.host_list does)."""
    return tuple(host_list(m) for m in options["meshes"]) if options and options.get("meshes") else hosts


def option_kind(hosts: tuple[str, ...], options: dict | None = None) -> str:
    order = _order(hosts, options)
    if len(order) > 4 and all("[" not in stage for stage in order):  # a stage per VM, many VMs: in order
        return f"{LABEL} {len(order)} stages {host_list(order).replace('+', '>')}"
    if len(order) > 1:
        return f"{LABEL} {'>'.join(order)}"
    one_stage = bool(options and "meshes" in options)  # else Alpa's layout on one VM: a stage per GPU
    return f"{LABEL} on {order[0]}" + (" (1 stage)" if one_stage else " (a stage per GPU)")


def variant_label(hosts: tuple[str, ...], workload, options: dict | None) -> str:
    order = _order(hosts, options)
    split = (f" layers {split_text(options['layer_split'])}"
             if options and len(options.get("layer_split") or ()) > 1 else "")
    intra = (options or {}).get("intra_stage")
    tensor = (options or {}).get("tensor")
    virtual = (options or {}).get("interleave") or 1
    return (f"{option_kind(order, options)}{split}, {workload.microbatches} microbatches"
            + (f", intra-stage {intra}" if intra else "") + (f", tensor {tensor}" if tensor else "")
            + (f", {virtual} virtual stages each (interleaved)" if virtual > 1 else ""))


def plan_floor_s(case: Case, hosts: tuple[str, ...], workload, options: dict | None) -> float:
    """A floor under the predicted total time: the larger of two paths through an iteration that
    every run takes, whatever the network does beyond its best case.

    Compute alone: each GPU runs its ops one after another, so an iteration takes at least the
    busiest stage's M microbatches plus the stages before it filling and draining the pipeline.
    Round trips (intra-stage data parallelism): microbatch k's forward crosses every stage and
    its backward comes back before stage 0 runs B(k); under 1F1B stage 0's next op after B(k) is
    F(k + S), so the iteration holds ceil(M / S) such round trips back to back (GPipe: one), each
    costing every stage's forward and backward and each crossing's least delay on the network
    predict() runs (geosim.sim.network.least_delay: idle hops, the largest window).
    Interleaved (v virtual stages): the busiest stage's microbatches (its chunks' layers together) and
    its gradient all-reduce after them, and the round trips stage 0's program runs back to back, each
    crossing every boundary v times each way (the fill and drain shrink v-fold and are left out).
    Cheap: no schedule is built. tests/test_plan.py checks the floor stays under the prediction.
    """
    if not options or "layer_split" not in options:
        return 0.0
    v = options.get("interleave") or 1
    if v > 1:  # virtual stages: each stage's layers are its chunks' (virtual stage c x S + s is stage s's chunk c)
        S = len(options["layer_split"]) // v
        options = {**options, "layer_split": [sum(options["layer_split"][c * S + s] for c in range(v)) for s in range(S)]}
    w, params = workload, case.params
    runtime = runtime_of(w, params)
    iteration = iteration_floor_s(case, hosts, w, options, v) + runtime.iteration_overhead_s(NAME, params, w)
    # 1e-9: the engine adds the same terms in another order, a rounding apart
    return (runtime.startup(NAME, params) + w.iterations_per_epoch * w.epochs * iteration) * (1 - 1e-9)
