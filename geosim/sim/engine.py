"""The one engine: runs any technique's schedule on SimPy resources.

Each GPU is a small generator process walking its program; each transfer is a
process on the network's link resources. Nothing here knows what a technique is.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import simpy

from geosim.sim import collectives
from geosim.sim.network.tcp import Network
from geosim.sim.schedule import Collective, Compute, Recv, Repeat, Schedule, Send
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


SIMULATED_REPETITIONS = 4  # of a Repeat block: the last one stands for the rest


def gpu_rate(schedule: Schedule, params: Params, workload: Workload) -> dict[int, float]:
    """Achieved FLOP/s per rank: peak for the workload's precision x the GPU type's efficiency."""
    return {
        d.rank: d.gpu.peak_tflops(workload.precision) * 1e12 * params.gpu_efficiency(d.gpu.name)
        for d in schedule.devices
    }


def run_schedule(schedule: Schedule, cluster: Cluster, params: Params, workload: Workload,
                 iterations: int = 3, ideal_network: bool = False, trace: bool = False,
                 exact: bool = False) -> RunResult:
    """Simulate `iterations` iterations. exact=True runs every repetition of Repeat blocks."""
    env = simpy.Environment()
    trace_rows: list | None = [] if trace else None
    net = Network(env, cluster, params, schedule.devices, trace=trace_rows)
    rate = gpu_rate(schedule, params, workload)
    hosts = tuple(d.host for d in schedule.devices)
    mailbox: dict[tuple, simpy.Event] = {}
    barriers: dict[tuple, list] = {}
    repeats: dict[tuple, tuple] = {}
    sends_by: dict[int, int] = {}
    ends = [[0.0] * len(schedule.devices) for _ in range(iterations)]
    compute = [dict.fromkeys(schedule.programs, 0.0) for _ in range(iterations)]
    overhead = [dict.fromkeys(schedule.programs, 0.0) for _ in range(iterations)]

    def run_ops(rank, ops, ctx):
        it = ctx[0]  # ctx: (iteration, then repeat tag and index for each enclosing Repeat)
        for op in ops:
            kind = type(op)
            if kind is Send:
                sends_by[rank] = sends_by.get(rank, 0) + 1
                key = (rank, op.dst, op.tag, ctx)
                if ideal_network:
                    delay = 0.0
                    net.count(rank, op.nbytes)
                else:
                    delay = net.send(rank, op.dst, op.nbytes, op.p2p, label=op.tag[0])
                arrived = env.timeout(delay)
                waiting = mailbox.get(key)
                if waiting is None:
                    mailbox[key] = arrived
                else:  # the receiver got there first and waits on a plain event
                    arrived.callbacks.append(lambda _, ev=waiting: ev.succeed())
            elif kind is Recv:
                key = (op.src, rank, op.tag, ctx)
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
                if ideal_network:  # free communication: a collective is only a barrier of its group
                    key = (op.tag, ctx)
                    waiting = barriers.get(key)
                    if waiting is None:
                        waiting = barriers[key] = [0, env.event()]
                    waiting[0] += 1
                    if waiting[0] == len(op.group):
                        del barriers[key]
                        waiting[1].succeed()
                    yield waiting[1]
                else:
                    yield from run_ops(rank, collectives.expand(op, rank, hosts), ctx)
                if trace_rows is not None:
                    trace_rows.append(("coll", rank, op.label or op.op, start, env.now, op.nbytes))
            elif kind is Repeat:
                if exact or op.count <= SIMULATED_REPETITIONS:
                    for r in range(op.count):
                        yield from run_ops(rank, op.ops, ctx + (op.tag, r))
                    continue
                start = env.now
                for r in range(SIMULATED_REPETITIONS - 1):
                    yield from run_ops(rank, op.ops, ctx + (op.tag, r))
                last_start, busy, fixed = env.now, compute[it][rank], overhead[it][rank]
                sent, sends = net.sent_by.get(rank, 0.0), sends_by.get(rank, 0)
                yield from run_ops(rank, op.ops, ctx + (op.tag, SIMULATED_REPETITIONS - 1))
                own_end = env.now
                # Collectives keep the group in lockstep: once warmed up, every member repeats with
                # one common period. Take the group's median last repetition as that period (a
                # member still warming up does not set it), and let each member skip the rest on
                # its own clock; the wait for the others hides inside the skipped time.
                key = (op.tag, ctx)
                state = repeats.get(key)
                if state is None:
                    state = repeats[key] = ([], env.event())
                state[0].append(own_end - last_start)
                if len(state[0]) == len(op.group):
                    del repeats[key]
                    state[1].succeed(statistics.median(state[0]))
                period = yield state[1]
                remaining = op.count - SIMULATED_REPETITIONS
                skipped = remaining * period
                compute[it][rank] += remaining * (compute[it][rank] - busy)
                overhead[it][rank] += remaining * (overhead[it][rank] - fixed)
                # the skipped repetitions send what the last one sent
                last_sends = sends_by.get(rank, 0) - sends
                net.count(rank, remaining * (net.sent_by.get(rank, 0.0) - sent), remaining * last_sends)
                sends_by[rank] = sends_by.get(rank, 0) + remaining * last_sends
                net.shift_connections(rank, since=start, delta=skipped)
                if own_end + skipped > env.now:
                    yield env.timeout(own_end + skipped - env.now)
                if trace_rows is not None:
                    trace_rows.append(("coll", rank, f"{op.label} x{op.count}", start, env.now, 0.0))
            else:
                raise TypeError(f"unknown op {op!r}")

    def gpu(rank):
        program = schedule.programs[rank]
        for it in range(iterations):
            yield from run_ops(rank, program, (it,))
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
