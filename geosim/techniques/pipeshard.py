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
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace

from geosim.errors import GeosimError
from geosim.sim import memory_layout
from geosim.sim.compute import compute_model
from geosim.sim.schedule import HOST_IN_TAG, Collective, Device, Recv, Schedule, Send
from geosim.case import Case
from geosim.runtime import runtime_of
from geosim.scenario import WORKLOAD_RANGES
from geosim.structure import host_groups, host_list, hosts_at, site_distances, site_orders, sites
from geosim.techniques._base import (check_dims, devices_of, forward_flops, launch_ops, optimizer_op, overhead_op, pass_ops,
                                     require_divisible, update_op, work)
from geosim.techniques._interleave import (check_interleave, interleaved_in_flight, interleaved_program,
                                           layers_per_chunk, planned_interleaves)
from geosim.techniques._pipeline_layout import FLAGS, LAYOUT_KEYS, asked_variants, layout_options  # noqa: F401
from geosim.techniques._pipeline_floor import iteration_floor_s, overlaps, stage_gpus
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
        timer = compute_model(params)
        times.append(sum(timer.seconds(work(phase, model, workload, sequences, layers, head, False, tp), d.gpu,
                                        workload.precision) for phase in ("forward", "backward")))
    return max(times)


# -- what the planner tries (geosim.studies.plan) --------------------------------------------

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
    orders geosim.structure.site_orders gives, and one stage per host (sites in those orders, each
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
    """Each site's host groups (geosim.structure.host_groups) in every order, sites in `order`; the
    scenario's order alone where that would be more than a few layouts."""
    groups = host_groups(cluster)
    per_site = [[g.hosts for g in groups if g.site == site] for site in order]
    choices = [list(itertools.permutations(site_groups)) for site_groups in per_site]
    if math.prod(len(c) for c in choices) > 6:
        return [[hosts for site_groups in per_site for hosts in site_groups]]
    return [[hosts for perm in combo for hosts in perm] for combo in itertools.product(*choices)]


def add_plan_arguments(parser) -> None:
    """`geosim plan`'s flag for this technique's own choice (the registry adds it)."""
    parser.add_argument("--intra-stage", choices=(*INTRA_STAGES, "both", "all"),
                        help="what a Pipeshard stage does across its GPUs: data parallel, sharded over all of them, or "
                             "shard-data (sharded inside each host, data parallel across the stage's hosts) "
                             "(default: the parameters file's pipeshard.intra_stage, and above two VMs shard-data "
                             "where a stage spans several hosts; 'both': data and shard, ~40x slower to plan; "
                             "'all': every kind)")


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
    """Each stage's VMs (a mesh of several written as geosim.structure.host_list does)."""
    return tuple(host_list(m) for m in options["meshes"]) if options and options.get("meshes") else hosts


def option_kind(hosts: tuple[str, ...], options: dict | None = None) -> str:
    order = _order(hosts, options)
    if len(order) > 4 and all("[" not in stage for stage in order):  # a stage per VM, many VMs: in order
        return f"{LABEL} {len(order)} stages {host_list(order).replace('+', '>')}"
    if len(order) > 1:
        return f"{LABEL} {'>'.join(order)}"
    one_stage = bool(options and "meshes" in options)  # else Alpa's layout on one VM: a stage per GPU
    return f"{LABEL} on {order[0]}" + (" (1 stage)" if one_stage else " (a stage per GPU)")


def split_text(layers) -> str:
    """A layer split as a row shows it: 12/12, or its ends and length when long (a row per stage of
    thousands would be the whole table)."""
    layers = list(layers)
    if len(layers) <= 12:
        return "/".join(map(str, layers))
    return f"{'/'.join(map(str, layers[:4]))}/.../{'/'.join(map(str, layers[-2:]))} ({len(layers):,} stages)"


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
