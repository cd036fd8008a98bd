"""One prediction: spec -> technique schedule -> engine -> time, throughput, memory and why.

It sits above the techniques (it asks the registry for a schedule) and the simulator core
(geosim/sim/: the engine, the network backends), which know nothing of it.

A run's iterations are alike once TCP connections have warmed, so the engine
simulates a few and the rest are extrapolated from the steady state
(bench/bench_predict.py checks this against simulating every iteration).
"""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, replace

from geosim.sim import memory_layout
from geosim.cost import TooCostly, check_expansion, expected_seconds, long_prediction, schedule_work, too_costly
from geosim.sim.engine import run_schedule
from geosim.sim.network import network_backend
from geosim.sim.network.ideal import IdealNetwork
from geosim.sim.network.tcp import window_limits
from geosim.base.errors import GeosimError
from geosim.inputs.case import Case
from geosim.base.generations import generation
from geosim.inputs.runtime import efficiency_spread, runtime_of
from geosim.sim.attention import flash_curve
from geosim.inputs.specs import GIB
from geosim.techniques import build_schedule, memory_first

SIMULATED_ITERATIONS = 3  # the first is cold; steady state = the mean of the others
UNSETTLED_ITERATIONS = 24  # when the steady ones still disagree


@dataclass
class Breakdown:
    """Seconds of the critical path spent on each; they add up to the time they break down."""

    compute_s: float
    exposed_comm_s: float
    bubble_s: float
    overhead_s: float

    def scaled(self, factor: float) -> "Breakdown":
        return Breakdown(*(v * factor for v in asdict(self).values()))

    @property
    def total_s(self) -> float:
        return self.compute_s + self.exposed_comm_s + self.bubble_s + self.overhead_s


@dataclass
class GpuMemory:
    rank: int
    host: str
    gpu: str
    need_gib: float
    has_gib: float
    parts_gib: dict[str, float]
    # a sharded layout's parts as it is read (shards, gathered units, activations, workspace): FSDP's; else None
    groups_gib: dict[str, float] | None = None


@dataclass
class Prediction:
    scenario: str
    technique: str
    model: str
    hosts: list[str]
    gpus: list[str]
    status: str  # ok | out-of-memory | infeasible
    reason: str | None = None
    runtime: str = "alpa"  # whose fixed costs (geosim/inputs/runtime.py)
    description: str = ""
    epochs: int = 0
    iterations: int = 0
    total_time_s: float | None = None
    time_per_epoch_s: float | None = None
    iteration_time_s: float | None = None
    first_iteration_s: float | None = None
    startup_s: float | None = None
    tflops_per_gpu: float | None = None
    tokens_per_s: float | None = None
    peak_memory_gib: float | None = None
    memory_note: str | None = None  # "may not fit: ..." when the peak is within the layout model's margin
    memory_verdict: str | None = None  # fits | may not fit | does not fit (memory_layout.Verdict.word)
    memory: list[GpuMemory] = field(default_factory=list)
    iteration_breakdown: Breakdown | None = None
    run_breakdown: Breakdown | None = None
    bytes_per_iteration: float | None = None
    activation_compression: float = 1.0  # the schedule's: < 1 when pipeline stages send compressed activations
    measured: dict | None = None
    # the efficiency entries (runtime on a GPU generation) this answer rests on that are estimates, one phrase
    # each, and then the steady iteration time's interval: compute and bubble scaled by the spread between the
    # measured and published entries (geosim.inputs.runtime.efficiency_spread), either way
    estimated: list[str] = field(default_factory=list)
    iteration_time_interval_s: list[float] | None = None
    # socket links whose TCP window, not their line, limits the flows, each with the setting to change
    window_limited: list[dict] = field(default_factory=list)
    simulated_events: int = 0
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return asdict(self)


def estimate_phrase(runtime: str, entry) -> str:
    """One estimated entry, as a row names it: "pytorch on volta (the median of ...)"."""
    return f"{runtime} on {entry.generation}: {entry.source}"


def estimated_on(case: Case, hosts=None) -> list[str]:
    """The estimated efficiency entries a prediction on the case's slice (or its VMs `hosts`) rests on, one
    phrase each: what predict's rows carry, and plan, select and sweep say of theirs."""
    runtime = runtime_of(case.workload, case.params)
    applied = runtime.applied_to(case.params)
    gpus = [g for h in case.cluster.hosts if hosts is None or h.name in hosts for g in h.gpus
            if g.name not in applied.flat_fraction and g.name not in applied.device_compute]
    said = [estimate_phrase(runtime.name, e) for e in runtime.estimated_entries(g.architecture for g in gpus)]
    if runtime.fused_attention:  # its attention runs at the flash kernel's fraction on the generation
        for name in sorted({g.architecture for g in gpus if generation(g.architecture) is not None}):
            curve = flash_curve(name)
            if curve.kind == "estimated":
                said.append(f"flash attention on {name}: {curve.source} (geosim/data/attention-kernels.toml)")
    return said


