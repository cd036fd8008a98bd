"""A Pipeshard layout as the field writes one (Megatron-LM's tables): tensor degree t, pipeline degree p,
data degree d, virtual stages v, a layer split; turned into Pipeshard's per-run options on the hosts asked.

t x p x d is every GPU asked. Tensor parallelism stays inside a host (t divides a host's GPUs); each of
the p stages holds t x d GPUs, whole hosts, consecutive in the scenario's order of the hosts asked; the
microbatches are the workload's (--microbatches). A degree left out follows from the others: p one stage
per host-or-group, d the rest. Every mistake is one line naming the flag (geosim.base.errors.GeosimError).
"""

from __future__ import annotations

from dataclasses import replace

from geosim.base.errors import GeosimError
from geosim.techniques._base import devices_of
from geosim.techniques._interleave import layers_per_chunk
from geosim.techniques._settings import with_options

FLAGS = {"tensor": "--tensor-parallel", "pipeline": "--pipeline-parallel", "data": "--data-parallel",
         "virtual": "--virtual-stages", "layer_split": "--layer-split"}
LAYOUT_KEYS = tuple(FLAGS)
TECHNIQUE = "pipeshard"  # whose settings a layout's options are (pipeshard.NAME)


def layout_options(case, hosts: tuple[str, ...], tensor: int | None = None, pipeline: int | None = None,
                   data: int | None = None, virtual: int | None = None,
                   layer_split: tuple[int, ...] | None = None) -> dict:
    """Pipeshard's options (meshes, intra_stage, tensor, interleave, layer_split) for the layout asked."""
    return _resolve(case, hosts, tensor, pipeline, data, virtual, layer_split)[0]


def _resolve(case, hosts: tuple[str, ...], tensor, pipeline, data, virtual, layer_split) -> tuple[dict, int, int]:
    """(options, p, d) of the layout asked; every mistake one line naming its flag."""
    for key, value in (("tensor", tensor), ("pipeline", pipeline), ("data", data), ("virtual", virtual)):
        if value is not None and value < 1:
            raise GeosimError(f"must be >= 1, got {value}", source=FLAGS[key])
    cluster = case.cluster.subset(hosts) if len(hosts) < len(case.cluster.hosts) else case.cluster
    per_host = {len(h.gpus) for h in cluster.hosts}
    gpus = sum(len(h.gpus) for h in cluster.hosts)
    t = tensor or 1
    if t > 1 and len(per_host) > 1:
        raise GeosimError(f"tensor parallelism needs hosts of one GPU count; the hosts asked have "
                          f"{', '.join(map(str, sorted(per_host)))}", source=FLAGS["tensor"])
    g = min(per_host)
    if g % t:
        raise GeosimError(f"{t} must divide the {g} GPUs of a host (tensor parallelism stays inside a host)",
                          source=FLAGS["tensor"])
    p, d = _degrees(len(cluster.hosts), g, gpus, t, pipeline, data)
    options: dict = {}
    if len(cluster.hosts) == 1 and d == 1 and t == 1 and p == g:
        options = {"intra_stage": "data"}  # one VM, a stage per GPU: Alpa's layout of it
    else:
        stage_gpus = t * d
        if stage_gpus % g:
            raise GeosimError(f"a stage holds whole hosts: tensor x data = {stage_gpus} GPUs is not a multiple of a "
                              f"host's {g}", source=FLAGS["data"] if data else FLAGS["pipeline"])
        per_stage = stage_gpus // g
        names = [h.name for h in cluster.hosts]
        options["meshes"] = tuple(tuple(names[i * per_stage:(i + 1) * per_stage]) for i in range(p))
        options["intra_stage"] = "data" if t == 1 else "shard-data"
        if 1 < t < g:
            options["tensor"] = t
    _check_layers(case.model.n_layer, p, virtual or 1, layer_split)
    if virtual and virtual > 1:
        options["interleave"] = virtual
    if layer_split is not None:
        options["layer_split"] = tuple(layer_split)
    return options, p, d


