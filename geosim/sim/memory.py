"""Peak memory per GPU: model states, activations of in-flight microbatches, workspace.

Mixed precision (fp16/bf16) keeps 16-bit weights and gradients plus fp32 master
weights and Adam's two moments (params.optimizer_bytes_per_param = 12); pure fp32
keeps 4-byte weights and gradients and Adam's moments (8).
"""

from __future__ import annotations

from dataclasses import dataclass

from geosim.specs import GIB, Model, Params, Workload


@dataclass(frozen=True)
class StateBytes:
    weights: float
    gradients: float
    optimizer: float


def state_bytes_per_param(workload: Workload, params: Params) -> StateBytes:
    b = workload.bytes_per_value
    optimizer = params.optimizer_bytes_per_param if workload.precision != "fp32" else params.optimizer_bytes_per_param - 4
    return StateBytes(weights=b, gradients=b, optimizer=optimizer)


def activation_bytes(model: Model, workload: Workload, sequences: float, layers: int,
                     with_head: bool, tensor_parallel: int = 1) -> float:
    """Activations kept for backward by `layers` blocks (and the LM head) for `sequences` sequences."""
    per_layer = model.activation_bytes_per_layer(sequences, workload.seq_len, tensor_parallel)
    if workload.checkpointing:  # only each block's input survives; one block is recomputed at a time
        total = layers * sequences * workload.seq_len * model.n_embd * workload.bytes_per_value + per_layer
    else:
        total = layers * per_layer
    if with_head:
        total += model.head_activation_bytes(sequences, workload.seq_len, tensor_parallel)
    return total


def gpu_memory(*, params_held: float, grads_held: float, optimizer_held: float, activations: float,
               workload: Workload, params: Params) -> dict[str, float]:
    """The parts of one GPU's peak, in bytes; `params_held` etc. count parameters, not bytes."""
    sb = state_bytes_per_param(workload, params)
    return {
        "weights": params_held * sb.weights,
        "gradients": grads_held * sb.gradients,
        "optimizer": optimizer_held * sb.optimizer,
        "activations": activations,
        "workspace": params.workspace_gib * GIB,
    }
