"""Building blocks the technique modules share: devices, per-sequence FLOPs, checks."""

from __future__ import annotations

import math

from geosim.base.errors import GeosimError
from geosim.inputs.runtime import runtime_of
from geosim.sim.compute import Work
from geosim.sim.schedule import Collective, Compute, Device, Repeat
from geosim.inputs.specs import Cluster, Model, Params, Workload


# (id of each host) -> (the hosts, their devices): the low-communication techniques ask for a 1,024-GPU
# cluster's devices once per host they weigh, and a Device is a frozen dataclass, slow to make by the
# thousand. Hosts are frozen, and the entry holds them, so no id in a key is reused while it is kept.
_DEVICES: dict[tuple, tuple] = {}


def devices_of(cluster: Cluster) -> list[Device]:
    hosts = cluster.hosts
    key = tuple(map(id, hosts))
    known = _DEVICES.get(key)
    if known is None:
        devices = []
        for host in hosts:
            for i, gpu in enumerate(host.gpus):
                devices.append(Device(rank=len(devices), host=host.name, local_index=i, gpu=gpu))
        if len(_DEVICES) >= 64:  # a planner asks about a few dozen sets of hosts at a time
            _DEVICES.clear()
        known = _DEVICES[key] = (hosts, tuple(devices))
    return list(known[1])  # a list of its own: a caller may change its list, never a (frozen) Device


def forward_flops(model: Model, workload: Workload, sequences: float, layers: int, with_head: bool) -> float:
    tokens = sequences * workload.seq_len
    flops = layers * model.layer_forward_flops(tokens, workload.seq_len)
    if with_head:
        flops += model.head_forward_flops(tokens)
    return flops


def work(phase: str, model: Model, workload: Workload, sequences: float, layers: int, head: bool, embedding: bool,
         tensor_parallel: int = 1, part: str = "block") -> Work:
    """What the op-level kernel timer times for a forward or backward; the backward of a
    checkpointed run recomputes its forward first."""
    return Work(phase, model, float(sequences), workload.seq_len, layers, head, embedding, tensor_parallel,
                remat=workload.checkpointing and phase == "backward", part=part)


def pass_ops(model: Model, workload: Workload, sequences: float, layers: int, head: bool, embedding: bool,
             label: str = "", tensor_parallel: int = 1) -> tuple[Compute, Compute]:
    """(forward, backward) Compute ops of a microbatch through `layers` blocks (and embedding, head)."""
    fwd = forward_flops(model, workload, sequences, layers, head) / tensor_parallel
    return (Compute(fwd, f"forward{label}", work=work("forward", model, workload, sequences, layers, head, embedding,
                                                       tensor_parallel)),
            Compute(fwd * backward_multiplier(workload), f"backward{label}",
                    work=work("backward", model, workload, sequences, layers, head, embedding, tensor_parallel)))


def update_op(model: Model, params_held: float) -> Compute:
    """Per microbatch: the 16-bit weight cast and the gradient accumulation (memory-bound)."""
    return Compute(0.0, "cast+accumulate", work=Work("update", model, params=float(params_held)))


def optimizer_op(model: Model, params_updated: float, flat_flops: float = 0.0) -> Compute:
    """Per iteration: Adam's update of the parameters this GPU owns (memory-bound: the op-level model
    times it by bytes). flat_flops is what a device on a flat FLOP rate is charged (live runs' CPUs)."""
    return Compute(flat_flops, "optimizer", work=Work("optimizer", model, params=float(params_updated)))


def backward_multiplier(workload: Workload) -> float:
    """Backward costs twice the forward; recomputation under checkpointing adds one more forward."""
    return 3.0 if workload.checkpointing else 2.0


def overhead_op(technique: str, params: Params, workload: Workload | None = None) -> Compute:
    """The step's fixed cost: the workload's runtime's (geosim/inputs/runtime.py; Alpa's is the parameters
    file's per-technique [overhead.iteration_s])."""
    if workload is None:
        seconds = params.for_technique("iteration_overhead_s", technique)
    else:
        seconds = runtime_of(workload, params).iteration_overhead_s(technique, params, workload)
    return Compute(0.0, "iteration overhead", kind="overhead", seconds=seconds)


def require_divisible(what: str, value: int, by: int, by_what: str) -> None:
    if by <= 0 or value % by:
        raise GeosimError(f"{what} ({value}) is not divisible by {by_what} ({by})", key="workload")


def check_dims(model: Model, workload: Workload) -> None:
    if workload.seq_len > model.n_ctx:
        raise GeosimError(f"seq_len {workload.seq_len} exceeds {model.name}'s context of {model.n_ctx}", key="workload.seq_len")


def microbatch_per_gpu(workload: Workload, data_parallel: int) -> float:
    """Sequences each GPU takes per microbatch when the batch is split over `data_parallel` GPUs."""
    require_divisible("global_batch", workload.global_batch, workload.microbatches, "microbatches")
    per_microbatch = workload.global_batch // workload.microbatches
    require_divisible("microbatch size (global_batch / microbatches)", per_microbatch, data_parallel, "the number of GPUs")
    return per_microbatch / data_parallel


def replica_per_gpu(case) -> tuple[list[Device], float, float, tuple[int, ...]]:
    """Data's and ZeRO-2's shape, a full replica per GPU over every GPU: (the devices, sequences per GPU
    per microbatch, the gradient's bytes, the ranks as one group), the case's dimensions checked."""
    check_dims(case.model, case.workload)
    devices = devices_of(case.cluster)
    per_gpu = microbatch_per_gpu(case.workload, len(devices))
    return devices, per_gpu, case.model.num_params * case.workload.bytes_per_value, tuple(d.rank for d in devices)

def accumulation(model: Model, workload: Workload, sequences: float, group: tuple[int, ...],
                 after_each: tuple = ()) -> Repeat:
    """Forward and backward of every microbatch on a full replica (Alpa's num_micro_batches),
    each followed by the ops in after_each (ZeRO-2's reduce-scatter into the sharded accumulator)."""
    ops = pass_ops(model, workload, sequences, model.n_layer, True, True) + (update_op(model, model.num_params),) + tuple(after_each)
    return Repeat(ops, workload.microbatches, group, ("microbatch",), "microbatches")


def launch_ops(runtime) -> tuple:
    """What the runtime costs to launch one collective, as ops to put before it: none where it
    declares no launch cost (Alpa)."""
    seconds = runtime.collective_launch_s
    return (Compute(0.0, "collective launch", kind="overhead", seconds=seconds),) if seconds else ()


def combined(op: str, group: tuple[int, ...], nbytes: float, algorithm: str, tag: tuple, label: str,
             params: Params, workload: Workload | None = None) -> Repeat:
    """A gradient-sized collective as the runtime runs it: XLA's combiner packs the tensors into
    buffers of at most params.combine_bytes (Alpa), live JAX reduces one flat buffer, DDP 25 MiB
    buckets; the buffers are collected one after another, each paying a collective's latency and
    the runtime's launch cost."""
    runtime = runtime_of(workload, params) if workload is not None else None
    buffers = runtime.buffers(nbytes, params) if runtime else max(1, math.ceil(nbytes / params.combine_bytes))
    ops: tuple = (Collective(op, group, nbytes / buffers, algorithm, tag, label),)
    if runtime and len(group) > 1:  # a group of one launches nothing
        ops = launch_ops(runtime) + ops
    return Repeat(ops, buffers, group, tag + ("buffers",), f"{label} ({buffers} buffers)")
