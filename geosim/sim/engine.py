"""The one engine: runs any technique's schedule on a discrete-event clock (SimPy's semantics).

Each GPU is a small generator process walking its program (a Repeat block is walked by a
nested generator); what a transfer costs, and what a collective becomes, is the network
model's answer (geosim.sim.network), which may also time a whole collective itself. Nothing
here knows what a technique is or which network backend runs.

Over 400 lines: one event loop whose processes share EngineRun's state; split, the loop would pass
that state around.
"""

from __future__ import annotations

import gc
import math
import statistics
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable

from geosim.sim.network import NetworkFactory, capabilities
from geosim.sim.schedule import Barrier, Collective, Compute, Recv, Repeat, Schedule, Send
from geosim.sim.compute import kernel_timer
from geosim.sim.kernel import Clock, Event
from geosim.sim.symmetry import OrderMatters, find_symmetry
from geosim.inputs.specs import Cluster, Params, Workload


@dataclass
class RunResult:
    iteration_end: list[float]  # when the last GPU finished each iteration
    compute_s: list[dict[int, float]]  # per iteration, per rank: busy computing
    overhead_s: list[dict[int, float]]
    events: int
    bytes_sent: float
    transfers: int
    trace: list = field(default_factory=list)
    simulated_ranks: int = 0  # ranks whose programs ran: fewer than the ranks where a symmetry was proven

    def iteration_time(self, i: int) -> float:
        return self.iteration_end[i] - (self.iteration_end[i - 1] if i else 0.0)


SIMULATED_REPETITIONS = 5  # of a Repeat block: the first two warm up, the last MEASURED_REPETITIONS stand for the rest
MEASURED_REPETITIONS = 3  # their mean period is the steady one (a ring over mixed GPUs settles irregularly)
WARM_UP_REPETITIONS = SIMULATED_REPETITIONS - MEASURED_REPETITIONS


def gpu_rate(schedule: Schedule, params: Params, workload: Workload) -> dict[int, float]:
    """A flat FLOP/s per rank, for a compute op without Work or a device with a flat efficiency
    override: the peak for the workload's precision x that override, else x the GEMM fraction the
    kernel timer gives the device (its own where its runtime measured it, else its generation's)."""
    model = kernel_timer(params)

    def fraction(gpu) -> float:
        return params.flat_fraction.get(gpu.name, model.constants_for(gpu).gemm_fraction)

    return {d.rank: d.gpu.peak_tflops(workload.precision, params.tf32_matmul) * 1e12 * fraction(d.gpu)
            for d in schedule.devices}


_symmetry_on: ContextVar[bool] = ContextVar("symmetry_on", default=True)


@contextmanager
def every_rank():
    """Within the block, runs simulate every rank even where a symmetry is proven (the full
    simulation, for tests and benches that compare it with the reduced one)."""
    token = _symmetry_on.set(False)
    try:
        yield
    finally:
        _symmetry_on.reset(token)


# Collection thresholds while a run is on: a run allocates millions of short-lived events but
# few cycles worth finding: the default thresholds spent 12-20% of a large run collecting.
RUN_GC_THRESHOLDS = (200_000, 50, 1000)


def compute_timer(schedule: Schedule, params: Params, workload: Workload):
    """seconds(rank, op) of a compute op: the op-level model for its Work on the rank's GPU (cached per
    work and GPU), or its FLOPs at the flat rate where the op has no Work or the GPU a flat override."""
    rate = gpu_rate(schedule, params, workload)
    model = kernel_timer(params)
    gpus = {d.rank: d.gpu for d in schedule.devices}
    flat = {d.rank for d in schedule.devices if d.gpu.name in params.flat_fraction}
    precision = workload.precision
    # rank -> id of a Work -> (its seconds on the rank's GPU, the Work, kept so the id is not reused):
    # keyed by the Work object's identity, as a schedule's ops share a few Work objects for the whole
    # run, and hashing one (its Model dataclass field by field) would cost more than the look-up saves.
    # The engine reads a rank's table itself (seconds.per_rank) before it calls.
    per_rank: dict[int, dict[int, tuple]] = {d.rank: {} for d in schedule.devices if d.rank not in flat}

    def seconds(rank: int, op: Compute) -> float:
        work = op.work
        if work is None or rank in flat:
            return op.flops / rate[rank]
        known = per_rank[rank]
        hit = known.get(id(work))
        if hit is None:
            hit = known[id(work)] = (model.seconds(work, gpus[rank], precision), work)
        return hit[0]

    seconds.per_rank = per_rank
    return seconds


