"""Pipeshard's interleaved 1F1B schedule (Narayanan et al. 2021, Megatron-LM's virtual pipeline).

Each of the S stages holds v chunks of layers, round robin: virtual stage k = c x S + s is chunk c of
stage s, so a microbatch crosses the S stages v times (the last stage's chunk c hands on to the
first stage's chunk c + 1). A stage runs its microbatch-chunks in Megatron's order: groups of S
microbatches through chunk 0, then the same S through chunk 1, ...; backwards in the reverse chunk
order; a warm-up of (S - s - 1) x 2 + (v - 1) x S forwards, then one forward and one backward in turn.
The bubble shrinks v-fold: with equal chunks and free communication an iteration takes
(M + (S - 1) / v) x (t_f + t_b), t_f and t_b a stage's whole forward and backward of one microbatch
(tests/test_interleave.py checks it), at the price of v times the point-to-point sends.
"""

from __future__ import annotations

import math
from typing import Callable

from geosim.base.errors import GeosimError


def check_interleave(settings, stages: int, microbatches: int) -> None:
    """Interleaving's conditions, one line each: a whole number of virtual stages of a 1F1B pipeline of
    two or more stages, and microbatches in groups of S (Megatron's)."""
    v = settings.interleave
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise GeosimError(f"must be a whole number >= 1, got {v!r}", key="interleave")
    if v == 1:
        return
    if settings.schedule != "1f1b":
        raise GeosimError(f"interleaving needs the 1f1b schedule, not {settings.schedule}", key="interleave")
    if stages < 2:
        raise GeosimError("interleaving needs a pipeline of two or more stages", key="interleave")
    if microbatches % stages:
        raise GeosimError(f"interleaving needs the microbatches ({microbatches}) in groups of the {stages} stages "
                          f"(a multiple of {stages})", key="interleave")


def layers_per_chunk(case, stages: int, settings) -> list[list[int]]:
    """Each stage's layers per chunk, [stage][chunk]: the explicit split of the S x v virtual stages
    (layer_split, in virtual-stage order), else as even as the layers allow (earlier virtual stages
    take the remainder)."""
    v, n_layer = settings.interleave, case.model.n_layer
    virtual = stages * v
    if settings.layer_split is not None:
        split = list(settings.layer_split)
        if len(split) != virtual or sum(split) != n_layer or min(split) < 1:
            raise GeosimError(f"layer split {split} must give each of {virtual} virtual stages ({stages} stages x "
                              f"{v}) >= 1 layer, {n_layer} in all", key="layer_split")
    else:
        if n_layer < virtual:
            raise GeosimError(f"{n_layer} layers cannot fill {virtual} virtual stages ({stages} stages x {v})",
                              key="interleave")
        base, rest = divmod(n_layer, virtual)
        split = [base + (1 if k < rest else 0) for k in range(virtual)]
    return [[split[c * stages + s] for c in range(v)] for s in range(stages)]


def interleaved_program(forward: Callable, backward: Callable, stages: int, s: int, microbatches: int,
                        v: int) -> tuple[list, int]:
    """Stage s's program (forward(m, c) and backward(m, c) give a microbatch-chunk's ops) and how many
    microbatches' activations it holds at most, in whole-stage equivalents (for its memory)."""
    total = microbatches * v

    def unit(i: int, backwards: bool) -> tuple[int, int]:
        group = i // stages
        chunk = group % v
        return (i // (stages * v)) * stages + i % stages, (v - 1 - chunk if backwards else chunk)

    warmup = _warmup(stages, s, microbatches, v)
    program = []
    for i in range(warmup):
        program += forward(*unit(i, False))
    for i in range(total - warmup):
        program += forward(*unit(warmup + i, False)) + backward(*unit(i, True))
    for i in range(total - warmup, total):
        program += backward(*unit(i, True))
    return program, interleaved_in_flight(stages, s, microbatches, v)


def _warmup(stages: int, s: int, microbatches: int, v: int) -> int:
    """Microbatch-chunks stage s runs forward before its first backward."""
    return min((stages - s - 1) * 2 + (v - 1) * stages, microbatches * v)


def interleaved_in_flight(stages: int, s: int, microbatches: int, v: int) -> int:
    """How many microbatches' activations stage s of an interleaved schedule holds at most, in whole-stage
    equivalents (for its memory; known without its program)."""
    # at most warmup + 1 microbatch-chunks in flight, each 1 / v of the stage's layers
    return min(microbatches, math.ceil((_warmup(stages, s, microbatches, v) + 1) / v))


# virtual stages per stage the structured planner tries: Megatron-LM's tables interleave 2 to 4 chunks a
# stage; each more multiplies the point-to-point sends and the options to weigh
PLANNED_VIRTUAL_STAGES = (2, 4)


def planned_interleaves(settings, n_layer: int, stages: int, microbatches: int) -> list[tuple[int, tuple[int, ...]]]:
    """(v, the even layer split of the S x v virtual stages) for each interleaving the planner tries on a
    pipeline of `stages` (check_interleave's conditions, each virtual stage >= 1 layer); the even split is
    layers_per_chunk's own, written out so the planner's floor can weigh the option."""
    if settings.schedule != "1f1b" or settings.interleave != 1 or stages < 2 or microbatches % stages:
        return []
    found = []
    for v in PLANNED_VIRTUAL_STAGES:
        if n_layer >= stages * v:
            base, rest = divmod(n_layer, stages * v)
            found.append((v, tuple(base + (1 if k < rest else 0) for k in range(stages * v))))
    return found


def round_trips(stages: int, microbatches: int, v: int) -> int:
    """How many microbatch round trips stage 0 runs one after another under interleaved_program (v >= 2):
    a microbatch's chunk-0 backward ends its round trip through every virtual stage and back, and stage
    0's program runs its forward unit j only after its backward unit j - warmup - 1. So microbatch k'
    starts (chunk 0) after microbatch k has come back whenever k's backward unit comes that early; a chain
    of such microbatches is a chain of whole round trips, back to back (the pipeline floor's)."""
    total, S = microbatches * v, stages
    warmup = min((S - 1) * 2 + (v - 1) * S, total)

    def forward_unit(k: int) -> int:  # unit index of microbatch k's chunk 0 (groups of S, chunk by chunk)
        return (k // S) * S * v + k % S

    trips, k = 1, 0
    while True:
        back = forward_unit(k) + (v - 1) * S  # its chunk-0 backward: the last of its group's backward chunks
        nxt = next((m for m in range(k + 1, microbatches) if forward_unit(m) - warmup - 1 >= back), None)
        if nxt is None:
            return trips
        trips, k = trips + 1, nxt
