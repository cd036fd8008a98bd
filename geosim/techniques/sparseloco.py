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

Options: replicas, inner_steps, topk_fraction, bits, index_bits, error_feedback
(defaults: the params file's [sparseloco]).
"""

from __future__ import annotations

from geosim.errors import GeosimError
from geosim.sim.schedule import Schedule
from geosim.specs import Cluster, Model, Params, Workload
from geosim.techniques._base import check_dims, devices_of
from geosim.techniques._lowcomm import (ERROR_FEEDBACK_BYTES, OUTER_COPY_BYTES, assemble, single_host_replicas,
                                        sparse_gather_ops)

NAME = "sparseloco"
DESCRIPTION = "replica per host, H local steps, then an all-gather of top-k, 2-bit pseudo-gradients with error feedback"


def settings(params: Params, options: dict) -> dict:
    s = {
        "inner_steps": int(options.get("inner_steps", params.sparseloco_inner_steps)),
        "topk_fraction": float(options.get("topk_fraction", params.sparseloco_topk_fraction)),
        "bits": int(options.get("bits", params.sparseloco_bits)),
        "index_bits": float(options.get("index_bits", params.sparseloco_index_bits)),
        "error_feedback": bool(options.get("error_feedback", params.sparseloco_error_feedback)),
    }
    if s["inner_steps"] < 1 or not 0 < s["topk_fraction"] <= 1 or s["bits"] < 1 or s["index_bits"] < 0:
        raise GeosimError(f"SparseLoCo settings out of range: {s}", key="sparseloco")
    return s


def payload_bytes(parameters: float, s: dict) -> float:
    """Bytes one replica sends for `parameters` values: top-k fraction x (bits + index bits)."""
    return parameters * s["topk_fraction"] * (s["bits"] + s["index_bits"]) / 8


def state_bytes_per_param(s: dict) -> float:
    """fp32 outer parameters, plus the error-feedback buffer when on."""
    return OUTER_COPY_BYTES + (ERROR_FEEDBACK_BYTES if s["error_feedback"] else 0.0)


def build(cluster: Cluster, model: Model, workload: Workload, params: Params, options: dict | None = None) -> Schedule:
    check_dims(model, workload)
    options = options or {}
    s = settings(params, options)
    devices = devices_of(cluster)
    replicas = single_host_replicas(cluster, options, model, workload, params, NAME, state_bytes_per_param(s),
                                    "outer state + error feedback" if s["error_feedback"] else "outer state")
    sync = sparse_gather_ops(replicas, lambda n: payload_bytes(n, s), params.collectives.get(NAME, "ring"), devices)
    return assemble(NAME, devices, replicas, s["inner_steps"], sync,
                    f"{len(replicas)} replicas ({replicas[0].description}), H={s['inner_steps']}, "
                    f"top-{s['topk_fraction']:g} x {s['bits']}-bit (+{s['index_bits']:g}-bit index)"
                    + (", error feedback" if s["error_feedback"] else ""))