def run_schedule(schedule: Schedule, cluster: Cluster, params: Params, workload: Workload,
                 iterations: int = 3, *, network: NetworkFactory, trace: bool = False,
                 exact: bool = False, clock: Callable[[], Clock] = Clock, symmetry: bool | None = None,
                 admit: Callable | None = None) -> RunResult:
    """Simulate `iterations` iterations on the network backend `network` builds (a factory called
    as network(clock, cluster, params, devices, trace); geosim.sim.network.network_backend(name)
    gives one by name; there is no default). exact=True runs every repetition of
    Repeat blocks. `clock` makes the event kernel (tests/test_kernel.py hands it SimPy's).
    Ranks a proven symmetry makes alike run once (geosim.sim.symmetry; the same answers to the
    bit, fewer events); symmetry=False runs every rank (what the tests compare that against), as
    does every run inside `with every_rank():`. admit(schedule, network, ranks), where given, is called once
    the ranks that run are known (None: every rank) and before any is simulated: it raises to refuse the run
    (geosim.cost's bound on the collective steps those ranks expand)."""
    if symmetry is None:
        symmetry = _symmetry_on.get()
    thresholds = gc.get_threshold()
    gc.set_threshold(*RUN_GC_THRESHOLDS)
    try:
        try:
            return EngineRun(schedule, cluster, params, workload, iterations, network, trace, exact, clock).run(symmetry,
                                                                                                              admit)
        except OrderMatters:  # a shared hop's senders met at one instant: the proof's run-time half failed
            return EngineRun(schedule, cluster, params, workload, iterations, network, trace, exact, clock).run(False,
                                                                                                              admit)
    finally:
        gc.set_threshold(*thresholds)


class _Gathering:
    """The ranks of a collective the network may time whole (may_shortcut), as they arrive."""

    __slots__ = ("arrived", "decide", "decided", "done")

    def __init__(self, decide: Event):
        self.arrived = 0  # ranks that have reached it
        self.decide = decide  # a zero-delay timeout: every rank arriving at this instant is in by then
        self.decided = False  # whether the network was asked (ranks arriving later run the steps)
        self.done: Event | None = None  # the collective's end, where the network timed it


class _Waiting:
    """Ranks at a barrier, or at the end of a Repeat block's measured repetitions."""

    __slots__ = ("arrived", "periods", "released")

    def __init__(self, released: Event):
        self.arrived = 0  # ranks at the barrier
        self.periods: list[float] = []  # each rank's mean measured period (a Repeat block)
        self.released = released


