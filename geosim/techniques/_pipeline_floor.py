"""Pipeshard's floors, without a schedule: what an iteration of a pipeline option takes at least
(the busiest stage's microbatches with the fill and drain, the microbatches' round trips through
every stage with each crossing's least delay, a stage's gradient all-reduce through a host's port).
The planner weighs thousands of Pipeshard options by these, and the hybrid bounds its pipelined
replica by them (geosim.techniques.hybrid), so the stage times and crossings are kept in tables
per cluster, model and parameters. Kept apart from pipeshard.py, which builds the schedules;
tests/test_plan.py and tests/test_plan_scale.py check each floor stays under its prediction.
"""

from __future__ import annotations

from geosim.inputs.case import Case
from geosim.inputs.runtime import runtime_of
from geosim.sim.compute import Work, kernel_timer
from geosim.sim.collectives import ring_allreduce_floor
from geosim.sim.network import send_floors
from geosim.sim.network.fabric import uses_rdma
from geosim.techniques._base import devices_of, forward_flops, work
from geosim.techniques._interleave import round_trips
from geosim.techniques._settings import with_options

TECHNIQUE = "pipeshard"  # whose settings and collectives the floors read (pipeshard.NAME)


def overlaps(n_from: int, n_to: int) -> list[tuple[int, int, float]]:
    """(sender j, receiver k, fraction of the microbatch) for data slices that overlap:
    GPU j of a mesh of n holds [j/n, (j+1)/n) of each microbatch."""
    pairs = []
    for j in range(n_from):
        first, last = (j * n_to) // n_from, -(-((j + 1) * n_to) // n_from) - 1
        for k in range(first, min(last, n_to - 1) + 1):
            # in units of 1 / (n_from x n_to), whole numbers: the same overlap is the same float for
            # every replica (hi - lo in floats split one size into several by ulps, and replicas whose
            # messages differ by an ulp can never be proven alike: geosim/sim/symmetry.py)
            units = min((j + 1) * n_to, (k + 1) * n_from) - max(j * n_to, k * n_from)
            if units > 0:
                pairs.append((j, k, units / (n_from * n_to)))
    return pairs


def stage_gpus(case: Case, hosts: tuple[str, ...], options: dict) -> list[tuple]:
    """The GPUs of each pipeline stage of an option: a VM's per stage, or one each on a lone VM."""
    by_name = {h.name: h for h in case.cluster.hosts}
    if "meshes" not in options:
        return [(g,) for g in by_name[hosts[0]].gpus]
    return [tuple(g for h in mesh for g in by_name[h].gpus) for mesh in options["meshes"]]


