"""Intra-operator sharding (alpa.ShardParallel): every block's weight matrices split over all
GPUs of the mesh (Megatron-style tensor parallelism; the embedding, biases and layer norms stay
replicated, as Alpa's solver lays them out: geosim.sim.memory_layout.auto_sharded), so every
layer all-reduces its activations in forward and backward, for every microbatch: the cost
grows with layers x microbatches x RTT."""

from __future__ import annotations

from dataclasses import dataclass

from geosim.sim import memory_layout
from geosim.sim.schedule import Collective, Compute, Recv, Repeat, Schedule, Send
from geosim.inputs.case import Case
from geosim.inputs.runtime import runtime_of
from geosim.inputs.specs import Model, Params, Workload
from geosim.techniques import _floor
from geosim.techniques._settings import tunable
from geosim.techniques._base import (backward_multiplier, check_dims, devices_of, launch_ops, optimizer_op, overhead_op, pass_ops,
                                     require_divisible, update_op, work)

NAME = "shard"
# counted units (geosim.cost.schedule_work) its predictions simulate per CPU second, as measured for its row
# on the largest bench cluster it runs on, 2 shared cores (docs/results/2026-11-28-every-row.md): cost.expected_seconds
SIMULATED_UNITS_PER_CPU_S = 50e6  # 52 M/s on h100-4x4 after the rounds' steady form (230 M/s on h100-8x16)
LABEL = "Shard"  # how tables and verdicts name it
ALPA_METHOD = "ShardParallel"  # the alpa class the study ran it with (live/train/alpa_backend.py)
DESCRIPTION = "tensor parallelism over all GPUs: activation all-reduces inside every layer"
COLLECTIVES_PER_LAYER = 4  # Megatron-style: two all-reduces forward, two backward


@dataclass(frozen=True)
class Settings:
    collectives_per_layer: int = tunable(COLLECTIVES_PER_LAYER, "activation all-reduces per layer", low=0, high=64,
                                         unit="count", source="Megatron-LM: two forward, two backward")


