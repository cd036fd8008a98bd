"""Data parallelism (alpa.DataParallel): a full replica per GPU, the batch split,
gradients accumulated over the microbatches (Alpa's num_micro_batches), then one
all-reduce of every gradient per iteration across all GPUs: Alpa skips the gradient
all-reduce on all but the last microbatch. XLA's combiner packs the gradients into
buffers of params.combine_bytes, all-reduced one after another.

Under a runtime that overlaps the all-reduce with the backward (PyTorch DDP, geosim/inputs/runtime.py),
the last microbatch's backward runs in as many pieces as there are gradient buckets (DDP's
25 MiB, in the reverse order of the layers) and each bucket's reduction starts as soon as its
piece is done. The engine runs one op at a time per GPU, so a bucket is reduced as its two
halves written as non-blocking sends: each GPU sends 1/p of the bucket to every other GPU
(reduce-scatter), and once those have arrived sends its reduced 1/p to every other GPU
(all-gather); a GPU waits for a bucket only when it needs it. Each GPU sends 2(p-1)/p of the
bucket, as a ring does, with fewer latency terms: a lower bound on the ring's latency."""

from __future__ import annotations

from dataclasses import dataclass

from geosim.sim import memory_layout
from geosim.sim.schedule import Compute, Recv, Repeat, Schedule, Send
from geosim.inputs.case import Case
from geosim.inputs.runtime import runtime_of
from geosim.techniques import _experts, _floor
from geosim.techniques._base import (accumulation, backward_multiplier, combined, forward_flops, launch_ops,
                                     optimizer_op, overhead_op, pass_ops, replica_per_gpu, update_op, work)
from geosim.techniques._settings import option
from geosim.base.units import MIB

NAME = "data"
# counted units (geosim.cost.schedule_work) its predictions simulate per CPU second, as measured for its row
# on the largest bench cluster it runs on, 2 shared cores (docs/results/2026-11-28-every-row.md): cost.expected_seconds
SIMULATED_UNITS_PER_CPU_S = 1.3e6
LABEL = "Data"  # how tables and verdicts name it
# token efficiencies are Data's tokens / a technique's tokens (geosim/studies/convergence.py)
BASELINE = True
ALPA_METHOD = "DataParallel"  # the alpa class the study ran it with (live/train/alpa_backend.py)
DESCRIPTION = "replica per GPU, batch split, gradient all-reduce over all GPUs"


@dataclass(frozen=True)
class Settings:
    # Data's tunables are the simulator-wide ones (collectives, [xla] combiner, overheads)
    expert_parallel: int = option(1, "GPUs a mixture of experts' experts are split over (--expert-parallel: "
                                     "consecutive GPUs of a site, two all-to-alls per MoE layer each way; "
                                     "1: every GPU holds every expert)")


def layout_options(case: Case, hosts: tuple[str, ...], expert: int | None = None) -> dict:
    """--expert-parallel asked: its groups checked on the hosts asked (inside a site, dividing the experts)."""
    if expert is None:
        return {}
    _experts.check_degree(case.on(hosts), replica_per_gpu(case.on(hosts))[0], expert)
    return {"expert_parallel": expert}


def build(case: Case, settings: Settings) -> Schedule:
    model, workload, params = case.model, case.workload, case.params
    devices, per_gpu, grad_bytes, group = replica_per_gpu(case)
    p = len(devices)
    runtime = runtime_of(workload, params)
    if settings.expert_parallel > 1:
        return _expert_parallel(case, devices, per_gpu, settings.expert_parallel)
    memory = memory_layout.per_device(
        devices, model, workload, params, runtime,
        lambda options: memory_layout.data_parallel(model, per_gpu, workload.seq_len, options),
        lambda: jax_placement(model, workload.global_batch, workload.microbatches, p))
    what = f"data parallel over {p} GPUs, {workload.microbatches} microbatches of {per_gpu:g} sequences each, "
    if runtime.overlap_backward and p > 1:
        programs, buckets = _overlapped(model, workload, params, group, per_gpu, grad_bytes, runtime)
        return Schedule(NAME, devices, programs, {r: sum(m.values()) for r, m in memory.items()}, memory,
                        what + f"{buckets} buckets of {grad_bytes / buckets / MIB:.1f} MiB all-reduced during the backward")
    allreduce = combined("allreduce", group, grad_bytes, params.for_technique("collectives", NAME), ("grads",),
                         "gradient all-reduce", params, workload)
    program = [accumulation(model, workload, per_gpu, group), allreduce, optimizer_op(model, model.num_params),
               overhead_op(NAME, params, workload)]
    return Schedule(NAME, devices, {d.rank: program for d in devices},
                    {r: sum(m.values()) for r, m in memory.items()}, memory,
                    what + f"{allreduce.count} all-reduce buffers of {grad_bytes / allreduce.count / MIB:.1f} MiB")