def estimate_interval(seconds: float, scaled_s: float) -> list[float]:
    """[low, high] of a time whose `scaled_s` seconds (compute, and the bubble it makes) rest on an estimated
    efficiency: those seconds divided and multiplied by the spread of the measured and published entries."""
    spread = efficiency_spread()
    return [seconds - scaled_s * (1.0 - 1.0 / spread), seconds + scaled_s * (spread - 1.0)]


def _settled(run, tolerance: float = 1e-3) -> bool:
    """Whether the simulated iterations after the first agree with each other."""
    times = [run.iteration_time(i) for i in range(1, len(run.iteration_end))]
    return max(times) - min(times) <= tolerance * max(times)


def _past(seconds: float, limit: float) -> float | None:
    return seconds if seconds > limit else None


def _memory_verdict(schedule, workload, params) -> tuple[list[GpuMemory], memory_layout.Verdict, GpuMemory]:
    """Each GPU's memory, the worst verdict (the least headroom for what is usable) and its GPU."""
    report = _memory_report(schedule)
    options = memory_layout.options_for(workload, params)
    verdicts = [(memory_layout.verdict(m.need_gib * GIB, m.has_gib, options), m) for m in report]
    worst, where = min(verdicts, key=lambda x: x[0].margin_bytes / x[0].usable_bytes)
    return report, worst, where


def _memory_report(schedule) -> list[GpuMemory]:
    report = []
    for d in schedule.devices:
        parts = schedule.memory_parts.get(d.rank, {})
        groups = ({k: v / GIB for k, v in memory_layout.part_groups(parts).items()} if "gathered" in parts
                  else None)
        report.append(GpuMemory(d.rank, d.host, d.gpu.name, schedule.memory_bytes[d.rank] / GIB, d.gpu.memory_gib,
                                {k: v / GIB for k, v in parts.items()}, groups))
    return report


# question -> (the case it was asked about, its answer) while shared_predictions() is on
_shared: ContextVar[dict | None] = ContextVar("shared_predictions", default=None)
# off (False), the rows' rule (True: geosim.cost.long_prediction), or the expected CPU seconds past which a
# question is long (deferring_long's past_s)
_defer_long: ContextVar[bool | float] = ContextVar("defer_long", default=False)
# the schedules of questions deferred as long, by question, until they are asked again (deferring_long)
_deferred: ContextVar[dict | None] = ContextVar("deferred_schedules", default=None)


class LongPrediction(Exception):
    """Raised by predict() inside deferring_long() instead of simulating a question expected to take
    more than geosim.cost.LONG_PREDICTION_S: `seconds` expected (an estimate), `work` counted units."""

    def __init__(self, seconds: float, work: int):
        super().__init__(f"about {seconds:.0f} s of simulation")
        self.seconds, self.work = seconds, work


@contextmanager
def deferring_long(past_s: float | None = None):
    """Within the block, predict() raises LongPrediction for a question it expects to take long (its
    work count, geosim.cost), before simulating it, so a caller can answer the quick ones first.
    `past_s`: expected CPU seconds past which a question is long (default: geosim.cost.long_prediction's
    LONG_PREDICTION_S; 0 makes every question that would be simulated raise, after its build and its
    memory check: what it would answer without simulating, for free)."""
    token, kept = _defer_long.set(True if past_s is None else float(past_s)), _deferred.set({})
    try:
        yield
    finally:
        _defer_long.reset(token)
        _deferred.reset(kept)


@contextmanager
def simulating_deferred():
    """Inside deferring_long(): predict() simulates every question again (the long ones, now), each
    deferred question from the schedule built when it was deferred."""
    token = _defer_long.set(False)
    try:
        yield
    finally:
        _defer_long.reset(token)


@contextmanager
def shared_predictions():
    """Within the block, predict() answers a question it was already asked (the same case objects,
    technique, VMs and options) with a copy of its first answer instead of simulating again: a
    prediction is a pure function of them, and one command often asks twice (`geosim predict`'s
    table rows, the planner's options and Algorithm 1's probes overlap). In memory only, for the
    block's lifetime."""
    token = _shared.set({})
    try:
        yield
    finally:
        _shared.reset(token)


