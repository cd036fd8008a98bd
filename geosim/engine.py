"""The one engine: runs any technique's schedule on SimPy resources.

Each GPU is a small generator process walking its program; each transfer is a
process on the network's link resources. Nothing here knows what a technique is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from geosim import collectives
from geosim.network import Network
from geosim.schedule import Collective, Compute, Recv, Schedule, Send
from geosim.specs import Cluster, Params, Workload


@dataclass
class RunResult:
    iteration_end: list[float]  # when the last GPU finished each iteration
    compute_s: list[dict[int, float]]  # per iteration, per rank: busy computing
    overhead_s: list[dict[int, float]]
    events: int
    bytes_sent: float
    transfers: int
    trace: list = field(default_factory=list)

    def iteration_time(self, i: int) -> float:
        return self.iteration_end[i] - (self.iteration_end[i - 1] if i else 0.0)


def _events_scheduled(env: simpy.Environment) -> int:
    """SimPy numbers every scheduled event from an itertools.count; its repr is 'count(N)'.
    Reading it costs nothing, where counting in step() slowed the engine by a sixth."""
    return int(repr(env._eid)[6:-1])


def gpu_rate(schedule: Schedule, params: Params, workload: Workload) -> dict[int, float]:
    """Achieved FLOP/s per rank: peak for the workload's precision x the GPU type's efficiency."""
    return {
        d.rank: d.gpu.peak_tflops(workload.precision) * 1e12 * params.gpu_efficiency(d.gpu.name)
        for d in schedule.devices
    }


def run_schedule(schedule: Schedule, cluster: Cluster, params: Params, workload: Workload,
                 iterations: int = 3, ideal_network: bool = False, trace: bool = False) -> RunResult:
    env = simpy.Environment()
    trace_rows: list | None = [] if trace else None
    net = Network(env, cluster, params, schedule.devices, trace=trace_rows)
    rate = gpu_rate(schedule, params, workload)
    hosts = tuple(d.host for d in schedule.devices)
    mailbox: dict[tuple, simpy.Event] = {}
    ends = [[0.0] * len(schedule.devices) for _ in range(iterations)]
    compute = [dict.fromkeys(schedule.programs, 0.0) for _ in range(iterations)]
    overhead = [dict.fromkeys(schedule.programs, 0.0) for _ in range(iterations)]

    def run_ops(rank, ops, it):
        for op in ops:
            kind = type(op)
            if kind is Send:
                key = (rank, op.dst, op.tag, it)
                if ideal_network:
                    delay = 0.0
                    net.transfers += 1
                    net.bytes_sent += op.nbytes
                else:
                    delay = net.send(rank, op.dst, op.nbytes, op.p2p, label=op.tag[0])
                arrived = env.timeout(delay)
                waiting = mailbox.get(key)
                if waiting is None:
                    mailbox[key] = arrived
                else:  # the receiver got there first and waits on a plain event
                    arrived.callbacks.append(lambda _, ev=waiting: ev.succeed())
            elif kind is Recv:
                key = (op.src, rank, op.tag, it)
                event = mailbox.get(key)
                if event is None:
                    event = mailbox[key] = env.event()
                yield event
                del mailbox[key]
            elif kind is Compute:
                seconds = op.seconds if op.kind == "overhead" else op.flops / rate[rank]
                start = env.now
                if seconds > 0:
                    yield env.timeout(seconds)
                (overhead if op.kind == "overhead" else compute)[it][rank] += seconds
                if trace_rows is not None:
                    trace_rows.append(("gpu", rank, op.label, start, env.now, op.flops))
            elif kind is Collective:
                start = env.now
                yield from run_ops(rank, collectives.expand(op, rank, hosts), it)
                if trace_rows is not None:
                    trace_rows.append(("coll", rank, op.label or op.op, start, env.now, op.nbytes))
            else:
                raise TypeError(f"unknown op {op!r}")

    def gpu(rank):
        program = schedule.programs[rank]
        for it in range(iterations):
            yield from run_ops(rank, program, it)
            ends[it][rank] = env.now

    for rank in schedule.programs:
        env.process(gpu(rank))
    env.run()
    if mailbox:
        unmatched = next(iter(mailbox))
        raise RuntimeError(f"schedule of {schedule.technique} left an unmatched send/recv: {unmatched}")
    return RunResult(
        iteration_end=[max(e) for e in ends], compute_s=compute, overhead_s=overhead, events=_events_scheduled(env),
        bytes_sent=net.bytes_sent, transfers=net.transfers,
        trace=trace_rows or [],
    )
