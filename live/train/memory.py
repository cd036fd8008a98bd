"""Memory a training step needs per device, estimated from the model's dimensions before
any weight exists (an oversized run on CPU meets the kernel's OOM killer: exit 137, no
record). Deliberately simple and on the generous side of what XLA really allocates: the
compiled step's own memory analysis is checked again after compilation.

Per device: the training state (fp32 weights, gradients, AdamW's two moments: 16 bytes per
parameter, divided as each technique divides it) plus the activations kept for the backward
pass (Korthikanti et al. 2022: 34 sh + 5 a s^2 bytes per token and layer at 16-bit; twice
that at fp32; the tensor-parallel share of it split over the devices) plus the fp32 logits
and their gradient.
"""

from __future__ import annotations

import os

GIB = 2**30


def num_params(n_layer: int, n_embd: int, vocab: int, n_ctx: int) -> int:
    c = n_embd
    return vocab * c + n_ctx * c + n_layer * (12 * c * c + 13 * c) + 2 * c


def estimate_gib(technique: str, *, n_layer: int, n_embd: int, n_head: int, vocab: int, n_ctx: int,
                 precision: str, global_batch: int, microbatches: int, devices: int, stages: int | None = None,
                 replicas: int | None = None) -> float:
    """GiB one device needs for one training step of this run (see the module's docstring)."""
    p = num_params(n_layer, n_embd, vocab, n_ctx)
    n = max(devices, 1)
    act_bytes = 2 if precision in ("bf16", "fp16") else 4
    layers = n_layer
    tensor = 1  # devices a layer's matmuls are split over
    if technique in ("data", "diloco", "sparseloco"):
        state = 16 * p + 4 * p  # + the flat gradient buffer reduced in one piece
        if technique != "data":
            state += 8 * p  # outer parameters and outer momentum
        rows = global_batch / n / microbatches
    elif technique == "zero2":
        state = 8 * p + 12 * p / n + 4 * p
        rows = global_batch / n / microbatches
    elif technique == "shard":
        state = 16 * p / n
        rows = global_batch / microbatches  # every device sees the whole (micro)batch
        tensor = n
    elif technique == "pipeshard":
        s = stages or min(2, n)
        state = 16 * p / n
        layers = n_layer / s
        tensor = max(1, n // s)
        rows = global_batch  # GPipe keeps every microbatch's activations until its backward pass
    else:
        raise ValueError(technique)
    # Korthikanti et al.: with tensor parallelism over t devices, 10 sh + (24 sh + 5 a s^2) / t
    per_row_layer = n_ctx * (10 * n_embd + (24 * n_embd + 5 * n_head * n_ctx) / tensor) * act_bytes / 2
    logits = 2 * 4 * n_ctx * vocab
    return (state + rows * (layers * per_row_layer + logits)) / GIB


def host_available_gib() -> float | None:
    """MemAvailable of this machine (Linux), the CPU devices' shared memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 / GIB
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") / GIB
    except (ValueError, OSError):
        return None