def _frozen(value):
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _question(case: Case, technique: str, hosts, options, simulated_iterations: int):
    workload = case.workload
    try:
        hash(workload)
    except TypeError:  # a field that is a dict or list: by identity, as the others
        workload = id(workload)
    # the cluster, model and params by identity: hashing them field by field costs more than a
    # repeat is worth, and the case is kept with the answer, so no id is reused meanwhile
    return (id(case.cluster), id(case.model), id(case.params), workload, case.network, technique,
            tuple(hosts) if hosts is not None else None, _frozen(options), simulated_iterations)


def shared_floor(case: Case, technique: str, hosts: tuple[str, ...], options: dict | None, floor) -> float:
    """floor() (a technique's floor under the prediction of this question), or within
    shared_predictions() the floor first found for the same question: a floor is a pure function
    of it, and `geosim predict` weighs the same options in each technique's search and again in
    the verdict's."""
    shared = _shared.get()
    if shared is None:
        return floor()
    # the options by their repr: thousands of Pipeshard options each name every host of every stage,
    # and walking them (_frozen) cost as much as the floor saved; for the plain values options hold
    # (str, int, float, lists and tuples of them) an equal repr is an equal value
    key = ("floor",) + _question(case, technique, hosts, None, 0) + (repr(options),)
    known = shared.get(key)
    if known is None:
        known = shared[key] = (case, floor())  # the case kept with it: no id in the key is reused meanwhile
    return known[1]


def predict(case: Case, technique: str, hosts: tuple[str, ...] | None = None, options: dict | None = None,
            simulated_iterations: int = SIMULATED_ITERATIONS, exact: bool = False) -> Prediction:
    """Predict `technique` on the case's slice (or the VMs `hosts` of it), with per-run options
    (the technique's option fields, e.g. Pipeshard's layer_split). exact=True simulates every
    repetition of every repeated block (geosim.sim.engine's shortcut off: slower, the model itself)."""
    shared = _shared.get()
    if shared is None:
        return _predict(case, technique, hosts, options, simulated_iterations, exact)
    key = _question(case, technique, hosts, options, simulated_iterations) + (exact,)
    known = shared.get(key)
    if known is None:
        answer = _predict(case, technique, hosts, options, simulated_iterations, exact)
        # callers set fields of their answer (reference.attach_measurement sets `measured`) but never
        # change what the fields hold: a shallow copy keeps the first answer apart
        shared[key] = (case, copy.copy(answer))
        return answer
    return copy.copy(known[1])


