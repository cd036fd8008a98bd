"""ZeRO stage 2 (alpa.Zero2Parallel): data parallel, but gradients are reduce-scattered
and the optimizer state is sharded; updated parameters are all-gathered in the
precision settings.gather_bytes_per_param says: 2 by default, because Alpa's mixed-precision
TrainState.apply_gradients casts the updated fp32 master copy to fp16 before it becomes the
replicated parameters, so the cast runs on each shard and the gather moves 16-bit values.
XLA's combiner packs the gradients into buffers of
params.combine_bytes; collectives go buffer by buffer, each paying the link's latency.

The reduce-scatter runs once per microbatch, not once per iteration: the gradient
accumulator is itself sharded, so every microbatch's gradients must be scattered into
it. Alpa skips only all-reduces (its "grad sync" channels) on all but the last
microbatch (GradAccMeshDriverExecutable, XLA_SKIP_NCCL_COLLECTIVE_IDS), and its
gradient-accumulation test finds the reduce-scatter in accumulate_grad and the
all-gather in apply_grad. With m microbatches ZeRO-2 therefore moves (m+1)/2 times
Data's bytes: 2.5x at m = 4, as Table II's communication times show."""

from __future__ import annotations

from dataclasses import dataclass, replace

from geosim.inputs.runtime import runtime_of
from geosim.techniques.data import jax_placement as data_placement
from geosim.sim import memory_layout
from geosim.sim.schedule import Collective, Repeat, Schedule
from geosim.inputs.case import Case
from geosim.techniques import _floor
from geosim.techniques._settings import tunable
from geosim.techniques._base import (accumulation, combined, optimizer_op, overhead_op, replica_per_gpu)
from geosim.base.units import MIB

NAME = "zero2"
# counted units (geosim.cost.schedule_work) its predictions simulate per CPU second, as measured for its row
# on the largest bench cluster it runs on, 2 shared cores (docs/results/2026-11-28-every-row.md): cost.expected_seconds
SIMULATED_UNITS_PER_CPU_S = 2.2e6
LABEL = "ZeRO2"  # how tables and verdicts name it
ALPA_METHOD = "Zero2Parallel"  # the alpa class the study ran it with (live/train/alpa_backend.py)
DESCRIPTION = "data parallel, gradients reduce-scattered every microbatch, sharded optimizer, parameters all-gathered"


@dataclass(frozen=True)
class Settings:
    # 2: the fp16 parameters cast from each fp32 master shard (Alpa's TrainState with a master copy);
    # 4: a run without a master copy that keeps fp32 parameters
    gather_bytes_per_param: float = tunable(2.0, "bytes per parameter the all-gather moves", low=1.0, high=16.0,
                                            fit=(1.0, 16.0), unit="B/param",
                                            source="Alpa's TrainState: fp16 parameters cast from the fp32 master shards")


def build(case: Case, settings: Settings) -> Schedule:
    model, workload, params = case.model, case.workload, case.params
    devices, per_gpu, grad_bytes, group = replica_per_gpu(case)
    p = len(devices)
    algorithm = params.for_technique("collectives", NAME)
    scatter = combined("reduce_scatter", group, grad_bytes, algorithm, ("rs",), "gradient reduce-scatter", params,
                       workload)
    buffers = scatter.count
    buffer = grad_bytes / buffers
    program = [accumulation(model, workload, per_gpu, group, after_each=(scatter,))]
    # the optimizer updates only this GPU's shard: 1/p of Adam's ~10 FLOPs per parameter
    # Adam's ~10 FLOPs per parameter on a flat-rate device; bytes under the op-level model
    program.append(optimizer_op(model, model.num_params / p, flat_flops=10.0 * model.num_params / p))
    # gathered in as many buffers as were scattered (the same tensors, maybe wider)
    gathered = buffer * settings.gather_bytes_per_param / workload.bytes_per_value
    program.append(Repeat((Collective("all_gather", group, gathered, algorithm, ("ag",), "parameter all-gather"),),
                          buffers, group, ("ag", "buffers"), f"parameter all-gather ({buffers} buffers)"))
    program.append(overhead_op(NAME, params, workload))
    memory = memory_layout.per_device(
        devices, model, workload, params, runtime_of(workload, params),
        lambda options: memory_layout.zero2(model, per_gpu, workload.seq_len, p, options),
        lambda: jax_placement(model, workload.global_batch, workload.microbatches, p))
    return Schedule(NAME, devices, {d.rank: program for d in devices},
                    {r: sum(m.values()) for r, m in memory.items()}, memory,
                    f"ZeRO-2 over {p} GPUs, {buffers} buffers of {buffer / MIB:.1f} MiB, "
                    f"reduce-scattered every microbatch")


def plan_floor_s(case: Case, hosts: tuple[str, ...], workload, options: dict | None) -> float:
    """The busiest GPU's compute and collectives back to back (geosim.techniques._floor)."""
    return _floor.plan_floor_s(case, hosts, workload, options, NAME)


def jax_placement(model, global_batch: int, microbatches: int, devices: int, stages: int | None = None):
    """live's ZeRO-2 step (live/train/techniques/zero2.py): Data's placement with Adam's moments and the
    gradient sum as 1/n flat shards."""
    shard = model.num_params / devices
    return replace(data_placement(model, global_batch, microbatches, devices), grads_held=shard, optimizer_held=shard,
                   tree_accumulator=False)
