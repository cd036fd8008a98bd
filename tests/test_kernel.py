"""The engine's event kernel (geosim/sim/kernel.py) against SimPy, whose semantics it keeps:
the same schedules run on both give the same times, to the last bit, and the same event counts."""

from heapq import heappush

import pytest
import simpy
from simpy.events import NORMAL

from geosim.inputs.case import Case
from geosim.inputs.params import default_params
from geosim.inputs.scenario import get_model, load_scenario
from geosim.sim.engine import run_schedule
from geosim.sim.kernel import Clock
from geosim.sim.network.alphabeta import AlphaBetaNetwork
from geosim.sim.network.ideal import IdealNetwork
from geosim.sim.network.tcp import TCPNetwork
from geosim.techniques import build_schedule


class SimPyClock:
    """simpy.Environment behind the kernel's interface (its events' own succeed())."""

    def __init__(self):
        self.env = simpy.Environment()
        self.timeout, self.event, self.run = self.env.timeout, self.env.event, self.env.run

    @property
    def now(self):
        return self.env.now

    def succeed(self, event, value=None):
        event.succeed(value)

    def succeed_at(self, event, time, value=None):
        """SimPy has no absolute-time trigger (env.schedule adds a delay to now, which rounds):
        queue the event at `time` as its schedule() would."""
        event._ok, event._value = True, value
        heappush(self.env._queue, (time, NORMAL, next(self.env._eid), event))

    def process(self, generator):
        self.env.process(generator)


def test_kernel_orders_ties_by_insertion_and_resumes_on_processed_events():
    clock, seen = Clock(), []

    def waiter(name, event):
        value = yield event
        seen.append((name, clock.now, value))
        again = yield event  # processed already: goes on at once with the same value
        seen.append((name + " again", clock.now, again))

    shared = clock.timeout(2.0, "v")
    clock.process(waiter("a", shared))
    clock.process(waiter("b", shared))
    clock.run()
    assert seen == [("a", 2.0, "v"), ("a again", 2.0, "v"), ("b", 2.0, "v"), ("b again", 2.0, "v")]
    with pytest.raises(RuntimeError):
        event = clock.event()
        clock.succeed(event)
        clock.succeed(event)


@pytest.mark.parametrize("scenario,technique", [("utah-gpn", "data"), ("utah-gpn", "shard"), ("bris-star", "pipeshard"),
                                                ("tacc-tacc", "zero2"), ("gat-amst", "diloco"), ("utah-mass", "hybrid")])
@pytest.mark.parametrize("network", [TCPNetwork, AlphaBetaNetwork, IdealNetwork], ids=["tcp", "alphabeta", "ideal"])
def test_the_engine_gives_the_same_run_on_simpy(scenario, technique, network):
    s = load_scenario(scenario)
    case = Case(s.cluster, get_model("gpt2m"), s.workload(), default_params())
    schedule = build_schedule(technique, case)
    runs = [run_schedule(schedule, s.cluster, case.params, case.workload, iterations=3, network=network, clock=clock)
            for clock in (Clock, SimPyClock)]
    ours, theirs = runs
    assert ours.iteration_end == theirs.iteration_end  # exactly: the same sums in the same order
    assert ours.compute_s == theirs.compute_s and ours.overhead_s == theirs.overhead_s
    assert (ours.events, ours.bytes_sent, ours.transfers) == (theirs.events, theirs.bytes_sent, theirs.transfers)
