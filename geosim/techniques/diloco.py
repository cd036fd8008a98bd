"""DiLoCo (Douillard et al. 2023, arXiv:2311.08105): each replica (by default one host,
data parallel over its PCIe) trains alone for H inner steps; then the replicas
all-reduce their pseudo-gradients (outer params - inner params) and take an outer
optimizer step (Nesterov momentum). The wide-area links carry one parameter-sized
all-reduce per H steps instead of one per step.

With overlap on, Streaming DiLoCo (Douillard et al. 2025, arXiv:2501.18512): the
parameters are cut into F fragments synced in turn, fragment f launched at inner step
f*H/F and applied tau steps later, its transfer running while the GPUs train. The
engine runs one op at a time per GPU, so a background ring all-reduce cannot be
expressed; instead each GPU sends its shard of the fragment straight to its peer in
every other replica (non-blocking sends) and receives theirs when the fragment is due.
For two replicas that is exactly a ring all-reduce's bytes; for R > 2 it sends
(R-1)/R x more than a ring would (an upper bound).

Settings: see below; each defaults to the params file's [diloco]; replicas is per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from geosim.base.errors import GeosimError
from geosim.sim.schedule import Collective, Recv, Schedule, Send
from geosim.inputs.case import Case
from geosim.techniques import _floor
from geosim.techniques._base import check_dims, combined, devices_of
from geosim.techniques._settings import tunable
from geosim.techniques._lowcomm import jax_placement  # noqa: F401 (live's memory model asks it)
from geosim.techniques._lowcomm import layout_options, plan_variants  # noqa: F401 (the registry's)
from geosim.techniques._lowcomm import LIVE_DEFAULTS, outer_lr_tunable, outer_momentum_tunable, replicas_option
from geosim.techniques._lowcomm import (OUTER_STATE_BYTES, SYNC_BYTES_PER_PARAM, assemble, inner_step, outer_step_op,
                                        replica_name, single_host_replicas)

NAME = "diloco"
# counted units (geosim.cost.schedule_work) its predictions simulate per CPU second, as measured for its row
# on the largest bench cluster it runs on, 2 shared cores (docs/results/2026-11-28-every-row.md): cost.expected_seconds
SIMULATED_UNITS_PER_CPU_S = 0.97e6
LOW_COMMUNICATION = True  # more tokens for the same loss: ranked on time to a target
LABEL = "DiLoCo"  # how tables and verdicts name it
DESCRIPTION = "replica per host, H local steps, then an all-reduce of pseudo-gradients and a Nesterov outer step"


BUILDS_ON = ("data", "fsdp")  # an inner step is Data's iteration on the replica's host (or FSDP's: inner)
INNER = ("data", "fsdp")


@dataclass(frozen=True)
class Settings:
    inner_steps: int = tunable(100, "H: inner steps per outer round", low=1, unit="steps",
                               source="Streaming DiLoCo's 100 (Douillard et al. 2025); the DiLoCo paper's 500")
    outer_optimizer: str = tunable("nesterov", "outer step: nesterov (momentum 0.9, the paper's; 8 B/param of fp32 "
                                   "state) or sgd (4 B/param)", choices=tuple(OUTER_STATE_BYTES),
                                   source="the DiLoCo paper (Douillard et al. 2023)")
    overlap: bool = tunable(False, "Streaming DiLoCo: fragments synced in turn while training goes on",
                            unit="flag", source="plain DiLoCo by default")
    fragments: int = tunable(4, "streaming fragments (each 1/fragments of the parameters)", low=1, unit="count",
                             source="Streaming DiLoCo (Douillard et al. 2025)")
    overlap_steps: int = tunable(1, "tau: inner steps a fragment's sync overlaps before it is applied", low=0,
                                 unit="steps", source="Streaming DiLoCo (Douillard et al. 2025)")
    sync_dtype_bytes: float = tunable(4.0, "pseudo-gradient bytes per value on the wire: 4 fp32, 2 bf16, "
                                      "0.5 Streaming DiLoCo's 4-bit", low=0.125, high=8.0, unit="B/value",
                                      source="the DiLoCo paper's fp32 pseudo-gradients")
    outer_lr: float = outer_lr_tunable(0.7, source="the DiLoCo paper (Douillard et al. 2023)")
    outer_momentum: float = outer_momentum_tunable(0.9, source="the DiLoCo paper (Douillard et al. 2023)")
    inner: str = tunable("data", "a replica's inner step: data (a whole model on each GPU) or fsdp (sharded over "
                         "the replica's GPUs, as [fsdp] says; the outer step and its all-reduce on each GPU's shard)",
                         choices=INNER, source="the DiLoCo paper's data parallel replicas; INTELLECT-1 ran FSDP inside "
                         "each node (Jaghouar et al. 2024)")
    replicas: tuple | None = replicas_option()
    LIVE_DEFAULTS: ClassVar[dict] = LIVE_DEFAULTS


def build(case: Case, settings: Settings) -> Schedule:
    cluster, model, workload, params = case.cluster, case.model, case.workload, case.params
    check_dims(model, workload)
    s = settings
    devices = devices_of(cluster)
    replicas = single_host_replicas(cluster, {"replicas": s.replicas}, model, workload, params, NAME,
                                    OUTER_STATE_BYTES[s.outer_optimizer], "outer optimizer", inner=s.inner)
    H = s.inner_steps
    pseudo_gradient = model.num_params * s.sync_dtype_bytes
    algorithm = params.for_technique("collectives", NAME)
    what = (f"{len(replicas)} replicas ({replicas[0].description}), H={H}, {s.outer_optimizer} outer step, "
            f"pseudo-gradient {s.sync_dtype_bytes:g} B/value")
    if s.inner == "fsdp":
        if s.overlap:
            raise GeosimError("Streaming DiLoCo (overlap) is modelled on data parallel replicas only, not with "
                              "inner = \"fsdp\"", key=f"{NAME}.overlap")
        return assemble(NAME, devices, replicas, H, _sharded_sync(devices, replicas, pseudo_gradient, algorithm,
                                                                  params, workload, model.num_params),
                        what + ", FSDP inner steps (the outer step on each GPU's shard)")
    if not s.overlap:
        # one all-reduce over every GPU: with H=1 and the training dtype, exactly Data's
        everyone = tuple(d.rank for d in devices)
        sync = {}
        for d in devices:
            ops = []
            if len(replicas) > 1:
                ops.append(combined("allreduce", everyone, pseudo_gradient, algorithm, ("outer",),
                                    "pseudo-gradient all-reduce", params, workload))
            sync[d.rank] = ops + [outer_step_op(d, model.num_params)]
        return assemble(NAME, devices, replicas, H, sync, what)
    return _streaming(devices, replicas, H, s, model.num_params, what)


def _sharded_sync(devices, replicas, pseudo_gradient: float, algorithm: str, params, workload, num_params: int):
    """FSDP replicas: the GPU holding shard j of each replica all-reduces that shard's pseudo-gradient with the
    others holding it (replicas of equal size: the same shards), then steps it."""
    sizes = {len(rep.ranks) for rep in replicas}
    if len(sizes) != 1:
        raise GeosimError(f"FSDP inner steps need replicas of as many GPUs each (got {sorted(sizes)})", key="replicas")
    k = sizes.pop()
    sync = {}
    for j in range(k):
        group = tuple(rep.ranks[j] for rep in replicas)
        for rank in group:
            ops = []
            if len(replicas) > 1:
                ops.append(combined("allreduce", group, pseudo_gradient / k, algorithm, ("outer", j),
                                    "pseudo-gradient shard all-reduce", params, workload))
            sync[rank] = ops + [outer_step_op(devices[rank], num_params / k)]
    return sync


def _streaming(devices, replicas, H: int, s: Settings, num_params: int, what: str) -> Schedule:
    F = min(s.fragments, H)  # at most one fragment launched per inner step
    launch = [f * H // F for f in range(F)]
    due = [min(start + s.overlap_steps, H) for start in launch]  # H: applied at the end of the round
    fragment = num_params / F
    k = min(len(rep.ranks) for rep in replicas)  # a fragment is sharded over k GPUs of every replica
    shard_bytes = fragment * s.sync_dtype_bytes / k
    programs = {}
    for rep in replicas:
        peers = [other for other in replicas if other is not rep]
        for j, rank in enumerate(rep.ranks):

            def apply(f, j=j, rank=rank, rep=rep, peers=peers):
                ops = [Recv(other.ranks[j], ("frag", f)) for other in peers] if j < k else []
                ops.append(outer_step_op(devices[rank], fragment / len(rep.ranks), f"outer step fragment {f}"))
                if len(rep.ranks) > 1:
                    ops.append(Collective("all_gather", rep.ranks, fragment * SYNC_BYTES_PER_PARAM, "ring",
                                          ("frag-share", f) + replica_name(rep.hosts),
                                          "updated fragment inside the replica"))
                return ops

            program = []
            for h in range(H + 1):
                # launch before applying: with tau = 0 a fragment is sent, then waited for
                if j < k:
                    program += [Send(other.ranks[j], shard_bytes, ("frag", f), p2p=False)
                                for f in range(F) if launch[f] == h and h < H for other in peers]
                for f in range(F):
                    if due[f] == h:
                        program += apply(f)
                if h < H:
                    program += inner_step(rep, rank, h)
            programs[rank] = program
    memory_parts = {r: parts for rep in replicas for r, parts in rep.memory_parts.items()}
    return Schedule(NAME, devices, programs, {r: sum(p.values()) for r, p in memory_parts.items()}, memory_parts,
                    what + f", streaming {F} fragments overlapped {s.overlap_steps} steps",
                    iterations_per_program=H)


def plan_floor_s(case: Case, hosts: tuple[str, ...], workload, options: dict | None) -> float:
    """The busiest GPU's inner steps and synchronization back to back (geosim.techniques._floor)."""
    return _floor.plan_floor_s(case, hosts, workload, options, NAME)
