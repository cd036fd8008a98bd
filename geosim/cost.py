"""What a prediction will cost, known before it is simulated: its work, counted from the schedule.

A prediction's time follows the work its simulation does, and that follows the schedule: ranks x
ops, a collective's steps (a ring all-reduce is 2(p - 1) sends and as many receives per member,
whether the engine runs them as events or computes their rounds at once), a Repeat block's
repetitions (all of them when exact, else the engine's first few:
geosim.sim.engine.SIMULATED_REPETITIONS), for every iteration simulated. Counting them walks the
schedule once (shared blocks once), far cheaper than simulating it. The count is an upper bound:
a symmetric cluster simulates one rank of each class (geosim.sim.symmetry), and the engine runs
a lockstep collective's rounds once per shape, so most cases do far less than it says (measured on
the usual VM: 0.15-4 million counted units a second, by technique).

MAX_PREDICTION_WORK: past it, a prediction is not simulated; it is answered "infeasible" with a
reason that says how large it is and what shrinks it, as a case that does not fit in memory is.
Every path that predicts (rows asked, the planner's options, sweep points, draws) meets it. Work
under it that takes long shows progress (geosim.cli.common.Progress, geosim.cli._progress).
"""

from __future__ import annotations

import math

from geosim.base.errors import GeosimError
from geosim.sim.collectives import host_layout
from geosim.sim.engine import SIMULATED_REPETITIONS
from geosim.sim.schedule import Collective, Repeat
from geosim.techniques import simulation_rate

# Counted per prediction (4 iterations): GPT-3 6.7B on 1,024 GPUs is 84 million for Data and 1.7 billion for
# Shard (a collective's steps grow with the square of the GPUs it spans), Pipeshard's 4,096 microbatches on
# 4 GPUs 330 thousand (Repeat blocks keep microbatches cheap). 10 billion is minutes at the fastest rate
# measured (Data's ring rounds priced at once on scale:1x512x16: 5.4 billion in 52 s of CPU, 2 shared
# cores), hours at the slowest: issue 44 bounds a command by 60 s, and Data on 16,384 GPUs of one site
# (21 billion) ran past 200 s; at 100 billion, the bound before, it passed
MAX_PREDICTION_WORK = 10_000_000_000

_STEPS = {"allreduce": 2, "reduce_scatter": 1, "all_gather": 1, "all_to_all": 1}  # steps per member, x (p - 1)


def schedule_work(schedule, iterations: int = 1, exact: bool = False) -> int:
    """Ops, and collective steps as a send and a receive each, of `iterations` iterations of every rank."""
    memo: dict[int, int] = {}
    return iterations * sum(_ops_work(program, exact, memo) for program in schedule.programs.values())


def _ops_work(ops, exact: bool, memo: dict[int, int]) -> int:
    known = memo.get(id(ops))
    if known is not None:
        return known
    total = 0
    for op in ops:
        kind = type(op)
        if kind is Repeat:
            repetitions = op.count if exact else min(op.count, SIMULATED_REPETITIONS)
            total += repetitions * _ops_work(op.ops, exact, memo)
        elif kind is Collective:
            total += 1 + 2 * _STEPS.get(op.op, 2) * max(0, len(op.group) - 1)
        else:  # a compute, a send, a receive: one event each
            total += 1
    memo[id(ops)] = total
    return total


# Memory: the engine expands a collective into each running member's ring steps (geosim.sim.collectives.expand,
# cached: a program meets the same collective again) before it times them, ~160 bytes a step (a Send or a
# Recv; measured with tracemalloc, 2 shared cores: 4.19 million steps of a 1,024-GPU ring all-reduce, 662 MB).
# Data on 4,096 GPUs of one site (no symmetry: a star of links) would expand 67 million (10 GB): MemoryError
# after minutes. Past MAX_EXPANDED_STEPS a prediction is refused before anything is expanded, as too_costly's.
MAX_EXPANDED_STEPS = 6_000_000  # ~1 GB of steps: with the rest of a run, within 2 GB
BYTES_PER_STEP = 160


class TooCostly(GeosimError):
    """A run refused before it is simulated: its reason is the prediction's (status infeasible)."""


