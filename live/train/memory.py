"""Memory a training step needs per device, before any weight exists: the simulator's own
memory model (geosim.sim.memory_layout.live_step, the layout XLA gives live's step, checked
against XLA's buffer assignment by bench/bench_memory.py), not a table of its own. An
oversized run on CPU meets the kernel's OOM killer (exit 137, no record), so the run is
refused before allocating when the model says it does not fit; the compiled step's own
memory analysis is checked again after compilation.
"""

from __future__ import annotations

import os

GIB = 2**30


def layout(technique: str, *, n_layer: int, n_embd: int, n_head: int, vocab: int, n_ctx: int, precision: str,
           global_batch: int, microbatches: int, devices: int, stages: int | None = None, remat: bool = False,
           replicas: int | None = None, architecture: str = "") -> dict[str, float]:
    """Bytes one device holds at the step's peak, by part (weights, optimizer, activations, ...): the
    technique's placement (the simulator's geosim/techniques/<name>.py jax_placement) through the simulator's memory model.
    `replicas` is accepted for the low-communication techniques' callers (their replicas train data
    parallel, which is how their placement lays them out). `architecture`: the GPU generation XLA compiles
    for (its fusions keep different residuals: geosim/data/generations.toml, jax_score_16bit_values)."""
    from geosim.live.registry import placement as placement_of
    from geosim.sim.memory_layout import LayoutOptions, live_step
    from geosim.inputs.specs import Model

    model = Model(name="live", n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab=vocab, n_ctx=n_ctx)
    placement = placement_of(technique)(model, global_batch, microbatches, devices, stages)
    return live_step(model, placement, n_ctx, microbatches, LayoutOptions(precision=precision, remat=remat,
                                                                         workspace_bytes=0.0, architecture=architecture))


def estimate_gib(technique: str, **dims) -> float:
    """GiB one device needs for one training step of this run (the sum of `layout`)."""
    return sum(layout(technique, **dims).values()) / GIB


def verdict(need_gib: float, limit_gib: float):
    """The simulator's band for this need against a device's whole limit (fits / may not fit / out-of-memory)."""
    from geosim.inputs.params import default_params
    from geosim.sim.memory_layout import LayoutOptions, verdict as band

    options = LayoutOptions(usable_fraction=1.0, margin_fraction=default_params().memory_margin_fraction)
    return band(need_gib * GIB, limit_gib, options)


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
