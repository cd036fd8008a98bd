"""What a prediction will cost, known before it is simulated: its events, counted from the schedule.

A prediction's time and memory follow the events its simulation processes, and those follow the
schedule: ranks x ops, a collective's steps (a ring all-reduce is 2(p - 1) sends and as many
receives per rank), a Repeat block's repetitions (all of them when exact, else the engine's first
few: geosim.sim.engine.SIMULATED_REPETITIONS). Counting them walks the schedule once, far cheaper
than simulating it. The count is an upper bound: a symmetric cluster simulates one rank of each
class (geosim.sim.symmetry), so a 1,024-GPU slice of identical hosts runs much less than it says.

  PROGRESS_EVENTS      above this, the command prints a progress line every few seconds while
                       it simulates (geosim.cli._progress), whatever stderr is and under --json;
  MAX_PREDICTION_EVENTS  above this, a question as asked is refused before it runs, with a line
                       naming the flags that shrink it.
"""

from __future__ import annotations

from geosim.errors import GeosimError
from geosim.sim.engine import SIMULATED_REPETITIONS
from geosim.sim.schedule import Collective, Repeat

# the engine processes ~0.3-1 million events a second on one core of the usual VM: this many take
# a few seconds, past which a silent command looks hung
PROGRESS_EVENTS = 2_000_000
# ~10-40 minutes of simulation, and the programs behind it near a gigabyte: no study question is
# near it (1,024 GPUs with 64 microbatches is ~30 million), a mistyped flag is
MAX_PREDICTION_EVENTS = 500_000_000

_STEPS = {"allreduce": 2, "reduce_scatter": 1, "all_gather": 1}  # ring steps per member, x (p - 1)


def schedule_events(schedule, iterations: int = 1, exact: bool = False) -> int:
    """Events (ops, collective steps as a send and a receive each) of `iterations` iterations of every rank."""
    memo: dict[int, int] = {}
    return iterations * sum(_ops_events(program, exact, memo) for program in schedule.programs.values())


def _ops_events(ops, exact: bool, memo: dict[int, int]) -> int:
    known = memo.get(id(ops))
    if known is not None:
        return known
    total = 0
    for op in ops:
        kind = type(op)
        if kind is Repeat:
            repetitions = op.count if exact else min(op.count, SIMULATED_REPETITIONS)
            total += repetitions * _ops_events(op.ops, exact, memo)
        elif kind is Collective:
            total += 1 + 2 * _STEPS.get(op.op, 2) * max(0, len(op.group) - 1)
        else:  # a compute, a send, a receive: one event each
            total += 1
    memo[id(ops)] = total
    return total


def check_prediction_cost(events: int, what: str, flags: str) -> None:
    """Refuse, before simulating, a question whose simulation would pass MAX_PREDICTION_EVENTS."""
    if events > MAX_PREDICTION_EVENTS:
        raise GeosimError(f"{what} would simulate about {events / 1e6:,.0f} million events, past the "
                          f"{MAX_PREDICTION_EVENTS / 1e6:,.0f} million one prediction may take (~10-40 min, "
                          f"~1 GB); ask less: {flags}", source=flags.split()[0])