def member_steps(coll: Collective, hosts: tuple[str, ...] | None) -> int:
    """The ops one member of `coll` runs (geosim.sim.collectives: a Send and a Recv per ring step), without
    building them: ring 2 x (p - 1) steps for an all-reduce, (p - 1) for the others; a binomial tree's
    2 ceil(log2 p) at most; hierarchical, the rings inside a host and across hosts."""
    p = len(coll.group)
    if p <= 1:
        return 0
    per = 2 if coll.op == "allreduce" else 1  # ring steps per member, x (p - 1)
    if coll.algorithm == "tree" and coll.op == "allreduce":
        return 2 * math.ceil(math.log2(p))
    if coll.algorithm == "hierarchical" and hosts is not None:
        layout = host_layout(coll.group, hosts)
        if layout is not None:
            g = len(next(iter(layout.values()))[0])
            q = p // g
            local, across = g - 1, q - 1
            steps = {"allreduce": 2 * local + 2 * across, "reduce_scatter": local + across,
                     "all_gather": local + across}[coll.op]
            return 2 * steps
    return 2 * per * (p - 1)


def expanded_steps(schedule, hosts: tuple[str, ...] | None = None, running=None, planned=None) -> int:
    """The collective steps a run expands: every distinct collective (as the engine keys them: op, group,
    bytes, algorithm, the tag's first item) times its members that run (`running`: a symmetry's
    representatives; None: every rank) times member_steps; none for a collective `planned(coll)` says the
    network times from its rings without expanding them (a network backend's ring_plan, where it has one).
    Walks the schedule once (shared blocks once)."""
    running = None if running is None or len(running) == len(schedule.programs) else frozenset(running)
    shapes: dict[tuple, Collective] = {}
    seen: set[int] = set()

    def walk(ops) -> None:
        if id(ops) in seen:
            return
        seen.add(id(ops))
        for op in ops:
            kind = type(op)
            if kind is Repeat:
                walk(op.ops)
            elif kind is Collective:
                shapes.setdefault((op.op, op.group, op.nbytes, op.algorithm, op.tag[:1]), op)

    for program in schedule.programs.values():
        walk(program)
    total = 0
    for coll in shapes.values():
        if planned is not None and running is None and planned(coll):
            continue
        members = len(coll.group) if running is None else sum(1 for r in coll.group if r in running)
        total += members * member_steps(coll, hosts)
    return total


def check_expansion(schedule, net, running=None) -> None:
    """Refuse (TooCostly) a run whose collectives would expand into more than MAX_EXPANDED_STEPS steps on
    the network backend `net` (the engine's admit hook: `running` the ranks that run, None for all)."""
    ring_plan = getattr(net, "ring_plan", None)
    planned = None if ring_plan is None else (lambda coll: ring_plan(coll, coll.group) is not None)
    steps = expanded_steps(schedule, getattr(net, "hosts", None), running, planned)
    if steps > MAX_EXPANDED_STEPS:
        raise TooCostly(f"too large to simulate in bounded memory: its collectives expand into about {steps / 1e6:,.0f} "
                        f"million ring steps (~{steps * BYTES_PER_STEP / 2**30:,.1f} GiB), past the "
                        f"{MAX_EXPANDED_STEPS / 1e6:,.0f} million one prediction may hold; ask fewer hosts, a "
                        "hierarchical or tree collective, or a cluster of several sites (whose ranks run alike)")


def too_costly(work: int) -> str | None:
    """The reason a prediction of `work` counted units is not simulated, None when it may be."""
    if work <= MAX_PREDICTION_WORK:
        return None
    return (f"too large to simulate: about {work / 1e9:,.0f} billion simulated steps (ranks x ops x collective "
            f"steps x iterations), past the {MAX_PREDICTION_WORK / 1e9:,.0f} billion one prediction may take "
            f"(minutes to hours); ask fewer microbatches, hosts or layers")


# --- how long a prediction will take, from its work count (issue 47): a row that will take long says
# so before it starts, with this figure, and the CLI runs the quick rows first.
# Each technique's module says how many counted units its predictions simulate per CPU second
# (SIMULATED_UNITS_PER_CPU_S, measured on 2 shared x86_64 cores: docs/results/2026-11-28-every-row.md);
# one without the figure takes the slowest rate any declares, so the estimate errs long.
LONG_PREDICTION_S = 20.0  # past this many expected CPU seconds a row announces itself and runs last


def expected_seconds(work: int, technique: str) -> float:
    """The CPU seconds a prediction of `work` counted units is expected to take (an estimate: the
    technique's SIMULATED_UNITS_PER_CPU_S; a symmetric cluster simulates less and takes less)."""
    return work / simulation_rate(technique)


def long_prediction(work: int, technique: str) -> float | None:
    """The expected seconds when they pass LONG_PREDICTION_S, else None."""
    seconds = expected_seconds(work, technique)
    return seconds if seconds > LONG_PREDICTION_S else None