class EngineRun:
    """One run of a schedule: the GPUs' processes on one clock and network backend, and the state
    they share while they run. `run()` is called once and returns the RunResult."""

    def __init__(self, schedule: Schedule, cluster: Cluster, params: Params, workload: Workload, iterations: int,
                 network: NetworkFactory, trace: bool, exact: bool, clock: Callable[[], Clock]):
        self.schedule = schedule
        self.iterations = iterations
        self.exact = exact
        self.env = env = clock()
        self.trace_rows: list | None = [] if trace else None
        self.net = network(env, cluster, params, schedule.devices, self.trace_rows)
        self.caps = capabilities(self.net)  # the model's optional protocols, asked once (geosim.sim.network)
        self.compute_seconds = compute_timer(schedule, params, workload)
        self.mailbox: dict[tuple, Event] = {}  # (src, dst, tag, context) -> the send's arrival, or a waiting receive
        self.barriers: dict[tuple, _Waiting] = {}  # (tag, context) -> ranks at that barrier
        self.gathering: dict[tuple, _Gathering] = {}  # (tag, context) -> a collective's ranks (may_shortcut)
        self.holding: dict[tuple, dict] = {}  # (tag, context) -> {rank: (arrival, its release event)}
        self.repeats: dict[tuple, _Waiting] = {}  # (block tag, context) -> the group's measured periods
        # A context numbers where an op runs: the iteration, then each enclosing Repeat's tag and
        # repetition. Messages, barriers and blocks are matched on (..., tag, context number): an int
        # hashes at once, where the nested tuple it stands for was hashed again at every message.
        self.contexts: dict[tuple, int] = {}
        # (enclosing context, a Repeat's tag) -> the context number of each repetition met so far:
        # a block looks its list up once, then each repetition's number by index, not by hashing the tag
        self.repetitions: dict[tuple, list[int]] = {}
        self.events = len(schedule.programs)  # scheduled: each process's start, then every timeout and event
        self.ends = [[0.0] * len(schedule.devices) for _ in range(iterations)]  # per iteration, per rank
        self.compute = [dict.fromkeys(schedule.programs, 0.0) for _ in range(iterations)]
        self.overhead = [dict.fromkeys(schedule.programs, 0.0) for _ in range(iterations)]
        self.canonical = None  # under a symmetry (run()), the renaming that files a send for a representative
        self.copies = 1  # ranks each running rank stands for
        self.is_representative = None  # under a symmetry, whether a rank runs
        self._running: dict[int, int] = {}  # id of a group -> its ranks that run (the group kept by the programs)

    def run(self, symmetry: bool = True, admit: Callable | None = None) -> RunResult:
        env, net, caps, schedule = self.env, self.net, self.caps, self.schedule
        caps.prepare(schedule.programs)
        found = find_symmetry(schedule, caps) if symmetry and self.trace_rows is None else None
        ranks = list(schedule.programs)
        if admit is not None:  # the network backend, and the ranks that run (None: every rank)
            admit(schedule, net, found.representatives() if found is not None else None)
        if found is not None:  # run the representatives alone; each answers for its copies
            caps.reduce_to(found)
            ranks, self.copies, self.canonical = found.representatives(), found.copies, found.canonical
            self.is_representative = lambda rank: rank % found.segment < found.shift
            self.events -= len(schedule.programs) - len(ranks)
        # what run_ops uses at every op, unpacked there in one step (a local is read faster than an attribute)
        self.loop = (env, env.timeout, env.event, self.mailbox, self.mailbox.pop, net.send_at,
                     self.deliver, self.canonical, self.barrier(), self.compute_time(), self.compute_seconds.per_rank,
                     self.trace_rows, net.collective_ops, caps.may_shortcut, caps.may_precompute)
        for rank in ranks:
            env.process(self.gpu(rank))
        env.run()
        if self.mailbox:
            raise RuntimeError(f"schedule of {schedule.technique} left an unmatched send/recv: {self.unmatched()}")
        rep = found.representative if found is not None else (lambda rank: rank)
        if found is not None:  # every copy's figures are its representative's
            for per_iteration in (*self.ends, *self.compute, *self.overhead):
                for rank in schedule.programs:
                    per_iteration[rank] = per_iteration[rep(rank)]
        # the totals, rank by rank (each rank's own count is symmetric; a running total of every
        # transfer would depend on the order ranks send in)
        sent = [net.sent(rep(rank)) for rank in schedule.programs]
        return RunResult(
            iteration_end=[max(e) for e in self.ends], compute_s=self.compute, overhead_s=self.overhead,
            events=self.events, bytes_sent=math.fsum(b for b, _ in sent), transfers=sum(n for _, n in sent),
            trace=self.trace_rows or [], simulated_ranks=len(ranks),
        )

    def unmatched(self) -> tuple:
        """The first message left in the mailbox, its context spelled out: iteration, then each enclosing Repeat."""
        src, dst, tag, number = next(iter(self.mailbox))
        where = {n: key for key, n in self.contexts.items()}
        path = []
        while number in where:
            number, label, index = where[number]
            path.insert(0, (label, index))
        return src, dst, tag, tuple(path)

    def gpu(self, rank):
        """The rank's whole run: its program once per iteration."""
        program = self.schedule.programs[rank]
        env, ends = self.env, self.ends
        for it in range(self.iterations):
            yield from self.run_ops(rank, program, self.context(0, "iteration", it), it)
            ends[it][rank] = env.now

    def context(self, parent: int, tag, index: int) -> int:
        key = (parent, tag, index)
        number = self.contexts.get(key)
        if number is None:
            number = self.contexts[key] = len(self.contexts) + 1
        return number

    def repetition(self, numbers: list[int], parent: int, tag, index: int) -> int:
        if index < len(numbers):
            return numbers[index]
        number = self.context(parent, tag, index)  # every rank runs a block's repetitions in order
        numbers.append(number)
        return number

    def running_in(self, group: tuple) -> int:
        """The group's ranks that run: all, or under a symmetry its representatives (len // copies
        for a group the shift maps onto itself; all or none of a group it moves elsewhere)."""
        if self.copies == 1:
            return len(group)
        count = self._running.get(id(group))
        if count is None:
            count = self._running[id(group)] = sum(1 for rank in group if self.is_representative(rank))
        return count

    def deliver(self, arrived) -> None:
        """The receiver got there first and waits on a plain event: the arrival triggers it."""
        self.env.succeed(arrived.value)

    def hold(self, op, ctx, rank) -> Event:
        """A collective the network times by arithmetic: hold the rank until the last one arrives,
        then have each released when its steps would have ended. Returns the rank's release."""
        env, key = self.env, (op.tag, ctx)
        arrived = self.holding.get(key)
        if arrived is None:
            arrived = self.holding[key] = {}
        release = arrived[rank] = (env.now, env.event())
        self.events += 1
        if len(arrived) == self.running_in(op.group):  # under a symmetry, its representatives
            del self.holding[key]
            ends = self.caps.collective_ends(op, {r: at for r, (at, _) in arrived.items()})
            for r, (_, released) in arrived.items():
                env.succeed_at(released, ends[r])
        return release[1]

    def shortcut(self, op, ctx):
        """Gather the collective's ranks that arrive at this instant; if all do, the network
        may time the whole collective at once. Returns the event its end is, or None."""
        key, gathering = (op.tag, ctx), self.gathering
        state = gathering.get(key)
        if state is None:
            self.events += 1
            state = gathering[key] = _Gathering(self.env.timeout(0))
        elif state.decided:  # decided before this rank arrived: it runs the steps
            state.arrived += 1
            if state.arrived == self.running_in(op.group):
                del gathering[key]
            return None
        state.arrived += 1
        yield state.decide
        everyone = self.running_in(op.group)  # (a model with a fast path has said no symmetry so far)
        if not state.decided:
            state.decided = True
            if state.arrived == everyone:
                seconds = self.caps.collective_time(op)
                if seconds is not None:
                    self.events += 1
                    state.done = self.env.timeout(seconds)
        if state.arrived == everyone and key in gathering:
            del gathering[key]
        return state.done

    def barrier(self):
        """barrier(step, ctx): a rank reaches a Barrier (a program's own, or a collective's where
        communication is free); returns the event it waits on. A closure over the run's state (a local
        is read faster than an attribute)."""
        event, succeed, barriers, copies, running_in = (self.env.event, self.env.succeed, self.barriers, self.copies,
                                                        self.running_in)

        def barrier(step, ctx):
            key = (step.tag, ctx)
            waiting = barriers.get(key)
            if waiting is None:
                self.events += 1
                waiting = barriers[key] = _Waiting(event())
            waiting.arrived += 1
            if waiting.arrived == (step.size if copies == 1 else running_in(step.group) if step.group else
                                   step.size // copies):
                del barriers[key]
                succeed(waiting.released)
            return waiting.released

        return barrier

    def compute_time(self):
        """compute_time(rank, op, times): a Compute op's seconds and the account they go to (overhead or
        compute, per iteration); times: the rank's table of compute times (compute_timer's), read there
        rather than through a call per op. A closure, as point_to_point's are."""
        overhead, compute, compute_seconds = self.overhead, self.compute, self.compute_seconds

        def compute_time(rank, op, times) -> tuple[float, list]:
            if op.kind == "overhead":
                return op.seconds, overhead
            hit = times.get(id(op.work)) if times is not None and op.work is not None else None
            return (hit[0] if hit is not None else compute_seconds(rank, op)), compute

        return compute_time

    def run_ops(self, rank, ops, ctx, it):
        """Walk ops in order: a Compute by compute_time, a Repeat block through run_repeat, and every
        point-to-point step (a program's own Send, Recv, Barrier, or the steps a collective becomes) in one
        loop, where Send and Recv are written once. They stay inline there, not behind a call: they are most
        of a run's events, and a call each cost 4% on the median case of bench_engine_scale, up to 20% on
        DiLoCo's (docs/results/2026-11-27-house.md).
        A nested generator per block costs a few percent at most against a flat walk: CPython passes a
        resumption down a `yield from` chain in C, and Shard nests three deep at most
        (docs/results/2026-11-24-speed.md)."""
        (env, timeout, event, mailbox, pop, send_at, deliver, canonical, barrier, compute_time, times,
         trace_rows, collective_ops, may_shortcut, may_precompute) = self.loop
        times = times.get(rank)
        for op in ops:
            kind = type(op)
            if kind is Compute:
                seconds, spent = compute_time(rank, op, times)
                start = env.now
                if seconds > 0:
                    self.events += 1
                    yield timeout(seconds)
                spent[it][rank] += seconds
                if trace_rows is not None:
                    trace_rows.append(("gpu", rank, op.label, start, env.now, op.flops))
                continue
            if kind is Repeat:
                yield from self.run_repeat(rank, op, ctx, it)
                continue
            start = env.now
            if kind is not Collective:  # a program's own Send, Recv or Barrier: a pipeline's messages
                steps = (op,)
            elif may_precompute(op):
                yield self.hold(op, ctx, rank)  # the network timed it whole
                steps = ()
            elif may_shortcut(op) and (done := (yield from self.shortcut(op, ctx))) is not None:
                yield done  # every rank arrived at once: the network timed it whole
                steps = ()
            else:
                steps = collective_ops(op, rank)
            for step in steps:
                step_kind = type(step)
                if step_kind is Send:
                    # under a symmetry, filed as the message its renamed copy sends a representative
                    key = (rank, step.dst, step.tag, ctx) if canonical is None else (
                        *canonical(rank, step.dst), step.tag, ctx)
                    now = env.now  # send() written out: the arrival less now, the same arithmetic
                    delay = send_at(rank, step.dst, step.nbytes, step.p2p, step.tag[0], now) - now
                    waiting = pop(key, None)  # the receiver got there first: it waits on a plain event
                    self.events += 1
                    if waiting is None:
                        mailbox[key] = timeout(delay)
                    else:
                        timeout(delay, waiting).callbacks.append(deliver)
                elif step_kind is Recv:
                    key = (step.src, rank, step.tag, ctx)
                    arrived = pop(key, None)
                    if arrived is None:
                        self.events += 1
                        arrived = mailbox[key] = event()
                        yield arrived
                    elif arrived.callbacks is not None:  # not yet arrived
                        yield arrived
                elif step_kind is Barrier:
                    yield barrier(step, ctx)
                else:
                    raise TypeError(f"unknown op {step!r}")
            if trace_rows is not None and kind is Collective:
                trace_rows.append(("coll", rank, op.label or op.op, start, env.now, op.nbytes))

    def run_repeat(self, rank, block, ctx, it):
        """A Repeat block: every repetition, or, for a long one (unless exact), the first
        SIMULATED_REPETITIONS, the last MEASURED_REPETITIONS of which stand for the rest.
        Collectives keep the group in lockstep: once warmed up, every member repeats with one
        common period. Take the group's median measured period as that period (a member still
        warming up does not set it), and let each member skip the rest on its own clock; the
        wait for the others hides inside the skipped time."""
        env, net, run_ops, repetition = self.env, self.net, self.run_ops, self.repetition
        numbers = self.repetitions.get((ctx, block.tag))
        if numbers is None:
            numbers = self.repetitions[(ctx, block.tag)] = []
        if self.exact or block.count <= SIMULATED_REPETITIONS:
            for r in range(block.count):
                yield from run_ops(rank, block.ops, repetition(numbers, ctx, block.tag, r), it)
            return
        start = env.now
        for r in range(WARM_UP_REPETITIONS):
            yield from run_ops(rank, block.ops, repetition(numbers, ctx, block.tag, r), it)
        compute, overhead = self.compute[it], self.overhead[it]
        measured_start, busy, fixed = env.now, compute[rank], overhead[rank]
        sent, sends = net.sent(rank)
        for r in range(WARM_UP_REPETITIONS, SIMULATED_REPETITIONS):
            yield from run_ops(rank, block.ops, repetition(numbers, ctx, block.tag, r), it)
        own_end = env.now
        key = (block.tag, ctx)
        state = self.repeats.get(key)
        if state is None:
            self.events += 1
            state = self.repeats[key] = _Waiting(env.event())
        state.periods.append((own_end - measured_start) / MEASURED_REPETITIONS)
        if len(state.periods) == self.running_in(block.group):
            # under a symmetry each period stands for `copies` equal ones: the median is the same
            del self.repeats[key]
            env.succeed(state.released, statistics.median(state.periods))
        period = yield state.released
        remaining = block.count - SIMULATED_REPETITIONS
        skipped = remaining * period
        share = remaining / MEASURED_REPETITIONS
        compute[rank] += share * (compute[rank] - busy)
        overhead[rank] += share * (overhead[rank] - fixed)
        # the skipped repetitions send what the measured ones sent, on average
        sent_now, sends_now = net.sent(rank)
        net.count(rank, share * (sent_now - sent), round(share * (sends_now - sends)))
        self.caps.shift_connections(rank, since=start, delta=skipped)
        if own_end + skipped > env.now:
            self.events += 1
            yield env.timeout(own_end + skipped - env.now)
        if self.trace_rows is not None:
            self.trace_rows.append(("coll", rank, f"{block.label} x{block.count}", start, env.now, 0.0))
