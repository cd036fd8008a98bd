"""Data parallelism (alpa.DataParallel): a full replica per GPU, the batch split,
gradients accumulated over the microbatches (Alpa's num_micro_batches), then one
all-reduce of every gradient per iteration across all GPUs: Alpa skips the gradient
all-reduce on all but the last microbatch. XLA's combiner packs the gradients into
buffers of params.combine_bytes, all-reduced one after another."""

from __future__ import annotations

from dataclasses import dataclass

from geosim.sim import memory_layout
from geosim.sim.schedule import Schedule
from geosim.case import Case
from geosim.techniques._base import (accumulation, check_dims, combined, devices_of, microbatch_per_gpu, optimizer_op,
                                     overhead_op)

NAME = "data"
LABEL = "Data"  # how tables and verdicts name it
DESCRIPTION = "replica per GPU, batch split, gradient all-reduce over all GPUs"


@dataclass(frozen=True)
class Settings:
    pass  # Data's tunables are the simulator-wide ones (collectives, [xla] combiner, overheads)


def build(case: Case, settings: Settings) -> Schedule:
    cluster, model, workload, params = case.cluster, case.model, case.workload, case.params
    check_dims(model, workload)
    devices = devices_of(cluster)
    p = len(devices)
    per_gpu = microbatch_per_gpu(workload, p)
    grad_bytes = model.num_params * workload.bytes_per_value
    group = tuple(d.rank for d in devices)
    allreduce = combined("allreduce", group, grad_bytes, params.collectives.get(NAME, "ring"), ("grads",),
                         "gradient all-reduce", params)
    program = [accumulation(model, workload, per_gpu, group), allreduce, optimizer_op(model, model.num_params),
               overhead_op(NAME, params)]
    layout = memory_layout.data_parallel(model, per_gpu, workload.seq_len, memory_layout.options_for(workload, params))
    memory = {d.rank: dict(layout) for d in devices}
    return Schedule(NAME, devices, {d.rank: program for d in devices},
                    {r: sum(m.values()) for r, m in memory.items()}, memory,
                    f"data parallel over {p} GPUs, {workload.microbatches} microbatches of {per_gpu:g} sequences each, "
                    f"{allreduce.count} all-reduce buffers of {grad_bytes / allreduce.count / 2**20:.1f} MiB")


def plan_floor_s(case: Case, hosts: tuple[str, ...], workload, options: dict | None) -> float:
    """The busiest GPU's compute and collectives back to back (geosim.techniques._floor)."""
    from geosim.techniques import _floor

    return _floor.plan_floor_s(case, hosts, workload, options, NAME)
