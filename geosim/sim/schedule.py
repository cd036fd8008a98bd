"""What a technique hands the engine: per-GPU programs of compute, send, receive and collective ops.

One iteration's program per rank; the engine repeats it for as many iterations as it
simulates. Ops are plain data: a technique builds them without the event kernel
(geosim/sim/kernel.py) or the engine's processes, and the engine runs them without the model
spec (FLOPs and bytes are already on the ops).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from geosim.inputs.specs import GPU


@dataclass(frozen=True)
class Device:
    rank: int
    host: str
    local_index: int
    gpu: GPU


# Ops are NamedTuples rather than dataclasses: a 1,024-GPU iteration builds millions
# of them, and tuples are created and hashed several times faster.
class Compute(NamedTuple):
    flops: float
    label: str
    kind: str = "compute"  # compute | overhead (fixed seconds in `seconds`)
    seconds: float = 0.0
    work: object = None  # geosim.sim.compute.Work: what the op-level kernel timer times


# In an op's tag, the item after this one names a host: a technique that tags ops by host writes it
# (geosim/techniques/_lowcomm.py: each replica's ops), and a symmetry renames that host with the ranks
# (geosim/sim/symmetry.py). Part of the schedule's vocabulary, so neither names the other.
HOST_IN_TAG = "replica"


class Send(NamedTuple):
    """Non-blocking: the sender goes on while the bytes travel."""

    dst: int
    nbytes: float
    tag: tuple
    p2p: bool = True  # a point-to-point send pays the rendezvous handshake; collective steps do not


class Recv(NamedTuple):
    """Blocking: waits until the matching Send's bytes have arrived."""

    src: int
    tag: tuple


class Collective(NamedTuple):
    op: str  # allreduce | reduce_scatter | all_gather | all_to_all
    group: tuple[int, ...]  # ranks, in ring order
    nbytes: float  # the full buffer each rank contributes (allreduce, all_to_all) or ends with (all_gather)
    algorithm: str  # ring | tree | hierarchical | pairwise (all_to_all's one form)
    tag: tuple
    label: str = ""


class Repeat(NamedTuple):
    """`ops` run `count` times back to back by every rank of `group` (e.g. Shard's identical
    layers). Unless the engine runs exactly, it simulates a few repetitions and lets the last
    one stand for the rest: collectives keep the group in lockstep, so this is exact once the
    repetitions reach a steady state, up to contention with traffic outside the group
    (bench/bench_predict.py measures the difference). Sends inside must stay inside the group."""

    ops: tuple
    count: int
    group: tuple[int, ...]
    tag: tuple
    label: str = ""


class Barrier(NamedTuple):
    """Waits until `size` ranks have reached the barrier of this tag (a network backend's form of a
    collective where communication is free); techniques do not emit it. `group`, where given, names
    the ranks (under a symmetry, those of them that run are awaited: a group moved onto another too)."""

    tag: tuple
    size: int
    group: tuple = ()


Op = Compute | Send | Recv | Collective | Repeat | Barrier


@dataclass
class Schedule:
    """A technique's plan for one iteration, plus what the predictor needs around it."""

    technique: str
    devices: list[Device]
    programs: dict[int, list[Op]]
    memory_bytes: dict[int, float]  # peak per rank
    memory_parts: dict[int, dict[str, float]] = field(default_factory=dict)
    description: str = ""
    # How many training iterations one program covers: 1, except for techniques whose
    # program is a whole outer round of H inner steps (DiLoCo, SparseLoCo); the
    # predictor divides by it so per-iteration figures mean one optimizer step.
    iterations_per_program: int = 1
    # Bytes sent between pipeline stages x this: < 1 when a pipelined run sends its activations
    # compressed (what convergence.py prices in tokens); 1 for uncompressed or no pipeline.
    activation_compression: float = 1.0

    @property
    def num_gpus(self) -> int:
        return len(self.devices)
