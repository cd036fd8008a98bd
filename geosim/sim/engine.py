"""The one engine: runs any technique's schedule on a discrete-event clock (SimPy's semantics).

Each GPU is a small generator process walking its program (a Repeat block is walked by a
nested generator); what a transfer costs, and what a collective becomes, is the network
model's answer (geosim.sim.network), which may also time a whole collective itself. Nothing
here knows what a technique is or which network model runs.
"""

from __future__ import annotations

import gc
import statistics
from dataclasses import dataclass, field
from typing import Callable

from geosim.sim.network import NetworkFactory
from geosim.sim.schedule import Barrier, Collective, Compute, Recv, Repeat, Schedule, Send
from geosim.sim.compute import compute_model
from geosim.sim.kernel import Clock, Event
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


SIMULATED_REPETITIONS = 5  # of a Repeat block: the first two warm up, the last MEASURED_REPETITIONS stand for the rest
MEASURED_REPETITIONS = 3  # their mean period is the steady one (a ring over mixed GPUs settles irregularly)
WARM_UP_REPETITIONS = SIMULATED_REPETITIONS - MEASURED_REPETITIONS


def gpu_rate(schedule: Schedule, params: Params, workload: Workload) -> dict[int, float]:
    """A flat FLOP/s per rank, for a compute op without Work or a device with a flat efficiency
    override: the peak for the workload's precision x that override, else x the GEMM fraction."""
    return {
        d.rank: d.gpu.peak_tflops(workload.precision) * 1e12 * params.efficiency.get(d.gpu.name, params.gemm_fraction)
        for d in schedule.devices
    }


# Collection thresholds while a run is on: a run allocates millions of short-lived events but
# few cycles worth finding: the default thresholds spent 12-20% of a large run collecting.
RUN_GC_THRESHOLDS = (200_000, 50, 1000)


def compute_timer(schedule: Schedule, params: Params, workload: Workload):
    """seconds(rank, op) of a compute op: the op-level model for its Work on the rank's GPU (cached per
    work and GPU), or its FLOPs at the flat rate where the op has no Work or the GPU a flat override."""
    rate = gpu_rate(schedule, params, workload)
    model = compute_model(params)
    gpus = {d.rank: d.gpu for d in schedule.devices}
    flat = {d.rank for d in schedule.devices if d.gpu.name in params.efficiency}
    precision = workload.precision
    cache: dict[tuple, float] = {}

    def seconds(rank: int, op: Compute) -> float:
        work = op.work
        if work is None or rank in flat:
            return op.flops / rate[rank]
        # keyed by the Work object's identity: a schedule's ops share a few Work objects for the whole
        # run, and hashing one (its Model dataclass field by field) would cost more than the look-up saves
        key = (id(work), rank)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = (model.seconds(work, gpus[rank], precision), work)
        return hit[0]

    return seconds


def run_schedule(schedule: Schedule, cluster: Cluster, params: Params, workload: Workload,
                 iterations: int = 3, *, network: NetworkFactory, trace: bool = False,
                 exact: bool = False, clock: Callable[[], Clock] = Clock) -> RunResult:
    """Simulate `iterations` iterations on the network model `network` builds (a factory called
    as network(clock, cluster, params, devices, trace); geosim.sim.network.network_model(name)
    gives one by name; there is no default). exact=True runs every repetition of
    Repeat blocks. `clock` makes the event kernel (tests/test_kernel.py hands it SimPy's)."""
    thresholds = gc.get_threshold()
    gc.set_threshold(*RUN_GC_THRESHOLDS)
    try:
        return _run(schedule, cluster, params, workload, iterations, network, trace, exact, clock)
    finally:
        gc.set_threshold(*thresholds)