def iteration_floor_s(case: Case, hosts: tuple[str, ...], workload, options: dict, virtual: int = 1) -> float:
    """plan_floor_s's floor under one iteration of the option on `hosts` (options: its meshes and
    layer_split at least, a layer count per stage), its runtime's fixed overhead left out: the larger
    of the busiest stage's microbatches with the fill and drain, and the microbatches' round trips
    (see plan_floor_s). virtual > 1 (interleaved: `virtual` chunks a stage, options' layer_split
    still a count per stage): the busiest stage's microbatches and gradient all-reduce, and the
    microbatches' round trips stage 0's program runs back to back (_interleave.round_trips), each
    crossing every boundary `virtual` times each way. Under intra_stage data a stage's microbatch
    counts its gradient accumulation and a step its optimizer steps, as pipeshard.build's programs
    run them (a shard-data stage's, its shard's, are left out).
    The hybrid's floor (geosim.techniques.hybrid) bounds its pipelined replica's inner steps by it."""
    w, params = workload, case.params
    layers = options["layer_split"]
    stages = _stage_kinds(case, hosts, options)
    count = len(stages)
    settings = with_options(params.settings(TECHNIQUE), options, TECHNIQUE)
    per_microbatch, forward_s, backward_s, sharding, optimizer_s = _per_stage(
        case, hosts, options, w, stages, settings.intra_stage == "data")
    busiest = max(range(count), key=per_microbatch.__getitem__)
    iteration = w.microbatches * per_microbatch[busiest]
    if virtual > 1:
        iteration += optimizer_s[busiest]
    else:
        # between the busiest stage's last microbatch and the next step's first: its own optimizer step,
        # or the last microbatch's backwards down to stage 0, stage 0's step and the next step's first
        # forwards back up (a step in a run of them: the next fill runs under this step's optimizer)
        iteration += max(optimizer_s[busiest], sum(per_microbatch[:busiest]) + optimizer_s[0] if busiest else 0.0)
    if settings.intra_stage in ("data", "shard-data") and options.get("meshes") and (
            getattr(case, "network", "tcp") == "tcp"
            or (getattr(case, "network", "tcp") == "fabric" and not uses_rdma(case.cluster))):
        # a stage's gradient all-reduce over several hosts: its whole buffer enters every host of the
        # mesh through its network port (geosim.techniques._floor), after the stage's microbatches;
        # under shard-data each GPU's buffer is its shard, all-reduced over one GPU of each host
        by_name = {h.name: h for h in case.cluster.hosts}
        for s, mesh in enumerate(options["meshes"]):
            if len(mesh) > 1:
                stage_params = case.model.stage_params(layers[s], s == 0, s == count - 1) + (
                    case.model.head_params if count == 1 and case.model.tied else 0)  # one stage: as counted before
                port = min(params.lan_bandwidth_bps / 8 * (len(by_name[h].gpus) if by_name[h].nic == "per-gpu"
                                                                  else 1) for h in mesh)
                g = stages[s][0]  # a ring enters each host once per step: 2(g-1) chunks of 1/g
                if settings.intra_stage == "shard-data":
                    # a ring of GPU i of each host, of the shard GPU i holds (one ring's bytes: the hosts'
                    # rings need not share a port)
                    tp = options.get("tensor") or g // len(mesh)
                    # the ring's members on other hosts: at least the hosts' (a host's groups may follow
                    # one another in it), so 2(K-1)/K of the shard enters a host's port at least
                    g, stage_params = len(mesh), stage_params - layers[s] * 12 * case.model.n_embd ** 2 * (1 - 1 / tp)
                algorithm = params.collectives.get(TECHNIQUE, "ring")
                share = 2 * (g - 1) / g if algorithm == "ring" else 1.0
                reduce_s = share * stage_params * w.bytes_per_value / port
                if settings.intra_stage == "data" and algorithm in ("ring", "hierarchical"):
                    # its steps' order (collectives.ring_allreduce_floor): the mesh's GPUs in build()'s order
                    reduce_s = max(reduce_s, _stage_ring_s(case, hosts, mesh, stage_params * w.bytes_per_value,
                                                           algorithm))
                # the stage's optimizer step waits for its all-reduce
                iteration = max(iteration, w.microbatches * per_microbatch[s] + reduce_s + optimizer_s[s])
    if count > 1 and settings.intra_stage in ("data", "shard-data"):
        if virtual > 1:
            trips = round_trips(count, w.microbatches, virtual)
        else:
            trips = -(-w.microbatches // count) if settings.schedule == "1f1b" else 1
        crossings = _least_crossings(case, hosts, options, w, settings.activation_compression)
        # shard-data: a path's compute is its tensor-parallel ops (no data-parallel floor for them), its
        # activation all-reduces at least the rings' steps
        compute = sum(forward_s) + sum(backward_s) if settings.intra_stage == "data" else sum(sharding)
        # the last round trip ends in stage 0's accumulation; its optimizer step follows
        iteration = max(iteration, trips * (compute + virtual * crossings) + optimizer_s[0])
    return iteration


def _stage_kinds(case: Case, hosts: tuple[str, ...], options: dict) -> list[tuple]:
    """(GPUs, their kinds, the kinds' ids) of each stage of the option's layout, from the tables."""
    tables = _floor_tables(case)
    meshes = options.get("meshes")
    layout = tuple(map(tuple, meshes)) if meshes is not None else (hosts[0],)
    stages = tables["stages"].get(layout)
    if stages is None:
        stages = []
        for gpus in stage_gpus(case, hosts, options):
            kinds = tuple({g.name: g for g in gpus}.values())
            # the GPUs by identity (the tables hold the cluster that holds them): hashing each would cost more
            stages.append((len(gpus), kinds, tuple(map(id, kinds))))
        tables["stages"][layout] = stages
    return stages


def _per_stage(case: Case, hosts: tuple[str, ...], options: dict, w, stages: list[tuple], held_whole: bool
               ) -> tuple[list[float], list[float], list[float], list[float], list[float]]:
    """Per stage: (a microbatch on its slowest GPU, the fastest forward, the fastest backward, its
    shard-data activation all-reduces, the fastest optimizer step). held_whole (intra_stage data: a
    stage holds its whole parameters): a microbatch counts the gradient accumulation after its
    backward and a step the optimizer's, at their size (a shard-data stage's are its shard's: left out)."""
    layers = options["layer_split"]
    # a stage's times depend on its GPUs, layers and place, and the workload's shape alone: the
    # planner weighs thousands of layer splits and stage orders over a few kinds of stage, so each is timed once
    shape = (w.global_batch, w.microbatches, w.seq_len, w.checkpointing, w.precision, w.runtime)
    times_of = _floor_tables(case)["times"]
    count = len(stages)
    per_microbatch, forward_s, backward_s, sharding, optimizer_s = [], [], [], [], []
    for s, (size, kinds, ids) in enumerate(stages):
        key = (size, ids, layers[s], s == 0, s == count - 1, shape)
        known = times_of.get(key)
        if known is None:
            known = times_of[key] = _stage_times(case, w, size, kinds, layers[s], s == 0, s == count - 1)
        sharding.append(_sharding_floor_s(case, hosts, options, w, s, layers[s]))
        per_microbatch.append((known[3] if held_whole else known[0]) + sharding[-1])
        forward_s.append(known[1])
        backward_s.append(known[4] if held_whole else known[2])
        optimizer_s.append(known[5] if held_whole else 0.0)
    return per_microbatch, forward_s, backward_s, sharding, optimizer_s


# (id of the cluster, of the model, of the params) -> (them, the floor's tables): which GPUs each
# stage layout has, and each stage's times per microbatch. Holding the objects keeps their ids
# from being reused while the entry is kept.
_FLOOR_TABLES: dict[tuple, tuple] = {}


def _floor_tables(case: Case) -> dict:
    key = (id(case.cluster), id(case.model), id(case.params))
    known = _FLOOR_TABLES.get(key)
    if known is None or known[0] is not case.cluster or known[1] is not case.model or known[2] is not case.params:
        if len(_FLOOR_TABLES) >= 8:
            _FLOOR_TABLES.clear()
        known = _FLOOR_TABLES[key] = (case.cluster, case.model, case.params, {"stages": {}, "times": {}})
    return known[3]


def _stage_times(case: Case, w, size: int, kinds: tuple, layers: int, first: bool, last: bool
                 ) -> tuple[float, float, float, float, float, float]:
    """(the slowest GPU's forward + backward, the fastest forward, the fastest backward; the slowest
    forward + backward + gradient accumulation, the fastest backward + accumulation, the fastest
    optimizer step) of one microbatch on a stage of `size` GPUs of these kinds, as engine.compute_timer times pipeshard.build's ops: a flat-rate device, else the
    op-level model. Each microbatch's backward is followed by its cast+accumulate before its gradients
    leave the stage, and the iteration by Adam over the stage's parameters (memory-bound ops whose
    share grows where a runtime's GEMMs run fast); a flat-rate device is charged nothing for either.
    The stage's parameters as one op: an interleaved stage's chunks each pay their own launch, more."""
    params = runtime_of(w, case.params).applied_to(case.params)  # as predict times it: the runtime's kernels
    timer = kernel_timer(params)
    sequences = w.global_batch / w.microbatches / size
    held = case.model.stage_params(layers, first, last)
    times = []
    for g in kinds:
        if g.name in params.flat_fraction:
            flops = forward_flops(case.model, w, sequences, layers, last)
            rate = g.peak_tflops(w.precision, params.tf32_matmul) * 1e12 * params.flat_fraction[g.name]
            times.append((flops / rate, flops * (3.0 if w.checkpointing else 2.0) / rate, 0.0, 0.0))
        else:
            times.append(tuple(timer.seconds(work(phase, case.model, w, sequences, layers, last, first), g,
                                             w.precision) for phase in ("forward", "backward"))
                         + tuple(timer.seconds(Work(phase, case.model, params=float(held)), g, w.precision)
                                 for phase in ("update", "optimizer")))
    # a path runs through one GPU of each stage: the fastest's forward and backward
    return (max(f + b for f, b, _, _ in times), min(f for f, *_ in times), min(b for _, b, _, _ in times),
            max(f + b + a for f, b, a, _ in times), min(b + a for _, b, a, _ in times), min(o for *_, o in times))


# (cluster id, params id, hosts) -> (cluster, params, devices, least delay, what is known, least step): a planner asks about the
# same VMs for hundreds of options; holding the cluster and params keeps their ids from being reused
_NETWORKS: dict[tuple, tuple] = {}


def _sharding_floor_s(case: Case, hosts: tuple[str, ...], options: dict, w, stage: int, layers: int) -> float:
    """A shard-data stage's activation all-reduces of one microbatch (Shard's layer_ops, inside a host):
    a ring's 2(t-1) steps follow one another (each forwards the chunk the step before brought), each
    at least the least delay of a send of a 1/t chunk between two of the host's GPUs."""
    if "meshes" not in options or options.get("intra_stage") != "shard-data":
        return 0.0
    mesh = options["meshes"][stage]
    per_host = len(case.cluster.host(mesh[0]).gpus)
    t = options.get("tensor") or per_host  # a tensor group's GPUs: a host's, or `tensor` of them
    if t < 2 or case.params.for_technique("collectives", "shard") != "ring":
        return 0.0
    devices, least_delay_s, known, _ = _network(case, hosts)
    groups = len(mesh) * (per_host // t)  # the stage's tensor groups: each computes 1/groups of a microbatch
    nbytes = w.global_batch / w.microbatches / groups * w.seq_len * case.model.n_embd * w.bytes_per_value
    key = ("ring step", mesh[0], nbytes)
    if key not in known:  # options differing in their layer split or other stages step alike
        a, b = [d.rank for d in devices if d.host == mesh[0]][:2]
        per_half = max(1, case.params.settings("shard").collectives_per_layer // 2)  # as layer_ops counts them
        known[key] = 2 * per_half * 2 * (t - 1) * least_delay_s(a, b, nbytes / t, False)
    return layers * known[key]


def _stage_ring_s(case: Case, hosts: tuple[str, ...], mesh, nbytes: float, algorithm: str) -> float:
    """An intra-stage data all-reduce of nbytes over the GPUs of the mesh's hosts (pipeshard.build's group:
    the devices in order), at least its ring steps' order allows (collectives.ring_allreduce_floor)."""
    devices, _, known, step = _network(case, hosts)
    key = ("stage ring", tuple(mesh), nbytes, algorithm)
    if key not in known:
        names = set(mesh)
        group = tuple(d.rank for d in devices if d.host in names)
        known[key] = 0.0 if step is None else ring_allreduce_floor(group, nbytes, algorithm, step,
                                                                   tuple(d.host for d in devices))
    return known[key]


def _network(case: Case, hosts: tuple[str, ...]):
    """(devices, least delay of a send, crossings already computed, least step of a collective's send or None)
    of the case on `hosts`, cached."""
    key = (id(case.cluster), id(case.params), hosts, case.network)
    known = _NETWORKS.get(key)
    if known is None or known[0] is not case.cluster or known[1] is not case.params:
        if len(_NETWORKS) >= 8:  # a 1,024-GPU network holds a route per pair of its hosts: keep few
            _NETWORKS.clear()
        on = case.on(hosts).cluster
        devices = devices_of(on)
        # the best case of the network backend predict() runs for this case
        least_delay_s, least_step_s = send_floors(case.network, on, case.params, devices)
        known = _NETWORKS[key] = (case.cluster, case.params, devices, least_delay_s, {}, least_step_s)
    return known[2:]


def _least_crossings(case: Case, hosts: tuple[str, ...], options: dict, w, compression: float) -> float:
    """Seconds a microbatch's activations take at least to cross every stage boundary forward, plus
    its gradients back: per boundary the least delay of any of its sends (build()'s sends)."""
    devices, least_delay_s, crossings, _ = _network(case, hosts)
    act_bytes = w.global_batch / w.microbatches * w.seq_len * case.model.n_embd * w.bytes_per_value * compression
    layout = (tuple(map(tuple, options["meshes"])) if "meshes" in options else None, act_bytes)
    if layout in crossings:  # options differing only in their layer split cross alike
        return crossings[layout]
    if "meshes" not in options:
        meshes = [[d] for d in devices]
        boundaries = [(before, after, None) for before, after in zip(meshes, meshes[1:])]
    else:
        names = [tuple(mesh) for mesh in options["meshes"]]
        boundaries = [(None, None, (a, b, act_bytes)) for a, b in zip(names, names[1:])]
    total = 0.0
    for before, after, key in boundaries:
        # stage orders share most of their boundaries: each (hosts before, hosts after, bytes) once
        known = crossings.get(key) if key is not None else None
        if known is None:
            if key is not None:  # the devices of those hosts in the devices' order (by host, as devices_of lists them)
                before, after = _of_hosts(devices, key[0], crossings), _of_hosts(devices, key[1], crossings)
            # a send's least delay depends on its hosts and bytes only: each such send once
            pairs = {(before[j].host, after[k].host, frac): (before[j].rank, after[k].rank)
                     for j, k, frac in overlaps(len(before), len(after))}
            known = (min(least_delay_s(a, b, act_bytes * frac, True) for (_, _, frac), (a, b) in pairs.items()),
                     min(least_delay_s(b, a, act_bytes * frac, True) for (_, _, frac), (a, b) in pairs.items()))
            if key is not None:
                crossings[key] = known
        total += known[0]
        total += known[1]
    crossings[layout] = total
    return total


def _of_hosts(devices: list, hosts: tuple[str, ...], crossings: dict) -> list:
    """[d for d in devices if d.host in hosts], from the devices grouped by host once (kept in `crossings`
    under a key no layout has): scanning a 8,192-GPU network's devices for each boundary of 23,000
    Pipeshard options cost 5 of 15 s of weighing them (issue 44)."""
    grouped = crossings.get(("devices by host",))
    if grouped is None:
        by_host: dict[str, list] = {}
        for d in devices:  # devices_of lists a host's devices together, hosts in the cluster's order
            by_host.setdefault(d.host, []).append(d)
        grouped = crossings[("devices by host",)] = (by_host, {h: i for i, h in enumerate(by_host)})
    by_host, position = grouped
    wanted = sorted({h for h in hosts if h in by_host}, key=position.__getitem__)
    return [d for h in wanted for d in by_host[h]]