def layer_ops(model: Model, workload: Workload, params: Params, group: tuple[int, ...], sequences: float,
              tag: tuple = (), collectives_per_layer: int = COLLECTIVES_PER_LAYER,
              compiled: tuple = ()) -> tuple[list, list]:
    """Forward and backward ops of one block sharded over `group` (also used by Pipeshard stages).
    compiled: the runtime's own collectives per layer, (op, count, size in activations), as its compiler
    emits them (geosim/inputs/runtime.py); half of each count in the forward, the rest in the backward.
    Without them, Megatron's collectives_per_layer all-reduces of one activation."""
    p = len(group)
    h, s = model.n_embd, workload.seq_len
    tokens = sequences * s
    total = model.layer_forward_flops(tokens, s)
    attention_share = model.attention_share(s)
    act_bytes = tokens * h * workload.bytes_per_value
    algorithm = params.for_technique("collectives", NAME)
    per_half = max(1, collectives_per_layer // 2)
    # each all-reduce pays the runtime's launch cost (gloo's call through XLA:CPU for jax; none for Alpa)
    launch = launch_ops(runtime_of(workload, params)) if p > 1 else ()
    forward, backward = [], []
    for direction, ops, mult in (("fwd", forward, 1.0), ("bwd", backward, backward_multiplier(workload))):
        phase = "forward" if direction == "fwd" else "backward"
        # the backward runs the MLP half first
        halves = (("attn", attention_share), ("mlp", 1 - attention_share))
        for part, share in (halves if direction == "fwd" else halves[::-1]):
            half = work(phase, model, workload, sequences, 1, False, False, p, "attention" if part == "attn" else "mlp")
            ops.append(Compute(total * share * mult / p, f"{part} {direction}", work=half))
            if compiled:
                if part == "attn":
                    ops.extend(compiled_ops(compiled, group, act_bytes, algorithm, launch, tag + (direction,),
                                            direction, first_half=direction == "fwd"))
                continue
            for c in range(per_half // 2 if part == "attn" else per_half - per_half // 2):
                ops.extend(launch)
                ops.append(Collective("allreduce", group, act_bytes, algorithm, tag + (direction, part, c),
                                      f"{direction} all-reduce"))
    return forward, backward


def overlapped_layer_ops(model: Model, workload: Workload, group: tuple[int, ...], rank: int, sequences: float,
                         tag: tuple = (), collectives_per_layer: int = COLLECTIVES_PER_LAYER) -> tuple[list, list]:
    """One block's forward and backward on `rank` with tensor parallelism's communication under its GEMMs,
    as Megatron-LM's --tp-comm-overlap runs it with sequence parallelism (Transformer Engine's userbuffers):
    each all-reduce is its all-gather before a part's GEMMs and its reduce-scatter after them, each a ring
    exchange of p - 1 non-blocking sends of 1/p of the activation, and the part's compute in 2p chunks so
    that each chunk's transfer runs under the next chunk's GEMM (the first half of the chunks under the
    all-gather, the second half under the reduce-scatter). The bytes are a ring all-reduce's."""
    p = len(group)
    pos = group.index(rank)
    nxt, prev = group[(pos + 1) % p], group[(pos - 1) % p]
    h, s = model.n_embd, workload.seq_len
    tokens = sequences * s
    total = model.layer_forward_flops(tokens, s)
    attention_share = (8 * h * h + 4 * s * h) / (24 * h * h + 4 * s * h)
    chunk_bytes = tokens * h * workload.bytes_per_value / p
    per_half = max(1, collectives_per_layer // 2)
    forward, backward = [], []
    for direction, ops, mult in (("fwd", forward, 1.0), ("bwd", backward, backward_multiplier(workload))):
        phase = "forward" if direction == "fwd" else "backward"
        halves = (("attn", attention_share), ("mlp", 1 - attention_share))
        for part, share in (halves if direction == "fwd" else halves[::-1]):
            rings = per_half // 2 if part == "attn" else per_half - per_half // 2
            if not rings:  # no collective after this part: its compute whole
                ops.append(Compute(total * share * mult / p, f"{part} {direction}",
                                   work=work(phase, model, workload, sequences, 1, False, False, p,
                                             "attention" if part == "attn" else "mlp")))
                continue
            pieces = 2 * p * rings
            whole = work(phase, model, workload, sequences, 1, False, False, p, "attention" if part == "attn" else "mlp")
            piece = Compute(total * share * mult / p / pieces, f"{part} {direction} (chunk)",
                            work=whole._replace(share=1.0 / pieces))
            for c in range(rings):
                for kind in ("ag", "rs"):
                    step = tag + (direction, part, c, kind)
                    if kind == "ag":  # send what is held, compute on it while the next arrives
                        ops.append(Send(nxt, chunk_bytes, step + (0,), p2p=False))
                        for k in range(p - 1):
                            ops += [piece, Recv(prev, step + (k,))]
                            if k < p - 2:
                                ops.append(Send(nxt, chunk_bytes, step + (k + 1,), p2p=False))
                        ops.append(piece)
                    else:  # compute a chunk, send its partial sum on while the next is computed
                        ops += [piece, Send(nxt, chunk_bytes, step + (0,), p2p=False)]
                        for k in range(1, p):
                            ops += [piece, Recv(prev, step + (k - 1,))]
                            if k < p - 1:
                                ops.append(Send(nxt, chunk_bytes, step + (k,), p2p=False))
    return forward, backward


def compiled_ops(entries: tuple, group: tuple[int, ...], act_bytes: float, algorithm: str, launch: tuple, tag: tuple,
                 label: str, first_half: bool | None = None) -> list:
    """Collectives from a runtime's compiled list, each after its launch cost. first_half: only the first
    (count // 2) of each entry, or only the rest (False); None: all."""
    ops = []
    for i, (op, count, activations) in enumerate(entries):
        n = count if first_half is None else count // 2 if first_half else count - count // 2
        for c in range(n):
            ops.extend(launch)
            ops.append(Collective(op, group, act_bytes * activations, algorithm, tag + (i, c), f"{label} {op}"))
    return ops


def layers_ops(model: Model, workload: Workload, params: Params, group: tuple[int, ...], sequences: float,
               layers: int, tag: tuple = (), collectives_per_layer: int = COLLECTIVES_PER_LAYER,
               compiled: tuple = ()) -> tuple[Repeat, Repeat]:
    """`layers` identical sharded blocks, forward and backward, as repeated blocks."""
    forward, backward = layer_ops(model, workload, params, group, sequences, tag, collectives_per_layer, compiled)
    return (Repeat(tuple(forward), layers, group, tag + ("layers fwd",), "layers fwd"),
            Repeat(tuple(backward), layers, group, tag + ("layers bwd",), "layers bwd"))


def build(case: Case, settings: Settings) -> Schedule:
    cluster, model, workload, params = case.cluster, case.model, case.workload, case.params
    check_dims(model, workload)
    devices = devices_of(cluster)
    p = len(devices)
    group = tuple(d.rank for d in devices)
    require_divisible("global_batch", workload.global_batch, workload.microbatches, "microbatches")
    batch = workload.global_batch / workload.microbatches  # sequences per microbatch
    # the runtime's compiled collectives where it ships them (jax: read from live's compiled step), else
    # Megatron's count; Alpa's runtime has none, so the study's predictions are unchanged
    runtime = runtime_of(workload, params)
    compiled = runtime.shard_layer_collectives if p > 1 else ()
    forward, backward = layers_ops(model, workload, params, group, batch, model.n_layer,
                                   collectives_per_layer=settings.collectives_per_layer, compiled=compiled)
    # Megatron's --tp-comm-overlap (a runtime's tp_comm_overlap): each rank's own ring exchanges under its GEMMs
    overlap = runtime.tp_comm_overlap and p > 1 and not compiled
    # the embedding and the LM head (vocabulary split over the GPUs), around the sharded blocks
    head_fwd, head_bwd = pass_ops(model, workload, batch, 0, True, True, " head", tensor_parallel=p)
    held = memory_layout.auto_sharded_params(model, p)
    microbatch = (forward, head_fwd, head_bwd, backward, update_op(model, held))
    if compiled and runtime.shard_step_collectives:  # the embedding's, the logits' and the optimizer's
        launch = launch_ops(runtime)
        act_bytes = batch * workload.seq_len * model.n_embd * workload.bytes_per_value
        microbatch += tuple(compiled_ops(runtime.shard_step_collectives, group, act_bytes,
                                         params.for_technique("collectives", NAME), launch, ("step",), "step"))
    # gradient accumulation, as Alpa's num_micro_batches
    program = [Repeat(microbatch, workload.microbatches, group, ("microbatch",), "microbatches"),
               optimizer_op(model, held), overhead_op(NAME, params, workload)]
    programs = {d.rank: program for d in devices}
    if overlap:
        for rank in group:
            fwd, bwd = overlapped_layer_ops(model, workload, group, rank, batch, (),
                                            settings.collectives_per_layer)
            own = (Repeat(tuple(fwd), model.n_layer, group, ("layers fwd",), "layers fwd"),
                   Repeat(tuple(bwd), model.n_layer, group, ("layers bwd",), "layers bwd"))
            programs[rank] = [Repeat((own[0],) + microbatch[1:3] + (own[1],) + microbatch[4:], workload.microbatches,
                                     group, ("microbatch",), "microbatches"), *program[1:]]
    memory = memory_layout.per_device(
        devices, model, workload, params, runtime,
        lambda options: memory_layout.auto_sharded(model, batch, workload.seq_len, p, options),
        lambda: jax_placement(model, workload.global_batch, workload.microbatches, p))
    return Schedule(NAME, devices, programs,
                    {r: sum(m.values()) for r, m in memory.items()}, memory,
                    f"tensor parallel over {p} GPUs, "
                    + ("its all-reduces as ring exchanges under the GEMMs (tp_comm_overlap), " if overlap else "")
                    + (f"{sum(n for _, n, _ in compiled)} collectives per layer as {runtime.name} compiles them, "
                       if compiled else f"{settings.collectives_per_layer} all-reduces per layer, ")
                    + f"{workload.microbatches} microbatches")


def plan_floor_s(case: Case, hosts: tuple[str, ...], workload, options: dict | None) -> float:
    """The busiest GPU's compute and collectives back to back (geosim.techniques._floor)."""
    return _floor.plan_floor_s(case, hosts, workload, options, NAME)


def jax_placement(model, global_batch: int, microbatches: int, devices: int, stages: int | None = None):
    """live's Shard step (live/train/techniques/shard.py): every weight (embeddings included) split over the n
    devices; each sees every sequence of a microbatch, split by heads and columns (see data.jax_placement for
    the microbatches in flight); the logits come out of an all-reduce of partial sums, and XLA runs the two
    microbatches' reductions one after the other, so one microbatch's logits are held at a time (measured:
    gpt2, 2 microbatches)."""
    held = model.num_params / devices
    return memory_layout.LivePlacement(rows=global_batch / microbatches, layers=model.n_layer, params_held=held,
                                       grads_held=held, microbatch_grads=held,
                                       in_flight=2 if microbatches == 2 else 1, tensor_parallel=devices)
