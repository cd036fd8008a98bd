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

from geosim.sim.engine import SIMULATED_REPETITIONS
from geosim.sim.schedule import Collective, Repeat

# at the engine's fastest measured rate (4 million a second) 7 hours, at its slowest days. Counted per
# prediction (4 iterations): GPT-3 6.7B on 1,024 GPUs is 84 million for Data and 1.7 billion for Shard
# (a collective's steps grow with the square of the GPUs it spans), Pipeshard's 4,096 microbatches on
# 4 GPUs 330 thousand (Repeat blocks keep microbatches cheap); Shard near the 8,192-GPU bound passes it
MAX_PREDICTION_WORK = 100_000_000_000

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


def too_costly(work: int) -> str | None:
    """The reason a prediction of `work` counted units is not simulated, None when it may be."""
    if work <= MAX_PREDICTION_WORK:
        return None
    return (f"too large to simulate: about {work / 1e9:,.0f} billion simulated steps (ranks x ops x collective "
            f"steps x iterations), past the {MAX_PREDICTION_WORK / 1e9:,.0f} billion one prediction may take "
            f"(hours); ask fewer microbatches, hosts or layers")