def _expert_parallel(case: Case, devices, per_gpu: float, degree: int) -> Schedule:
    """Data's replicas with the experts split over groups of `degree` GPUs (geosim/techniques/_experts.py)."""
    model, workload, params = case.model, case.workload, case.params
    groups = _experts.check_degree(case, devices, degree)
    held = _experts.params_held(model, degree)
    everyone = tuple(d.rank for d in devices)
    algorithm = params.for_technique("collectives", NAME)
    e = workload.bytes_per_value
    shared = combined("allreduce", everyone, (model.num_params - model.expert_params) * e, algorithm, ("grads",),
                      "gradient all-reduce (outside the experts)", params, workload)
    memory = memory_layout.per_device(
        devices, model, workload, params, runtime_of(workload, params),
        lambda options: memory_layout.data_parallel(model, per_gpu, workload.seq_len, options, params_held=held),
        lambda: jax_placement(model, workload.global_batch, workload.microbatches, len(devices)))
    peers = {r: peer for peer in _experts.peer_groups(groups) for r in peer}
    programs = {}
    for group in groups:
        fwd, bwd = pass_ops(model, workload, per_gpu, model.n_layer, True, True)
        micro = Repeat((fwd, _experts.exchange(model, workload, per_gpu, group, "forward"), bwd,
                        _experts.exchange(model, workload, per_gpu, group, "backward"), update_op(model, held)),
                       workload.microbatches, group, ("microbatch",), "microbatches")
        for rank in group:
            experts = combined("allreduce", peers[rank], model.expert_params / degree * e, algorithm,
                               ("expert grads",), "expert gradient all-reduce", params, workload)
            programs[rank] = [micro, shared, experts, optimizer_op(model, held), overhead_op(NAME, params, workload)]
    what = (f"data parallel over {len(devices)} GPUs, {workload.microbatches} microbatches of {per_gpu:g} sequences "
            f"each; {model.n_expert} experts split over groups of {degree} GPUs ({model.n_expert // degree} each), "
            f"{2 * model.moe_layers} all-to-alls each way per microbatch")
    return Schedule(NAME, devices, programs, {r: sum(m.values()) for r, m in memory.items()}, memory, what)


def _overlapped(model, workload, params, group, per_gpu, grad_bytes, runtime):
    """Programs whose gradient buckets are reduced while the last microbatch's backward runs."""
    buckets = min(runtime.buffers(grad_bytes, params), max(1, model.n_layer))
    share = grad_bytes / buckets / len(group)  # what one GPU sends each peer per bucket and phase
    cut = [model.n_layer * i // buckets for i in range(buckets + 1)]  # layers of each piece, head first
    forward, _ = pass_ops(model, workload, per_gpu, model.n_layer, True, True)
    pieces = []
    for i in range(buckets):
        layers, head, embedding = cut[i + 1] - cut[i], i == 0, i == buckets - 1
        flops = forward_flops(model, workload, per_gpu, layers, head) * backward_multiplier(workload)
        pieces.append(Compute(flops, f"backward (bucket {i + 1} of {buckets})",
                              work=work("backward", model, workload, per_gpu, layers, head, embedding)))
    launch = launch_ops(runtime)
    programs = {}
    for rank in group:
        peers = [q for q in group if q != rank]

        def reduced(i):  # the bucket's reduce-scatter has arrived: share the reduced slice
            return ([Recv(q, ("ddp-rs", i)) for q in peers]
                    + [Send(q, share, ("ddp-ag", i), p2p=False) for q in peers])

        program = []
        if workload.microbatches > 1:  # DDP's no_sync(): the earlier microbatches only accumulate
            program.append(Repeat(pass_ops(model, workload, per_gpu, model.n_layer, True, True)
                                  + (update_op(model, model.num_params),), workload.microbatches - 1, group,
                                  ("microbatch",), "microbatches without sync"))
        program.append(forward)
        for i, piece in enumerate(pieces):
            program += [piece, *launch] + [Send(q, share, ("ddp-rs", i), p2p=False) for q in peers]
            if i:
                program += reduced(i - 1)
        program += reduced(buckets - 1)
        program += [Recv(q, ("ddp-ag", i)) for i in range(buckets) for q in peers]
        program += [update_op(model, model.num_params), optimizer_op(model, model.num_params),
                    overhead_op(NAME, params, workload)]
        programs[rank] = program
    return programs, buckets


def plan_floor_s(case: Case, hosts: tuple[str, ...], workload, options: dict | None) -> float:
    """The busiest GPU's compute and collectives back to back (geosim.techniques._floor)."""
    return _floor.plan_floor_s(case, hosts, workload, options, NAME)


def jax_placement(model, global_batch: int, microbatches: int, devices: int, stages: int | None = None):
    """How live's JAX step (live/train/techniques/data.py) places Data on a device, for the memory model
    (geosim.sim.memory_layout.live_step): a whole replica, 1/n of each microbatch. live accumulates the
    first microbatch before a scan over the rest; with two microbatches that scan has one step, which XLA
    unrolls, and its scheduler then holds both microbatches' residuals and logits at once (measured: gpt2
    and tiny, 2 microbatches); with more, the loop runs them one at a time."""
    return memory_layout.LivePlacement(rows=global_batch / devices / microbatches, layers=model.n_layer,
                                       params_held=model.num_params, grads_held=model.num_params,
                                       microbatch_grads=model.num_params, in_flight=2 if microbatches == 2 else 1,
                                       heads_in_flight=2)
