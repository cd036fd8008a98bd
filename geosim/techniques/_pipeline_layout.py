"""A Pipeshard layout as the field writes one (Megatron-LM's tables): tensor degree t, pipeline degree p,
data degree d, virtual stages v, a layer split; turned into Pipeshard's per-run options on the hosts asked.

t x p x d is every GPU asked. Tensor parallelism stays inside a host (t divides a host's GPUs); each of
the p stages holds t x d GPUs, whole hosts, consecutive in the scenario's order of the hosts asked; the
microbatches are the workload's (--microbatches). A degree left out follows from the others: p one stage
per host-or-group, d the rest. Every mistake is one line naming the flag (geosim.errors.GeosimError).
"""

from __future__ import annotations

from geosim.errors import GeosimError

FLAGS = {"tensor": "--tensor-parallel", "pipeline": "--pipeline-parallel", "data": "--data-parallel",
         "virtual": "--virtual-stages", "layer_split": "--layer-split"}


def layout_options(case, hosts: tuple[str, ...], tensor: int | None = None, pipeline: int | None = None,
                   data: int | None = None, virtual: int | None = None,
                   layer_split: tuple[int, ...] | None = None) -> dict:
    """Pipeshard's options (meshes, intra_stage, tensor, interleave, layer_split) for the layout asked."""
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
    if virtual and virtual > 1:
        options["interleave"] = virtual
    if layer_split is not None:
        options["layer_split"] = tuple(layer_split)
    return options


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