def _check_layers(n_layer: int, stages: int, v: int, layer_split) -> None:
    """The asked layout's layers, checked where every command (predict, plan, select, sweep, calibrate
    import) resolves a layout: a split of the model's layers over the stages (x virtual stages) it
    names, each at least one layer. A layout that fits nowhere is one line naming its flag, never a
    prediction of every row failed and a verdict for another layout."""
    if v > 1 and stages < 2:
        raise GeosimError(f"virtual stages interleave a pipeline of two or more stages; this layout has {stages}",
                          source=FLAGS["virtual"])
    if stages * v > n_layer:
        raise GeosimError(f"{stages} stages x {v} virtual stages = {stages * v} chunks of layers, more than the "
                          f"model's {n_layer} layers", source=FLAGS["virtual"] if v > 1 else FLAGS["pipeline"])
    if layer_split is None:
        return
    want = stages * v
    if len(layer_split) != want:
        of = f"{stages} stages x {v} virtual stages" if v > 1 else f"{stages} stages"
        raise GeosimError(f"{len(layer_split):,} numbers for the {of} of the hosts asked: give {want} (layers of each)",
                          source=FLAGS["layer_split"])
    if min(layer_split) < 1:
        raise GeosimError("every stage holds at least 1 layer", source=FLAGS["layer_split"])
    if sum(layer_split) != n_layer:
        raise GeosimError(f"{sum(layer_split):,} layers in all, but the model has {n_layer}", source=FLAGS["layer_split"])


def asked_variants(case, hosts: tuple[str, ...], layout: dict, microbatches: list[int], stage_layers):
    """The planner's options under a layout asked (plan, select, a sweep's best): the layout on `hosts`
    where it fits them (t x p x d names how many GPUs: other sets of hosts are no option of it), at
    each microbatch count the planner tries that its d replicas (and v virtual stages: groups of p)
    can split; the layer split asked, else the one build() gives (stage_layers: pipeshard.layers_per_stage),
    written out so the planner's floor weighs the option."""
    try:
        options, p, d = _resolve(case, hosts, **layout)
    except GeosimError:
        return
    on = case.on(hosts)
    devices = devices_of(on.cluster)
    meshes = ([[x for x in devices if x.host in mesh] for mesh in options["meshes"]] if "meshes" in options
              else [[x] for x in devices])
    batch, v = case.workload.global_batch, options.get("interleave") or 1
    for m in microbatches:
        if batch % m or (batch // m) % d or (v > 1 and m % len(meshes)) or case.model.n_layer < len(meshes) * v:
            continue
        chosen = dict(options)
        if "layer_split" not in chosen:
            settings = with_options(case.params.settings(TECHNIQUE), options, TECHNIQUE)
            at = on.with_(workload=replace(case.workload, microbatches=m))
            if v > 1:  # in virtual-stage order: k = c x S + s is stage s's chunk c
                chunks = layers_per_chunk(at, len(meshes), settings)
                chosen["layer_split"] = tuple(chunks[s][c] for c in range(v) for s in range(len(meshes)))
            else:
                chosen["layer_split"] = tuple(stage_layers(at, meshes, settings))
        yield {"microbatches": m}, chosen


def _degrees(hosts: int, per_host: int, gpus: int, t: int, pipeline: int | None, data: int | None) -> tuple[int, int]:
    """(p, d) with t x p x d = the GPUs asked: those given, the rest following from them."""
    if pipeline is None and data is None:
        pipeline = hosts if hosts > 1 else per_host // t  # a stage per host (one host: a stage per GPU group)
    if pipeline is None:
        pipeline, rest = divmod(gpus, t * data)
        if rest or pipeline < 1:
            raise GeosimError(f"tensor {t} x data {data} does not divide the {gpus} GPUs asked", source=FLAGS["data"])
    if data is None:
        data, rest = divmod(gpus, t * pipeline)
        if rest or data < 1:
            raise GeosimError(f"tensor {t} x pipeline {pipeline} does not divide the {gpus} GPUs asked",
                              source=FLAGS["pipeline"])
    if t * pipeline * data != gpus:
        raise GeosimError(f"tensor {t} x pipeline {pipeline} x data {data} = {t * pipeline * data} GPUs, but the hosts "
                          f"asked have {gpus}", source=FLAGS["data"])
    return pipeline, data
