"""SparseLoCo (Sarfi et al. 2025, arXiv:2508.15706): DiLoCo whose pseudo-gradients are
top-k sparsified (per chunk), quantized to a few bits and corrected by error feedback.

Each replica (by default one host, data parallel over its PCIe) trains alone for H
inner steps, adds its pseudo-gradient to an fp32 error-feedback buffer, keeps the
top-k fraction of each chunk's values, quantizes them and sends them. Sparse payloads
with different index sets cannot be summed inside a ring, so the replicas all-gather
them (as SparseLoCo does) and each decompresses, averages and steps locally; the
error buffer plays the outer momentum's part, so no momentum is kept.

Wire format assumed, per replica and outer round:
    bytes = parameters x topk_fraction x (bits + index_bits) / 8
with index_bits = 12, a value's position inside its 4096-value chunk (chunk-local
indices, as SparseLoCo's chunked top-k allows). Per-chunk quantization scales (one
16-bit value per 4096 parameters, < 0.05% of the payload) are left out.

Settings: see below (defaults: the params file's [sparseloco]); replicas is per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from geosim.sim.schedule import Schedule
from geosim.inputs.case import Case
from geosim.techniques import _floor
from geosim.techniques._base import check_dims, devices_of
from geosim.techniques._settings import tunable
from geosim.techniques._lowcomm import jax_placement  # noqa: F401 (live's memory model asks it)
from geosim.techniques._lowcomm import layout_options, plan_variants  # noqa: F401 (the registry's)
from geosim.techniques._lowcomm import LIVE_DEFAULTS, outer_lr_tunable, outer_momentum_tunable, replicas_option
from geosim.techniques._lowcomm import (ERROR_FEEDBACK_BYTES, OUTER_COPY_BYTES, assemble, single_host_replicas,
                                        sparse_gather_ops)

NAME = "sparseloco"
# counted units (geosim.cost.schedule_work) its predictions simulate per CPU second, as measured for its row
# on the largest bench cluster it runs on, 2 shared cores (docs/results/2026-11-28-every-row.md): cost.expected_seconds
SIMULATED_UNITS_PER_CPU_S = 0.64e6
LOW_COMMUNICATION = True  # more tokens for the same loss: ranked on time to a target
LABEL = "SparseLoCo"  # how tables and verdicts name it
DESCRIPTION = "replica per host, H local steps, then an all-gather of top-k, 2-bit pseudo-gradients with error feedback"


BUILDS_ON = ("data",)  # an inner step is Data's iteration on the replica's host


@dataclass(frozen=True)
class Settings:
    inner_steps: int = tunable(100, "H: inner steps per outer round", low=1, unit="steps",
                               source="Sarfi et al. 2025 sweep 15-250")
    topk_fraction: float = tunable(0.01, "values kept per chunk", low=1e-6, high=1.0, unit="fraction",
                                     source="Sarfi et al. 2025: 1-3%")
    bits: int = tunable(2, "bits of a quantized value", low=1, high=32, unit="bits", source="Sarfi et al. 2025")
    index_bits: float = tunable(12.0, "chunk-local index bits: log2 of the 4096-value chunk", low=0.0, high=64.0,
                                   unit="bits", source="Sarfi et al. 2025's 4096-value chunks")
    error_feedback: bool = tunable(True, "keep an fp32 error-feedback buffer (4 bytes/param)", unit="flag",
                                   source="Sarfi et al. 2025")
    # SparseLoCo's paper applies the replicas' average: lr 1, no momentum
    outer_lr: float = outer_lr_tunable(1.0, source="Sarfi et al. 2025")
    outer_momentum: float = outer_momentum_tunable(0.0, source="Sarfi et al. 2025")
    replicas: tuple | None = replicas_option()
    LIVE_DEFAULTS: ClassVar[dict] = LIVE_DEFAULTS


def payload_bytes(parameters: float, s: Settings) -> float:
    """Bytes one replica sends for `parameters` values: top-k fraction x (bits + index bits)."""
    return parameters * s.topk_fraction * (s.bits + s.index_bits) / 8


def state_bytes_per_param(s: Settings) -> float:
    """fp32 outer parameters, plus the error-feedback buffer when on."""
    return OUTER_COPY_BYTES + (ERROR_FEEDBACK_BYTES if s.error_feedback else 0.0)


def build(case: Case, settings: Settings) -> Schedule:
    cluster, model, workload, params = case.cluster, case.model, case.workload, case.params
    check_dims(model, workload)
    s = settings
    devices = devices_of(cluster)
    replicas = single_host_replicas(cluster, {"replicas": s.replicas}, model, workload, params, NAME, state_bytes_per_param(s),
                                    "outer state + error feedback" if s.error_feedback else "outer state")
    sync = sparse_gather_ops(replicas, lambda n: payload_bytes(n, s), params.for_technique("collectives", NAME), devices)
    return assemble(NAME, devices, replicas, s.inner_steps, sync,
                    f"{len(replicas)} replicas ({replicas[0].description}), H={s.inner_steps}, "
                    f"top-{s.topk_fraction:g} x {s.bits}-bit (+{s.index_bits:g}-bit index)"
                    + (", error feedback" if s.error_feedback else ""))


def plan_floor_s(case: Case, hosts: tuple[str, ...], workload, options: dict | None) -> float:
    """The busiest GPU's inner steps and synchronization back to back (geosim.techniques._floor)."""
    return _floor.plan_floor_s(case, hosts, workload, options, NAME)