def _run(schedule, cluster, params, workload, iterations, network, trace, exact, clock) -> RunResult:
    env = clock()
    trace_rows: list | None = [] if trace else None
    net = network(env, cluster, params, schedule.devices, trace_rows)
    compute_seconds = compute_timer(schedule, params, workload)
    mailbox: dict[tuple, Event] = {}
    barriers: dict[tuple, list] = {}
    gathering: dict[tuple, list] = {}
    repeats: dict[tuple, tuple] = {}
    events = [len(schedule.programs)]  # scheduled: each process's start, then every timeout and event
    ends = [[0.0] * len(schedule.devices) for _ in range(iterations)]
    compute = [dict.fromkeys(schedule.programs, 0.0) for _ in range(iterations)]
    overhead = [dict.fromkeys(schedule.programs, 0.0) for _ in range(iterations)]
    timeout, event, succeed, succeed_at, pop = env.timeout, env.event, env.succeed, env.succeed_at, mailbox.pop

    def deliver(arrived) -> None:
        """The receiver got there first and waits on a plain event: the arrival triggers it."""
        succeed(arrived.value)

    send, collective_ops = net.send, net.collective_ops
    may_shortcut, may_precompute = net.may_shortcut, net.may_precompute
    net.prepare(schedule.programs)
    holding: dict[tuple, dict] = {}  # (tag, context) -> {rank: (arrival, its release event)}

    def hold(op, ctx, rank) -> Event:
        """A collective the network times by arithmetic: hold the rank until the last one arrives,
        then have each released when its steps would have ended. Returns the rank's release."""
        key = (op.tag, ctx)
        arrived = holding.get(key)
        if arrived is None:
            arrived = holding[key] = {}
        release = arrived[rank] = (env.now, event())
        events[0] += 1
        if len(arrived) == len(op.group):
            del holding[key]
            ends = net.collective_ends(op, {r: at for r, (at, _) in arrived.items()})
            for r, (_, released) in arrived.items():
                succeed_at(released, ends[r])
        return release[1]

    def shortcut(op, ctx):
        """Gather the collective's ranks that arrive at this instant; if all do, the network
        may time the whole collective at once. Returns the event its end is, or None."""
        key = (op.tag, ctx)
        state = gathering.get(key)
        if state is None:
            events[0] += 1
            state = gathering[key] = [0, timeout(0), False, None]  # arrived, decide, decided, done
        elif state[2]:  # decided before this rank arrived: it runs the steps
            state[0] += 1
            if state[0] == len(op.group):
                del gathering[key]
            return None
        state[0] += 1
        yield state[1]
        if not state[2]:
            state[2] = True
            if state[0] == len(op.group):
                seconds = net.collective_time(op)
                if seconds is not None:
                    events[0] += 1
                    state[3] = timeout(seconds)
        if state[0] == len(op.group) and key in gathering:
            del gathering[key]
        return state[3]

    # A context numbers where an op runs: the iteration, then each enclosing Repeat's tag and
    # repetition. Messages, barriers and blocks are matched on (..., tag, context number): an int
    # hashes at once, where the nested tuple it stands for was hashed again at every message.
    contexts: dict[tuple, int] = {}

    def context(parent: int, tag, index: int) -> int:
        key = (parent, tag, index)
        number = contexts.get(key)
        if number is None:
            number = contexts[key] = len(contexts) + 1
        return number

    # (enclosing context, a Repeat's tag) -> the context number of each repetition met so far:
    # a block looks its list up once, then each repetition's number by index, not by hashing the tag
    repetitions: dict[tuple, list[int]] = {}

    def repetition(numbers: list[int], parent: int, tag, index: int) -> int:
        if index < len(numbers):
            return numbers[index]
        number = context(parent, tag, index)  # every rank runs a block's repetitions in order
        numbers.append(number)
        return number

    def run_ops(rank, ops, ctx, it):
        """Walk ops in order, a Repeat block through run_repeat. A nested generator per block costs
        a few percent at most against a flat walk: CPython passes a resumption down a `yield from`
        chain in C, and Shard nests three deep at most (docs/results/2026-11-24-speed.md)."""
        for op in ops:
            kind = type(op)
            if kind is Compute:
                seconds = op.seconds if op.kind == "overhead" else compute_seconds(rank, op)
                start = env.now
                if seconds > 0:
                    events[0] += 1
                    yield timeout(seconds)
                (overhead if op.kind == "overhead" else compute)[it][rank] += seconds
                if trace_rows is not None:
                    trace_rows.append(("gpu", rank, op.label, start, env.now, op.flops))
                continue
            if kind is Collective:
                start = env.now
                if may_precompute(op):
                    yield hold(op, ctx, rank)  # the network timed it whole
                    steps = ()
                elif may_shortcut(op) and (done := (yield from shortcut(op, ctx))) is not None:
                    yield done
                    steps = ()
                else:
                    steps = collective_ops(op, rank)
            elif kind is Send or kind is Recv or kind is Barrier:
                steps, start = (op,), None
            elif kind is Repeat:
                yield from run_repeat(rank, op, ctx, it)
                continue
            else:
                raise TypeError(f"unknown op {op!r}")
            # point-to-point steps (or a barrier): a collective's, or the program's own op. They run
            # here rather than in a nested generator: a collective's steps are most of a run's events
            for step in steps:
                step_kind = type(step)
                if step_kind is Send:
                    key = (rank, step.dst, step.tag, ctx)
                    delay = send(rank, step.dst, step.nbytes, step.p2p, step.tag[0])
                    waiting = pop(key, None)  # the receiver got there first: it waits on a plain event
                    events[0] += 1
                    if waiting is None:
                        mailbox[key] = timeout(delay)
                    else:
                        timeout(delay, waiting).callbacks.append(deliver)
                elif step_kind is Recv:
                    key = (step.src, rank, step.tag, ctx)
                    arrived = pop(key, None)
                    if arrived is None:
                        events[0] += 1
                        arrived = mailbox[key] = event()
                        yield arrived
                    elif arrived.callbacks is not None:  # not yet arrived
                        yield arrived
                elif step_kind is Barrier:
                    key = (step.tag, ctx)
                    waiting = barriers.get(key)
                    if waiting is None:
                        events[0] += 1
                        waiting = barriers[key] = [0, event()]
                    waiting[0] += 1
                    if waiting[0] == step.size:
                        del barriers[key]
                        succeed(waiting[1])
                    yield waiting[1]
                else:
                    raise TypeError(f"unknown step {step!r}")
            if trace_rows is not None and kind is Collective:
                trace_rows.append(("coll", rank, op.label or op.op, start, env.now, op.nbytes))

    def run_repeat(rank, block, ctx, it):
        """A Repeat block: every repetition, or, for a long one (unless exact), the first
        SIMULATED_REPETITIONS, the last MEASURED_REPETITIONS of which stand for the rest.
        Collectives keep the group in lockstep: once warmed up, every member repeats with one
        common period. Take the group's median measured period as that period (a member still
        warming up does not set it), and let each member skip the rest on its own clock; the
        wait for the others hides inside the skipped time."""
        numbers = repetitions.get((ctx, block.tag))
        if numbers is None:
            numbers = repetitions[(ctx, block.tag)] = []
        if exact or block.count <= SIMULATED_REPETITIONS:
            for r in range(block.count):
                yield from run_ops(rank, block.ops, repetition(numbers, ctx, block.tag, r), it)
            return
        start = env.now
        for r in range(WARM_UP_REPETITIONS):
            yield from run_ops(rank, block.ops, repetition(numbers, ctx, block.tag, r), it)
        measured_start, busy, fixed = env.now, compute[it][rank], overhead[it][rank]
        sent, sends = net.sent(rank)
        for r in range(WARM_UP_REPETITIONS, SIMULATED_REPETITIONS):
            yield from run_ops(rank, block.ops, repetition(numbers, ctx, block.tag, r), it)
        own_end = env.now
        key = (block.tag, ctx)
        state = repeats.get(key)
        if state is None:
            events[0] += 1
            state = repeats[key] = ([], event())
        state[0].append((own_end - measured_start) / MEASURED_REPETITIONS)
        if len(state[0]) == len(block.group):
            del repeats[key]
            succeed(state[1], statistics.median(state[0]))
        period = yield state[1]
        remaining = block.count - SIMULATED_REPETITIONS
        skipped = remaining * period
        share = remaining / MEASURED_REPETITIONS
        compute[it][rank] += share * (compute[it][rank] - busy)
        overhead[it][rank] += share * (overhead[it][rank] - fixed)
        # the skipped repetitions send what the measured ones sent, on average
        sent_now, sends_now = net.sent(rank)
        net.count(rank, share * (sent_now - sent), round(share * (sends_now - sends)))
        net.shift_connections(rank, since=start, delta=skipped)
        if own_end + skipped > env.now:
            events[0] += 1
            yield timeout(own_end + skipped - env.now)
        if trace_rows is not None:
            trace_rows.append(("coll", rank, f"{block.label} x{block.count}", start, env.now, 0.0))

    def gpu(rank):
        """The rank's whole run: its program once per iteration."""
        program = schedule.programs[rank]
        for it in range(iterations):
            yield from run_ops(rank, program, context(0, "iteration", it), it)
            ends[it][rank] = env.now

    for rank in schedule.programs:
        env.process(gpu(rank))
    env.run()
    if mailbox:
        src, dst, tag, number = next(iter(mailbox))
        where = {n: key for key, n in contexts.items()}
        path = []
        while number in where:  # the context's chain: iteration, then each enclosing Repeat
            number, label, index = where[number]
            path.insert(0, (label, index))
        unmatched = (src, dst, tag, tuple(path))
        raise RuntimeError(f"schedule of {schedule.technique} left an unmatched send/recv: {unmatched}")
    return RunResult(
        iteration_end=[max(e) for e in ends], compute_s=compute, overhead_s=overhead, events=events[0],
        bytes_sent=net.bytes_sent, transfers=net.transfers,
        trace=trace_rows or [],
    )
