"""Pipeline parallelism with intra-op parallelism inside each stage (alpa.PipeshardParallel).

Stages sit on meshes (by default one mesh per host, as in the study; on one host, one
GPU per stage, as Alpa lays a single VM's two GPUs out), layers are
split across stages (uniform like Alpa's default, balanced by GPU speed, or given
explicitly), microbatches flow under 1F1B or GPipe, and activations and their
gradients cross between stages point-to-point, one rendezvous per microbatch.

What a stage does across its mesh's GPUs (intra_stage): "data", data parallel over all of
them (the study's); "shard", Shard's tensor parallelism over all of them, even across
hosts; "shard-data", Megatron's 3D layout: each host of the stage shards the stage's
layers over its own GPUs (tensor parallel on NVLink), the microbatch is split over the
stage's hosts, and GPU i of every host all-reduces the gradients of the shard it holds
with GPU i of the others (data parallel across hosts).

Over 400 lines: the schedule (the stage frame, build, the stages' programs and the runtime's pipeline
ops) is one piece; the planner's search, names and floor are _pipeshard_plan.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from geosim.base.errors import GeosimError
from geosim.sim import memory_layout
from geosim.sim.compute import kernel_timer
from geosim.sim.schedule import HOST_IN_TAG, Collective, Device, Recv, Schedule, Send
from geosim.inputs.case import Case
from geosim.inputs.runtime import runtime_of
from geosim.techniques._base import (check_dims, devices_of, forward_flops, launch_ops, optimizer_op, overhead_op, pass_ops,
                                     require_divisible, update_op, work)
from geosim.techniques._interleave import (check_interleave, interleaved_in_flight, interleaved_program,
                                           layers_per_chunk)
from geosim.techniques._pipeline_layout import layout_options  # noqa: F401 (the registry's)
from geosim.techniques._pipeline_floor import overlaps
from geosim.techniques._settings import option, tunable
from geosim.techniques.shard import compiled_ops, layers_ops

NAME = "pipeshard"
# counted units (geosim.cost.schedule_work) its predictions simulate per CPU second, as measured for its row
# on the largest bench cluster it runs on, 2 shared cores (docs/results/2026-11-28-every-row.md): cost.expected_seconds
SIMULATED_UNITS_PER_CPU_S = 0.29e6
LABEL = "Pipeshard"  # how tables and verdicts name it
ALPA_METHOD = "PipeshardParallel"  # the alpa class the study ran it with (live/train/alpa_backend.py)
DESCRIPTION = "pipeline stages on meshes (one per host), microbatches, intra-op parallelism inside each stage"
PIPELINED = True
BUILDS_ON = ("shard",)  # a stage sharded over its mesh runs Shard's layers
INTRA_STAGES = ("data", "shard", "shard-data")
PLANNER = "_pipeshard_plan"  # the planner's search, names and floor: geosim/techniques/_pipeshard_plan.py


@dataclass(frozen=True)
class Settings:
    intra_stage: str = tunable("data", "what a stage does across its mesh's GPUs", choices=INTRA_STAGES,
                                source="the study's Pipeshard: data parallel inside each stage")
    schedule: str = tunable("1f1b", "microbatch schedule", choices=("1f1b", "gpipe"),
                             source="Alpa's default pipeline schedule")
    stage_split: str = tunable("uniform", "layers per stage: uniform (Alpa's default) or balanced by GPU speed",
                               choices=("uniform", "balanced"), source="Alpa's default (uniform)")
    # < 1: activations and their gradients cross between stages compressed (e.g. subspace
    # projection, Obeidi et al. 2026); 1 is Alpa's uncompressed send
    activation_compression: float = tunable(1.0, "bytes sent between stages x this", low=1e-6, high=1.0,
                                            unit="fraction", source="no compression (the study's runs)")
    meshes: tuple | None = option(None, "host names of each stage's mesh, in stage order (default: one per host)")
    layer_split: tuple | None = option(None, "layers of each stage, or of each virtual stage when interleaved "
                                             "(default: by stage_split)")
    tensor: int | None = option(None, "under shard-data, the GPUs of each tensor-parallel group inside a host, data "
                                      "parallel over the rest (default: all of a host's GPUs)")
    interleave: int = option(1, "virtual stages per stage: each GPU holds this many chunks of layers, round robin, "
                                "under an interleaved 1F1B schedule (1: plain 1F1B or GPipe)")


def split_layers(n_layer: int, speeds: list[float], how: str, explicit: list[int] | None = None,
                 extra: list[float] | None = None) -> list[int]:
    """Layers per stage: explicit, uniform (earlier stages take the remainder), or balanced:
    the contiguous split that minimizes the slowest stage's time, where stage s holds its
    layers plus extra[s] layer-equivalents of other work (the LM head on the last stage)
    and runs at speeds[s]."""
    stages = len(speeds)
    if explicit is not None:
        if len(explicit) != stages or sum(explicit) != n_layer or min(explicit) < 1:
            raise GeosimError(f"layer split {explicit} must give each of {stages} stages >= 1 layer, "
                              f"{n_layer} in all", key="layer_split")
        return list(explicit)
    if n_layer < stages:
        raise GeosimError(f"{n_layer} layers cannot fill {stages} pipeline stages", key="stages")
    if how == "uniform":
        base, rest = divmod(n_layer, stages)
        return [base + (1 if i < rest else 0) for i in range(stages)]
    extra = extra or [0.0] * stages

    def greedy(limit: float) -> list[int] | None:
        split, left = [], n_layer
        for s in range(stages):
            most = int(limit * speeds[s] - extra[s] + 1e-9)
            take = min(most, left - (stages - s - 1))
            if take < 1:
                return None
            split.append(take)
            left -= take
        return split if left == 0 else None

    # the best limit is one stage's time for some layer count: search those candidates
    candidates = sorted({(k + extra[s]) / speeds[s] for s in range(stages) for k in range(1, n_layer + 1)})
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if greedy(candidates[mid]) is None:
            lo = mid + 1
        else:
            hi = mid
    return greedy(candidates[lo])


class _Frame:
    """What build() knows before any program: the meshes, each stage's layers and tensor groups, and
    the checks that refuse a layout. A GPU's memory follows from it alone, so an option out of memory
    is known without building its programs (memory_first)."""

    def __init__(self, case: Case, settings: Settings):
        cluster, model, workload, params = case.cluster, case.model, case.workload, case.params
        check_dims(model, workload)
        self.devices = devices = devices_of(cluster)
        if settings.meshes:
            meshes: list[list[Device]] = [[d for d in devices if d.host in hosts] for hosts in settings.meshes]
        elif len(cluster.hosts) == 1 and len(devices) > 1:
            meshes = [[d] for d in devices]  # Alpa's stages on one VM: one GPU each
        else:
            meshes = [[d for d in devices if d.host == h.name] for h in cluster.hosts]
        if any(not m for m in meshes):
            raise GeosimError("a pipeline mesh has no GPUs", key="meshes")
        self.meshes = meshes
        self.S, self.M, self.v = S, M, v = len(meshes), workload.microbatches, settings.interleave
        self.b = b = workload.global_batch / M
        self.intra = intra = settings.intra_stage
        check_interleave(settings, S, M)
        for mesh in meshes:
            if intra == "data":
                require_divisible("microbatch size (global_batch / microbatches)", int(b), len(mesh),
                                  "the GPUs of a mesh")
            elif intra == "shard-data":
                require_divisible("microbatch size (global_batch / microbatches)", int(b),
                                  len(_tensor_groups(mesh, settings.tensor)),
                                  "the tensor-parallel groups of a stage" if settings.tensor
                                  else "the hosts of a stage")
        self.layers = layers = layers_per_stage(case, meshes, settings)
        self.chunk_layers = layers_per_chunk(case, S, settings) if v > 1 else [[n] for n in layers]
        self.options = memory_layout.options_for(workload, params, runtime_of(workload, params))
        self.jax_layout = runtime_of(workload, params).memory_layout == "jax"
        self.compression = compression = settings.activation_compression
        # per stage: its tensor-parallel groups (GPUs that shard the stage's layers between them: the
        # whole mesh under "shard", each host's GPUs, or `tensor` of them, under "shard-data") and the
        # sequences each group computes
        self.groups = []
        for mesh in meshes:
            if intra == "data":
                self.groups.append(([], b / len(mesh)))
            elif intra == "shard":
                self.groups.append(([tuple(d.rank for d in mesh)], b))
            else:
                tp_groups = [tuple(d.rank for d in grp) for grp in _tensor_groups(mesh, settings.tensor)]
                self.groups.append((tp_groups, b / len(tp_groups)))
        self.description = (f"{S} stages ({split_text(layers)} layers), {M} microbatches, {settings.schedule}, "
                            f"intra-stage {intra}" + (f", tensor {settings.tensor}" if settings.tensor else "")
                            + (f", {v} virtual stages each (interleaved)" if v > 1 else "")
                            + (f", activations x{compression:g}" if compression != 1 else ""))

    def in_flight(self, s: int, schedule_kind: str) -> int:
        """Microbatches whose residuals stage s holds at once (1F1B: S - s; GPipe: all; interleaved: its
        program's most, in whole-stage equivalents)."""
        if self.v > 1:
            return interleaved_in_flight(self.S, s, self.M, self.v)
        return self.M if schedule_kind == "gpipe" else min(self.M, self.S - s)

    def memory(self, case: Case, s: int, dev: Device, in_flight: int) -> dict[str, float]:
        """One GPU's memory parts on stage s with `in_flight` microbatches' residuals."""
        model, workload = case.model, case.workload
        tp_groups, sequences = self.groups[s]
        tp = len(tp_groups[0]) if tp_groups else 1
        if self.jax_layout:  # live's GPipe scan, as XLA lays it out (jax_placement)
            return memory_layout.live_step(
                model, jax_placement(model, workload.global_batch, self.M, self.S * tp, self.S, self.layers[s]),
                workload.seq_len, self.M, replace(self.options, workspace_bytes=0.0, architecture=dev.gpu.architecture))
        return memory_layout.pipeline_stage(model, sequences, workload.seq_len, self.layers[s], s == 0, s == self.S - 1,
                                            self.S, in_flight, self.options, tensor_parallel=tp)

    def schedule(self, programs: dict, memory: dict) -> Schedule:
        return Schedule(NAME, self.devices, programs, {r: sum(m.values()) for r, m in memory.items()}, memory,
                        self.description, activation_compression=self.compression if self.S > 1 else 1.0)


def memory_first(case: Case, settings: Settings) -> Schedule | None:
    """The schedule's memory and description without its programs. It refuses what build() refuses, in
    the same order: the predictor answers an option out of memory from it alone."""
    frame = _Frame(case, settings)
    # every GPU of a stage holds the same parts, unless live's layout names the GPU's architecture
    memory, by_stage = {}, {}
    for s, mesh in enumerate(frame.meshes):
        for dev in mesh:
            key = (s, dev.gpu.architecture if frame.jax_layout else None)
            if key not in by_stage:
                by_stage[key] = frame.memory(case, s, dev, frame.in_flight(s, settings.schedule))
            memory[dev.rank] = dict(by_stage[key])
    return frame.schedule({}, memory)


def build(case: Case, settings: Settings) -> Schedule:
    # Why this function is long (over the house's 80): issue 35 split the older build into five
    # functions while issue 34 added interleaved chunks and tensor groups to it on the same day; the two could
    # not both be kept, and the features won. _Frame took its checks and memory out (issue 34 item 3);
    # splitting on along the same seams (a stage, a GPU's forward/backward, its program) is the next step.
    model, workload, params = case.model, case.workload, case.params
    f = _Frame(case, settings)
    meshes, S, M, v, b, intra, layers = f.meshes, f.S, f.M, f.v, f.b, f.intra, f.layers
    schedule_kind = settings.schedule
    per_layer = params.settings("shard").collectives_per_layer  # a sharded stage all-reduces as Shard does
    act_bytes = b * workload.seq_len * model.n_embd * workload.bytes_per_value * f.compression
    algorithm = params.for_technique("collectives", NAME)
    programs, memory = {}, {}
    for s, mesh in enumerate(meshes):
        g = len(mesh)
        tp_groups, sequences = f.groups[s]
        tp = len(tp_groups[0]) if tp_groups else 1
        group_of = {r: grp for grp in tp_groups for r in grp}
        by_host = len(tp_groups) > 1  # tags name the host: each host's collectives are its own
        inside_host = len(tp_groups) > len(_hosts_of(mesh))  # several groups on a host: tags name the group too
        chunks = [_Chunk(case, meshes, s, c, v, f.chunk_layers[s][c], tp, sequences, intra) for c in range(v)]
        # a tensor group's members run the same blocks under the same tags: built once, shared (a
        # 1,024-GPU layout's build was mostly the same blocks built again, GPU by GPU)
        sharded = functools.partial(_sharded, {}, model, workload, params, sequences, per_layer)
        held = sum(chunk.held for chunk in chunks)
        # gradients all-reduced once per iteration: the whole stage over the mesh (data), or each
        # GPU's shard with the GPUs holding the same shard in the stage's other groups (shard-data)
        if intra == "data":
            grad_groups = {d.rank: tuple(d.rank for d in mesh) for d in mesh} if g > 1 else {}
        elif intra == "shard-data" and len(tp_groups) > 1:
            grad_groups = {r: tuple(grp[i] for grp in tp_groups) for grp in tp_groups for i, r in enumerate(grp)}
        else:
            grad_groups = {}
        for j, dev in enumerate(mesh):
            group = group_of.get(dev.rank, ())
            # the host marked as such, and the group by its place on the host: a symmetry moving hosts
            # onto hosts renames the tag with them (geosim.sim.symmetry)
            host_tag = ((HOST_IN_TAG, dev.host) + ((dev.local_index // tp,) if inside_host else ())) if by_host else ()

            def forward(m, c=0, j=j, group=group, host_tag=host_tag):
                chunk = chunks[c]
                ops = []
                if chunk.prev_mesh:
                    ops += [Recv(chunk.prev_mesh[i].rank, ("act", chunk.k, m)) for i, k, _ in chunk.prev_of.get(j, ())]
                if intra == "data":
                    ops.append(chunk.fwd._replace(label=f"F{m}" + (f".{c}" if v > 1 else "")))
                else:
                    ops.append(sharded(group, chunk.layers, ("pf", m) + ((c,) if v > 1 else ()) + host_tag)[0])
                    if chunk.last or chunk.first:
                        ops.append(chunk.fwd._replace(label=f"F{m} head"))
                if chunk.next_mesh:
                    ops += [Send(chunk.next_mesh[k].rank, act_bytes * frac, ("act", chunk.k + 1, m))
                            for i, k, frac in chunk.next_of.get(j, ())]
                return ops

            def backward(m, c=0, j=j, group=group, host_tag=host_tag):
                chunk = chunks[c]
                ops = []
                if chunk.next_mesh:
                    ops += [Recv(chunk.next_mesh[k].rank, ("grad", chunk.k, m)) for i, k, _ in chunk.next_of.get(j, ())]
                if intra == "data":
                    ops.append(chunk.bwd._replace(label=f"B{m}" + (f".{c}" if v > 1 else "")))
                else:
                    if chunk.last or chunk.first:
                        ops.append(chunk.bwd._replace(label=f"B{m} head"))
                    ops.append(sharded(group, chunk.layers, ("pb", m) + ((c,) if v > 1 else ()) + host_tag)[1])
                ops.append(chunk.accumulate)
                if chunk.prev_mesh:
                    ops += [Send(chunk.prev_mesh[i].rank, act_bytes * frac, ("grad", chunk.k - 1, m))
                            for i, k, frac in chunk.prev_of.get(j, ())]
                return ops

            if v > 1:
                program, _ = interleaved_program(forward, backward, S, s, M, v)
            else:
                warmup = M if schedule_kind == "gpipe" else min(S - s - 1, M)
                program = []
                for m in range(warmup):
                    program += forward(m)
                for m in range(M - warmup):
                    program += forward(warmup + m) + backward(m)
                for m in range(M - warmup, M):
                    program += backward(m)
            program = with_runtime_pipeline_ops(case, program, meshes, j, b)
            if dev.rank in grad_groups:
                shard_tag = (group.index(dev.rank),) if intra == "shard-data" else ()
                program.append(Collective("allreduce", grad_groups[dev.rank], held * workload.bytes_per_value,
                                          algorithm, ("stage-grads", s) + shard_tag, "stage gradient all-reduce"))
            program.append(optimizer_op(model, held))
            program.append(overhead_op(NAME, params, workload))
            programs[dev.rank] = program
            memory[dev.rank] = f.memory(case, s, dev, f.in_flight(s, schedule_kind))
    return f.schedule(programs, memory)


def _sharded(made: dict, model, workload, params, sequences: float, per_layer: int, group: tuple, layers: int,
             tag: tuple) -> tuple:
    """Shard's layers_ops for one tensor group, each (group, layers, tag) built once into `made`."""
    key = (group, layers, tag)
    ops = made.get(key)
    if ops is None:
        ops = made[key] = layers_ops(model, workload, params, group, sequences, layers, tag, per_layer)
    return ops


def layers_per_stage(case: Case, meshes: list[list[Device]], settings: Settings) -> list[int]:
    """The layers of each stage build() gives these meshes (the settings' explicit split, else by
    stage_split); the hybrid's floor asks it for its pipelined replica's split."""
    if settings.interleave > 1:  # a stage's layers are its chunks'
        return [sum(chunks) for chunks in layers_per_chunk(case, len(meshes), settings)]
    b = case.workload.global_batch / case.workload.microbatches
    intra = settings.intra_stage
    if settings.layer_split is None and settings.stage_split == "uniform":  # no stage needs timing
        return split_layers(case.model.n_layer, [1.0] * len(meshes), "uniform")
    groups = [len(_hosts_of(mesh)) if not settings.tensor else len(mesh) // settings.tensor for mesh in meshes]
    layer_s = [_mesh_seconds(case, mesh, b, 1, False, intra, k) for mesh, k in zip(meshes, groups)]
    head_in_layers = _mesh_seconds(case, meshes[-1], b, 0, True, intra, groups[-1]) / layer_s[-1]
    return split_layers(case.model.n_layer, [1.0 / t for t in layer_s], settings.stage_split,
                        list(settings.layer_split) if settings.layer_split is not None else None,
                        extra=[0.0] * (len(meshes) - 1) + [head_in_layers])


class _Chunk:
    """One chunk of a stage's layers (the whole stage unless interleaved): virtual stage k = c x S + s,
    its neighbours' meshes (the last stage's chunk c hands on to the first stage's chunk c + 1), its
    compute ops and the parameters each of its GPUs holds."""

    def __init__(self, case: Case, meshes: list, s: int, c: int, v: int, layers: int, tp: int, sequences: float,
                 intra: str):
        model, workload = case.model, case.workload
        S = len(meshes)
        last_k = S * v - 1
        self.layers, self.k = layers, c * S + s
        self.first, self.last = self.k == 0, self.k == last_k
        self.prev_mesh = meshes[(s - 1) % S] if self.k > 0 else None
        self.next_mesh = meshes[(s + 1) % S] if self.k < last_k else None
        g = len(meshes[s])
        self.from_prev = overlaps(len(self.prev_mesh), g) if self.prev_mesh else []
        self.to_next = overlaps(g, len(self.next_mesh)) if self.next_mesh else []
        # by this mesh's GPU, in the overlaps' order: each GPU's share looked up, not found by walking
        # every pair (a 640-GPU stage walked 640 x 640 pairs per microbatch and GPU)
        self.prev_of: dict[int, list] = {}
        for i, k, frac in self.from_prev:
            self.prev_of.setdefault(k, []).append((i, k, frac))
        self.next_of: dict[int, list] = {}
        for i, k, frac in self.to_next:
            self.next_of.setdefault(i, []).append((i, k, frac))
        # the last chunk holds the head's matrix when another mesh holds the embedding, or when it is untied
        params = model.stage_params(layers, self.first, self.last and (S > 1 or not model.tied))
        self.held = params - layers * model.layer_matrix_params * (1 - 1 / tp)  # the blocks' matrices split
        self.fwd, self.bwd = (pass_ops(model, workload, sequences, layers, self.last, self.first) if intra == "data" else
                              pass_ops(model, workload, sequences, 0, self.last, self.first, " head", tensor_parallel=tp))
        self.accumulate = update_op(model, self.held)


def _tensor_groups(mesh: list[Device], tensor: int | None) -> list[list[Device]]:
    """A shard-data stage's tensor-parallel groups: each host's GPUs, or `tensor` consecutive GPUs of a
    host (data parallel over the host's other groups and the stage's other hosts)."""
    hosts = _host_groups(mesh)
    per_host = len(hosts[0])
    if tensor is None or tensor == per_host:
        return hosts
    if not 1 <= tensor <= per_host or per_host % tensor:
        raise GeosimError(f"a tensor degree of {tensor} must divide the {per_host} GPUs of a host (tensor "
                          f"parallelism stays inside a host)", key="tensor")
    return [host[i:i + tensor] for host in hosts for i in range(0, per_host, tensor)]


def _hosts_of(mesh: list[Device]) -> list[str]:
    """The hosts of a mesh, in its order."""
    return list(dict.fromkeys(d.host for d in mesh))


def _host_groups(mesh: list[Device]) -> list[list[Device]]:
    """A shard-data stage's GPUs by host: every host shards the stage over its own GPUs, so each
    must have as many (GPU i of each host holds the same shard)."""
    groups = [[d for d in mesh if d.host == h] for h in _hosts_of(mesh)]
    if len({len(grp) for grp in groups}) > 1:
        raise GeosimError(f"a shard-data stage needs the same number of GPUs on each of its hosts "
                          f"({', '.join(f'{grp[0].host}: {len(grp)}' for grp in groups)})", key="intra_stage")
    return groups


def with_runtime_pipeline_ops(case: Case, program: list, meshes: list[list[Device]], j: int,
                              microbatch: float) -> list:
    """A stage's program with what the workload's runtime runs in a pipeline step besides the schedule's
    sends (jax: live's compiled GPipe scan; geosim/data/runtimes.toml): its loop exchanges activations and
    their gradients on every tick, M + S - 1, so S - 1 bubble sends follow each direction's last real one
    (pipeshard_sends_every_tick); pipeshard_tick_collectives run once a tick and pipeshard_step_collectives
    once a step, among the j-th device of every stage, after the microbatches, each after the runtime's
    launch cost. Unchanged for a runtime that declares none (alpa: the study's predictions)."""
    model, workload, params = case.model, case.workload, case.params
    runtime = runtime_of(workload, params)
    S = len(meshes)
    if S < 2:
        return program
    out = list(program)
    if runtime.pipeshard_sends_every_tick:
        for kind in ("act", "grad"):
            for cls in (Send, Recv):
                last = max((i for i, op in enumerate(out) if isinstance(op, cls) and op.tag[0] == kind), default=None)
                if last is None:
                    continue
                # the last microbatch's ops of this kind: one per peer where the next mesh has another
                # number of GPUs (copying the last op alone left its other peers' bubbles unmatched)
                final = [op for op in out if isinstance(op, cls) and op.tag == out[last].tag]
                out[last + 1:last + 1] = [op._replace(tag=(f"bubble {kind}", *op.tag[1:], k))
                                          for k in range(S - 1) for op in final]
    # the collectives run among the j-th GPU of every stage: none where a stage has fewer GPUs
    if not (runtime.pipeshard_tick_collectives or runtime.pipeshard_step_collectives) or any(len(m) <= j for m in meshes):
        return out
    group = tuple(m[j].rank for m in meshes)
    launch = launch_ops(runtime)
    act_bytes = microbatch * workload.seq_len * model.n_embd * workload.bytes_per_value
    algorithm = params.for_technique("collectives", NAME)
    for t in range(workload.microbatches + S - 1):
        out += compiled_ops(runtime.pipeshard_tick_collectives, group, act_bytes, algorithm, launch, ("tick", j, t),
                            "tick")
    return out + compiled_ops(runtime.pipeshard_step_collectives, group, act_bytes, algorithm, launch, ("step", j),
                              "step")


def _mesh_seconds(case: Case, mesh: list[Device], microbatch: float, layers: int, head: bool, intra: str,
                  hosts: int = 1) -> float:
    """Forward + backward seconds of `layers` blocks (and the head) of one microbatch on a mesh's slowest
    GPU (a mesh over `hosts` hosts): what a balanced split weighs stages by."""
    model, workload, params = case.model, case.workload, case.params
    g = len(mesh)
    if intra == "data":
        sequences, tp = microbatch / g, 1
    elif intra == "shard":
        sequences, tp = microbatch, g
    else:  # shard-data: each host's GPUs shard its share of the microbatch
        sequences, tp = microbatch / hosts, g // hosts  # `hosts`: the stage's tensor-parallel groups
    times = []
    for d in {d.gpu.name: d for d in mesh}.values():  # a GPU's time depends on its kind only
        if d.gpu.name in params.flat_fraction:  # a flat-rate device
            flops = forward_flops(model, workload, sequences, layers, head) / tp * (4.0 if workload.checkpointing else 3.0)
            times.append(flops / (d.gpu.peak_tflops(workload.precision) * 1e12 * params.flat_fraction[d.gpu.name]))
            continue
        timer = kernel_timer(params)
        times.append(sum(timer.seconds(work(phase, model, workload, sequences, layers, head, False, tp), d.gpu,
                                        workload.precision) for phase in ("forward", "backward")))
    return max(times)


def split_text(layers) -> str:
    """A layer split as a row shows it: 12/12, or its ends and length when long (a row per stage of
    thousands would be the whole table)."""
    layers = list(layers)
    if len(layers) <= 12:
        return "/".join(map(str, layers))
    return f"{'/'.join(map(str, layers[:4]))}/.../{'/'.join(map(str, layers[-2:]))} ({len(layers):,} stages)"


def jax_placement(model, global_batch: int, microbatches: int, devices: int, stages: int | None = None,
                  layers: float | None = None):
    """How live's JAX pipeline step (live/train/techniques/pipeshard.py) places a stage on a device, for the
    memory model: its blocks (`layers`, default an even share) split over the stage's devices, the embeddings
    (held by every stage) too; GPipe in a scan over M + S - 1 ticks keeps every tick's residuals, each block's
    as JAX lists them (the blocks run in a scan inside that scan: memory_layout.JAX_SCANNED_*); every stage
    runs the head on the whole batch, with the tied embedding all-gathered whole (the partitioner gathers the
    stage's n_embd-split table for the lookup and keeps it for the head)."""
    s = stages or min(2, devices)
    tensor = max(1, devices // s)
    layers = model.n_layer / s if layers is None else layers
    held = (layers * model.params_per_layer + model.embedding_params) / tensor
    return memory_layout.LivePlacement(rows=global_batch / microbatches, layers=layers, params_held=held,
                                       grads_held=held, microbatch_grads=held, in_flight=microbatches + s - 1,
                                       tensor_parallel=tensor, head_rows=global_batch, accumulates=False,
                                       scanned=True, head_gathers_embedding=True)