def _predict(case: Case, technique: str, hosts: tuple[str, ...] | None, options: dict | None,
             simulated_iterations: int, exact: bool) -> Prediction:
    started = time.perf_counter()
    deferred = _deferred.get()
    asked = (id(case), technique, tuple(hosts) if hosts is not None else None, repr(options), exact)
    runtime = runtime_of(case.workload, case.params)
    applied = runtime.applied_to(case.params)  # its launch gap, collective round trips, devices' efficiency
    if applied is not case.params:
        case = replace(case, params=applied)
    cluster, model, workload, params = case.cluster, case.model, case.workload, case.params
    on = case.on(hosts)
    used = on.cluster
    result = Prediction(
        scenario=cluster.name, technique=technique, model=model.name, hosts=[h.name for h in used.hosts],
        gpus=[g.name for h in used.hosts for g in h.gpus], status="ok", epochs=workload.epochs,
        iterations=workload.iterations_per_epoch * workload.epochs, runtime=workload.runtime,
        estimated=estimated_on(case, [h.name for h in used.hosts]),
    )
    try:
        # an option out of memory costs no programs: the planner's search on 1,024 GPUs built hundreds
        # of schedules only to find them out of memory (issue 34); memory_first refuses what build does
        schedule = deferred.pop(asked, None) if deferred is not None else None  # built when it was deferred
        if schedule is None:
            schedule = memory_first(technique, on, options)
            if schedule is None or _memory_verdict(schedule, workload, params)[1].status != memory_layout.OUT_OF_MEMORY:
                schedule = build_schedule(technique, on, options)
    except GeosimError as exc:
        if exc.key == "technique" or (exc.key or "").startswith(f"{technique}."):
            raise  # the caller's mistake (an unknown technique or setting), not the case's
        result.status, result.reason = "infeasible", exc.problem
        return result
    result.description = schedule.description
    result.activation_compression = schedule.activation_compression
    result.memory, worst, where = _memory_verdict(schedule, workload, params)
    result.peak_memory_gib = max(m.need_gib for m in result.memory)
    place = f"{where.gpu} ({where.host} GPU {where.rank})"
    result.memory_verdict = worst.word
    if worst.status == memory_layout.OUT_OF_MEMORY:
        result.status = "out-of-memory"
        result.reason = f"{worst.describe()} on {place}"
        result.wall_s = time.perf_counter() - started
        return result
    if worst.status == memory_layout.MAY_NOT_FIT:
        result.memory_note = f"{worst.describe()} on {place}"

    # a case that would simulate for hours is answered as one that does not fit: not simulated, and why
    work = schedule_work(schedule, simulated_iterations + 1, exact)
    reason = too_costly(work)
    if reason is not None:
        result.status, result.reason = "infeasible", reason
        result.wall_s = time.perf_counter() - started
        return result
    rule = _defer_long.get()
    if rule is not False and (seconds := (long_prediction(work, technique) if rule is True
                                          else _past(expected_seconds(work, technique), rule))) is not None:
        deferred[asked] = schedule  # kept for the question's second asking (the case kept alive by the caller)
        raise LongPrediction(seconds, work)  # the caller runs its quick questions first (deferring_long)

    network = network_backend(case.network)
    try:  # the ranks that run are known inside the engine (a symmetry runs fewer): it checks them before simulating
        real = run_schedule(schedule, used, params, workload, iterations=simulated_iterations, network=network,
                            exact=exact, admit=check_expansion)
        if simulated_iterations >= 3 and not _settled(real):
            # TCP windows that never settle (idle restarts against heterogeneous GPUs) make
            # iterations wander: average over more of them rather than trust the last two
            simulated_iterations = UNSETTLED_ITERATIONS
            real = run_schedule(schedule, used, params, workload, iterations=simulated_iterations, network=network,
                                exact=exact)
        ideal = run_schedule(schedule, used, params, workload, iterations=1, network=IdealNetwork, exact=exact,
                             admit=check_expansion)
    except TooCostly as exc:
        result.status, result.reason = "infeasible", exc.problem
        result.wall_s = time.perf_counter() - started
        return result
    last = simulated_iterations - 1
    steady = (real.iteration_end[last] - real.iteration_end[0]) / last if last else real.iteration_end[0]
    first = real.iteration_end[0]
    ideal_steady = ideal.iteration_time(0)  # with an ideal network there is nothing to warm up
    compute = max(ideal.compute_s[0].values())
    overhead = max(ideal.overhead_s[0].values())
    breakdown = Breakdown(compute_s=compute, exposed_comm_s=max(0.0, steady - ideal_steady),
                          bubble_s=max(0.0, ideal_steady - compute - overhead), overhead_s=overhead)
    # rounding in the simulated clock must not leave the parts disagreeing with the whole
    breakdown.exposed_comm_s += steady - breakdown.total_s

    # a program may cover several iterations (an outer round of H inner steps): the run
    # has n / k programs, and per-iteration figures are a program's divided by k
    k = schedule.iterations_per_program
    programs = max(1.0, result.iterations / k)
    startup = runtime.startup(technique, params)
    run_time = first + (programs - 1) * steady
    run_breakdown = breakdown.scaled(programs)
    run_breakdown.exposed_comm_s += first - steady  # the cold first iteration: connections still warming
    if k != 1:
        steady, first, breakdown = steady / k, first / k, breakdown.scaled(1.0 / k)
    run_breakdown.overhead_s += startup

    result.iteration_time_s = steady
    if result.estimated:
        result.iteration_time_interval_s = estimate_interval(steady, breakdown.compute_s + breakdown.bubble_s)
    result.first_iteration_s = first
    result.startup_s = startup
    result.total_time_s = startup + run_time
    result.time_per_epoch_s = run_time / workload.epochs
    result.tflops_per_gpu = (model.alpa_flops_per_iteration(workload.global_batch, workload.seq_len, workload.checkpointing)
                             / steady / schedule.num_gpus / 1e12)
    result.tokens_per_s = workload.tokens_per_iteration / steady
    result.iteration_breakdown = breakdown
    result.run_breakdown = run_breakdown
    result.bytes_per_iteration = real.bytes_sent / simulated_iterations / k
    result.simulated_events = real.events + ideal.events
    if case.network in ("tcp", "fabric"):
        result.window_limited = [asdict(w) | {"note": w.describe()} for w in window_limits(used, params)]
    result.wall_s = time.perf_counter() - started
    return result
