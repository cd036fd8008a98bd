"""The sweep engine: evaluate grid points in parallel and stream their rows to disk.

Work goes out in chunks of points (a prediction takes 1-70 ms, a task round trip
~1 ms on Ray and less in a process pool, so chunking amortizes it). Three executors
share one interface, `imap(fn, items)` yielding results as they finish:
  SerialExecutor   one process (tests, --workers 1, and the baseline the bench compares to)
  LocalExecutor    a multiprocessing pool over this machine's cores: the default, because
                   starting Ray costs ~2.5 s and ~700 MB, more than a default sweep takes
  RayExecutor      tasks on a Ray cluster (--ray-address); Ray does all the scheduling
fn(context, item) must be a module-level function so every executor can ship it.

Over 400 lines: the three executors share the chunking, progress and interrupt handling, written
here once.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from geosim.base.errors import GeosimError, require
from geosim.inputs.params import load_params
from geosim.inputs.case import DEFAULT_NETWORK, Case
from geosim.sim.network import network_backend
from geosim.predict import predict
from geosim.inputs.scale import load_any_scenario
from geosim.inputs.scenario import Scenario, get_model, LINK_RANGES, check_number
from geosim.inputs.specs import Params
from geosim.studies.asked import scaled_tokens_per_epoch, scales_workload
from geosim.studies.ranking import SameProgress, time_to_progress_s
from geosim.studies.sweep.local_ray import init_local, loopback_ray_env, remove_temp_dir
from geosim.studies.sweep.grid import NATIVE, Grid, host_subset, point_key
from geosim.studies.sweep.store import SCHEMA, ResultStore, fingerprint, iter_rows
from geosim.studies.sweep.table import SweepTable
from geosim.techniques import layout_options, technique_names
from geosim.studies.whatif import wan_links, with_bandwidth, with_gpu, with_rtt
from geosim.base.units import bps_to_gbps, gbps_to_bps, ms_to_s, s_to_ms


@dataclass
class SweepContext:
    """Everything a worker needs besides the points: shipped once per worker, not per task."""

    params: Params
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    metric: str = "total_time_s"
    network: str = DEFAULT_NETWORK  # the network backend every point is predicted on


def resolve_scenario(name: str) -> Scenario:
    return load_any_scenario(name)


def make_context(grid: Grid, params_path: str | None = None, metric: str = "total_time_s",
                 network: str = DEFAULT_NETWORK, models: dict | None = None) -> SweepContext:
    """Load every scenario once and check every axis value, so a typo fails before any work starts.
    `models`: name -> Model the sweep adds to every scenario's own (a --model-config's shape)."""
    params = load_params(params_path)
    scenarios = {name: resolve_scenario(name) for name in grid.axes["scenario"]}
    if models:
        scenarios = {name: Scenario(sc.cluster, sc.workload_overrides, {**sc.models, **models})
                     for name, sc in scenarios.items()}
    known = technique_names()
    for t in grid.axes["technique"]:
        if t not in known:
            raise GeosimError(f"unknown technique {t!r} (known: {', '.join(known)})", source="--technique")
    for name, sc in scenarios.items():
        for m in grid.axes["model"]:
            get_model(m, sc.models, source="--model")
        for hosts in grid.axes.get("hosts", ["all"]):
            subset = host_subset(hosts)
            missing = [h for h in subset or () if h not in {x.name for x in sc.cluster.hosts}]
            if missing:
                raise GeosimError(f"scenario {name} has no host {missing[0]!r}", source="--hosts")
        if any(v != NATIVE for v in grid.axes.get("rtt_ms", [])) and not sc.cluster.links:
            raise GeosimError("has no link between hosts whose RTT could change", source=name, key="--rtt-ms")

    for axis in ("rtt_ms", "bandwidth_gbps"):
        for v in grid.axes.get(axis, []):
            if v != NATIVE:
                check_number(v, f"--{axis.replace('_', '-')}", None, *LINK_RANGES[axis])
    for g in grid.axes.get("gpu", []):
        if g != NATIVE:
            try:
                with_gpu(next(iter(scenarios.values())).cluster, g)
            except GeosimError as exc:
                raise GeosimError(exc.problem, source="--gpu") from None
    network_backend(network)  # an unknown model fails before any work
    _check_layout(grid, scenarios, params)
    return SweepContext(params, scenarios, metric, network)


def _check_layout(grid: Grid, scenarios: dict[str, Scenario], params: Params) -> None:
    """A layout asked must fit one of the swept scenarios' host sets at least (else it is the layout's
    mistake: one line naming its flag); where it fits some and not others, those rows say why."""
    if not grid.layout:
        return
    first = None
    for name, sc in scenarios.items():
        case = Case(sc.cluster, get_model(grid.axes["model"][0], sc.models), sc.workload(), params)
        for hosts in grid.axes.get("hosts", ["all"]):
            for technique in grid.axes["technique"]:
                try:
                    layout_options(technique, case, host_subset(hosts) or tuple(h.name for h in sc.cluster.hosts),
                                   **grid.layout)
                    return
                except GeosimError as exc:
                    first = first or exc
    raise first


def manifest(grid: Grid, ctx: SweepContext) -> dict:
    return {"schema": SCHEMA, "params": fingerprint(ctx.params), "params_source": ctx.params.source,
            "network": ctx.network, "metric": ctx.metric, "grid": grid.to_dict(),
            "scenarios": {name: fingerprint((sc.cluster, sc.workload_overrides, sc.models))
                          for name, sc in ctx.scenarios.items()}}


def point_workload(point: dict, sc: Scenario, model) -> dict:
    """A point's workload fields, with predict's default for a model outside the study where no token count
    is swept or written (geosim.studies.asked.scales_workload): one workload for one question everywhere."""

    if scales_workload(sc, model, point["workload"]):
        return {**point["workload"], "tokens_per_epoch": scaled_tokens_per_epoch(model)}
    return point["workload"]


def evaluate(point: dict, ctx: SweepContext):
    """One point -> (cluster, Prediction or None, workload or None, reason)."""
    sc = ctx.scenarios[point["scenario"]]
    cluster = sc.cluster
    if point["gpu"] != NATIVE:
        cluster = with_gpu(cluster, point["gpu"])
    if point["rtt_ms"] != NATIVE:
        cluster = with_rtt(cluster, ms_to_s(point["rtt_ms"]))
    if point["bandwidth_gbps"] != NATIVE:
        cluster = with_bandwidth(cluster, gbps_to_bps(point["bandwidth_gbps"]))
    model = get_model(point["model"], sc.models)
    try:  # combinations of axes (batch x microbatches) may be invalid where each value alone is fine
        workload = sc.workload(**point_workload(point, sc, model))
    except GeosimError as exc:
        return cluster, None, None, exc.problem
    case = Case(cluster, model, workload, ctx.params, ctx.network)
    hosts = host_subset(point["hosts"])
    try:  # the layout asked, on this point's hosts (it may fit some scenarios of a sweep and not others)
        options = layout_options(point["technique"], case, hosts or tuple(h.name for h in cluster.hosts),
                                 **point.get("layout", {}))
    except GeosimError as exc:
        return cluster, None, workload, exc.line()
    return cluster, predict(case, point["technique"], hosts=hosts, options=options), workload, None


def metric_of(point: dict, ctx: SweepContext) -> float | None:
    """The compared figure of one point, None when it does not run (out of memory, infeasible)."""
    _, pred, _, _ = evaluate(point, ctx)
    return getattr(pred, ctx.metric) if pred is not None and pred.ok else None


def _gpu_summary(names: list[str]) -> str:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return "+".join(f"{c}x{n}" for n, c in counts.items())


def evaluate_row(point: dict, ctx: SweepContext) -> dict:
    started = time.perf_counter()
    cluster, pred, workload, reason = evaluate(point, ctx)
    wan = wan_links(cluster)
    row = {"scenario": point["scenario"], "cluster": cluster.name, "technique": point["technique"], "model": point["model"],
           "rtt_ms": point["rtt_ms"], "bandwidth_gbps": point["bandwidth_gbps"], "gpu": point["gpu"], "hosts": point["hosts"],
           "wan_rtt_ms": s_to_ms(max((l.rtt_s for l in wan), default=0.0)),
           "wan_bandwidth_gbps": bps_to_gbps(min((l.bandwidth_bps for l in wan), default=0.0)),
           "reference_slice": cluster.reference_slice}
    if pred is None:
        row.update(status="infeasible", reason=reason, num_gpus=cluster.num_gpus)
    else:
        row.update(num_gpus=len(pred.gpus), gpus=_gpu_summary(pred.gpus), **vars(workload))
        for name in ("status", "reason", "total_time_s", "time_per_epoch_s", "iteration_time_s", "first_iteration_s",
                     "startup_s", "tflops_per_gpu", "tokens_per_s", "peak_memory_gib", "memory_verdict", "bytes_per_iteration",
                     "description"):
            row[name] = getattr(pred, name)
        if pred.ok:  # the ranking's measure (ranking.time_to_progress_s): what the report's best option is drawn on
            efficiency = SameProgress(ctx.params).efficiency(pred).value
            row["token_efficiency"] = efficiency
            row["time_to_progress_s"] = time_to_progress_s(pred, efficiency)
        # the estimated efficiency entries the row rests on ("; " between them, "" when none) and its step's interval
        row["estimated"] = "; ".join(pred.estimated)
        low, high = pred.iteration_time_interval_s or (None, None)
        row["iteration_time_low_s"], row["iteration_time_high_s"] = low, high
        for prefix, breakdown in (("run", pred.run_breakdown), ("iter", pred.iteration_breakdown)):
            for part, seconds in (vars(breakdown) if breakdown else {}).items():
                row[f"{prefix}_{part}"] = seconds
    row["wall_s"] = time.perf_counter() - started
    row["point"] = point
    row["key"] = point_key(point)
    return row


def run_chunk(ctx: SweepContext, points: list[dict]) -> list[dict]:
    return [evaluate_row(p, ctx) for p in points]


# --- executors -------------------------------------------------------------------------------------

class SerialExecutor:
    name = "serial"
    workers = 1

    def __init__(self, ctx: SweepContext):
        self.ctx = ctx

    def imap(self, fn, items):
        for item in items:
            yield fn(self.ctx, item)

    def close(self):
        pass


_WORKER_CONTEXT: SweepContext | None = None


def _init_worker(ctx: SweepContext) -> None:
    global _WORKER_CONTEXT
    _WORKER_CONTEXT = ctx
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it terminates the pool


def _call_in_worker(task):
    fn, item = task
    return fn(_WORKER_CONTEXT, item)


class LocalExecutor:
    name = "local"

    def __init__(self, ctx: SweepContext, workers: int):
        self.ctx, self.workers = ctx, workers
        # fork is cheapest, but forking a process that has loaded a multithreaded runtime (JAX's,
        # Ray's) can deadlock the child on a lock some thread held: start clean workers then
        threaded = any(name in sys.modules for name in ("jax", "jaxlib", "ray"))
        methods = multiprocessing.get_all_start_methods()
        method = "fork" if "fork" in methods and not threaded else ("forkserver" if "forkserver" in methods else "spawn")
        self.pool = multiprocessing.get_context(method).Pool(workers, initializer=_init_worker, initargs=(ctx,))

    def imap(self, fn, items):
        # a generator: the pool's feeder thread takes items as its pipe to the workers drains, so a
        # million-point grid is never queued (or pickled) at once
        yield from self.pool.imap_unordered(_call_in_worker, ((fn, item) for item in items))

    def close(self):
        """Stop the workers (also what stops running chunks after Ctrl-C). CPython's Pool.terminate() can
        wait forever for the task queue's lock that an idle worker holds while it waits for a task (seen
        after Ctrl-C, about one time in six): it gets a few seconds, then the workers are killed and the
        stuck call is left to its daemon thread."""
        workers = list(getattr(self.pool, "_pool", ()))  # multiprocessing's own list of the pool's processes

        def stop():
            self.pool.terminate()
            self.pool.join()

        stopper = threading.Thread(target=stop, name="pool-stop", daemon=True)
        stopper.start()
        stopper.join(CLOSE_WAIT_S)
        if stopper.is_alive():
            for worker in workers:
                worker.kill()
            stopper.join(CLOSE_WAIT_S)


CLOSE_WAIT_S = 5.0  # how long a pool's own terminate() gets before its workers are killed


def _ray_task(fn, ctx, item):
    return fn(ctx, item)


class RayExecutor:
    name = "ray"

    def __init__(self, ctx: SweepContext, address: str, num_cpus: int | None = None):
        if address == "local":
            loopback_ray_env()  # before the import where possible: Ray reads it then (local_ray.py)
        self.ray = require("ray", extra="sweep", command="geosim sweep --ray-address")
        self._temp = None
        if not self.ray.is_initialized():
            try:
                if address == "local":  # ours alone: on loopback, in a private temp directory
                    self._temp = init_local(self.ray, num_cpus)
                else:  # a cluster someone started deliberately: attach to it
                    self.ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except Exception as exc:  # Ray raises a bare Exception ("node timed out during startup"), ConnectionError...
                why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                raise GeosimError(f"Ray did not start ({why}); nothing was computed (try again, fewer --workers, or "
                                  "without --ray-address)", source="--ray-address") from None
            self._owns = True
        else:
            self._owns = False
        self.workers = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self._remote = self.ray.remote(num_cpus=1)(_ray_task)
        self._ctx_ref = self.ray.put(ctx)

    def imap(self, fn, items):
        """At most a few tasks per worker in flight, submitted as others finish: the items (a sweep's lazy
        chunks) are never all submitted, so the driver's and the object store's memory stay flat."""
        ray = self.ray
        items = iter(items)
        window = max(8, 4 * self.workers)
        pending: list = []
        try:
            while True:
                pending += [self._remote.remote(fn, self._ctx_ref, item)
                            for item in itertools.islice(items, window - len(pending))]
                if not pending:
                    return
                ready, pending = ray.wait(pending, num_returns=len(pending), timeout=0.1)
                for ref in ready:
                    yield ray.get(ref)
        finally:
            for ref in pending:  # Ctrl-C or an error: do not leave the cluster busy with our work
                ray.cancel(ref, force=True)

    def close(self):
        if self._owns:
            self.ray.shutdown()
            remove_temp_dir(self._temp)


def make_executor(ctx: SweepContext, jobs: int | None = None, ray_address: str | None = None):
    if ray_address:
        return RayExecutor(ctx, ray_address, num_cpus=jobs)
    jobs = jobs or os.cpu_count() or 1
    return SerialExecutor(ctx) if jobs == 1 else LocalExecutor(ctx, jobs)


def chunk_size(todo: int, workers: int) -> int:
    """~8 chunks per worker, at most 32 points each."""
    return max(1, min(32, math.ceil(todo / (workers * 8))))


def pending_chunks(table: SweepTable, size: int):
    """The points not yet done, in chunks of `size`, made as the executor asks for them (a million-point
    grid is never a list). The order strides through the grid (a step coprime to its length), so slow
    techniques and large values spread over the workers instead of arriving together."""
    n = len(table.codes)
    step = max(1, int(n * 0.6180339887))
    while math.gcd(step, n) != 1:
        step += 1
    chunk = []
    for i in range(n):
        index = i * step % n
        if not table.done(index):
            chunk.append(table.point_at(index))
            if len(chunk) == size:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


@dataclass
class SweepRun:
    total: int  # points in the grid
    skipped: int  # already on disk (resumed)
    computed: int  # evaluated now
    seconds: float
    table: SweepTable  # status and metric of every point (what crossovers and summaries read)
    out_dir: Path | None = None

    @property
    def rows(self) -> list[dict]:
        """The grid's whole rows in grid order, read back from results.jsonl (all in memory: for a library
        caller's small grid; the sweep itself reads its table)."""
        whole = {}
        for row in iter_rows(self.out_dir) if self.out_dir is not None else ():
            index = self.table.index_of(row)
            if index is not None:
                whole[index] = row
        return [whole[i] for i in sorted(whole)]

    @property
    def points_per_s(self) -> float:
        return self.computed / self.seconds if self.seconds > 0 else 0.0


def run_sweep(grid: Grid, ctx: SweepContext, out_dir, executor, *, fresh: bool = False, progress: bool = True,
              on_chunk=None) -> SweepRun:
    """Evaluate every point of `grid` not yet in `out_dir`, appending rows as chunks finish."""
    table = SweepTable(grid, ctx.metric)
    with ResultStore(out_dir, table).open(manifest(grid, ctx), fresh=fresh) as store:
        skipped = table.count_done()
        todo = len(grid) - skipped
        bar = _progress(todo, progress)
        started = time.perf_counter()
        computed = 0
        try:
            for rows in executor.imap(run_chunk, pending_chunks(table, chunk_size(todo, executor.workers))):
                store.append(rows)
                computed += len(rows)
                bar.update(len(rows))
                if on_chunk:
                    on_chunk(computed)
        finally:
            bar.close()
    return SweepRun(len(grid), skipped, computed, time.perf_counter() - started, table, Path(out_dir))


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total: int, enabled: bool):
    if not enabled or total == 0:
        return _NoBar()
    tqdm = require("tqdm", extra="sweep", command="geosim sweep").tqdm
    return tqdm(total=total, unit="pt", desc="sweep", smoothing=0.05, dynamic_ncols=True)
