"""Fit the simulator's parameters to measured runs: scipy least_squares on log-time residuals.

Every free parameter is fitted as x = log(value / initial), so values stay positive,
the bounds are multiplicative and a finite-difference step of 0.02 is a 2% nudge
whatever the unit. A residual is log(predicted / measured) of the record's metric
(a total time for the study, a time per iteration or a throughput for Alpa's files).

One residual evaluation is one predict() per record, so the evaluation caches each
record's prediction on the values of the parameters that record depends on: a
finite-difference Jacobian column then re-simulates only the records its parameter
touches (a link's bandwidth: one slice; a technique's overhead: one technique).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from geosim.calibrate.cases import PREDICTION_FIELD, RunCase
from geosim.calibrate.diagnostics import (Fitted, drawable_covariance, misfit_warnings, overhead_warnings,
                                          pinned_by_prior, secant_jacobian, uncertainties)
from geosim.calibrate.free import (DATA_NOISE, LINK_GLOBALS, LINK_KEYS, LINK_KINDS, LINK_PRIOR_SIGMA, OVERHEAD_PRIOR,
                                   SCALAR_PRIORS, FreeParam, apply_case, apply_params)
from geosim.inputs.case import Case as SimCase
from geosim.base.errors import GeosimError
from geosim.predict import Prediction, predict
from geosim.inputs.specs import GIB, Cluster, Params
from geosim.techniques import build_schedule

DIFF_STEP = 0.02  # log units: a 2% step; the simulated clock is piecewise (slow-start rounds, buckets)


def roomy(cluster: Cluster) -> Cluster:
    """The same slice with unlimited GPU memory: the time of a run the memory model would refuse.
    Time does not depend on memory, and a fit needs a time for every measured run."""
    hosts = tuple(replace(h, gpus=tuple(replace(g, memory_gib=1e9) for g in h.gpus)) for h in cluster.hosts)
    return replace(cluster, hosts=hosts)


class Evaluator:
    """Predictions of the cases for given free-parameter values, cached per case."""

    def __init__(self, cases: list[RunCase], free: list[FreeParam], base: Params):
        self.cases, self.free, self.base = cases, free, base
        self.clusters = [roomy(c.cluster) for c in cases]
        self.uses = [tuple(j for j, p in enumerate(free) if p.affects(c)) for c in cases]
        self.cache: dict[tuple, Prediction] = {}
        self.predictions = 0
        # (index of a value, index of the global it deviates from or a fixed centre, sigma in residual units)
        globals_ = {p.target: j for j, p in enumerate(free) if p.kind == "scalar"}
        self.priors = [(j, globals_.get(LINK_GLOBALS.get(p.kind), p.initial), LINK_PRIOR_SIGMA)
                       for j, p in enumerate(free) if p.kind in LINK_KINDS]
        self.priors += [(j, SCALAR_PRIORS[p.target][0], SCALAR_PRIORS[p.target][1] / DATA_NOISE)
                        for j, p in enumerate(free) if p.kind == "scalar" and p.target in SCALAR_PRIORS]
        self.priors += [(j, OVERHEAD_PRIOR[0], OVERHEAD_PRIOR[1] / DATA_NOISE)
                        for j, p in enumerate(free) if p.kind == "iteration_overhead"]

    def predict(self, i: int, values, params: Params | None = None) -> Prediction:
        key = (i,) + tuple(float(values[j]) for j in self.uses[i])
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        case = self.cases[i]
        params = params or apply_params(self.base, self.free, values)
        cluster, workload = apply_case(case, self.clusters[i], self.free, values)
        result = predict(SimCase(cluster, case.model, workload, params), case.technique, hosts=case.hosts,
                         options=case.options)
        if not result.ok:
            raise GeosimError(f"the simulator cannot run this case: {result.reason}", source=case.where)
        self.predictions += 1
        if len(self.cache) > 20000:  # a long fit: forget the oldest half
            for k in list(self.cache)[:10000]:
                del self.cache[k]
        self.cache[key] = result
        return result

    def values(self, x) -> np.ndarray:
        return np.array([p.initial for p in self.free]) * np.exp(np.asarray(x, dtype=float))

    def residuals(self, x) -> np.ndarray:
        values = self.values(x)
        params = apply_params(self.base, self.free, values)
        out = np.empty(len(self.cases) + len(self.priors))
        for i, case in enumerate(self.cases):
            predicted = getattr(self.predict(i, values, params), PREDICTION_FIELD[case.metric])
            out[i] = math.log(predicted / case.measured)
        for k, (j, reference, sigma) in enumerate(self.priors):
            ref = values[reference] if isinstance(reference, int) else reference
            out[len(self.cases) + k] = math.log(values[j] / ref) / sigma
        return out


@dataclass
class CaseResult:
    case: RunCase
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return self.predicted / self.measured - 1.0


@dataclass
class FitResult:
    params: Params
    fitted: list[Fitted]
    cases: list[CaseResult]
    memory: dict  # right, total, workspace_gib, note
    warnings: list[str]
    evaluations: int
    predictions: int
    seconds: float
    excluded: list[str] = field(default_factory=list)
    links: dict[str, dict[str, float]] = field(default_factory=dict)  # slice -> {bandwidth_gbps|window_mib: v}
    workload: dict[str, int] = field(default_factory=dict)
    covariance: dict = field(default_factory=dict)  # names, matrix: logs of the drawable global parameters

    @property
    def rms_log_error(self) -> float:
        return float(np.sqrt(np.mean([math.log(c.predicted / c.measured) ** 2 for c in self.cases])))

    @property
    def median_abs_error(self) -> float:
        return float(np.median([abs(c.error) for c in self.cases]))

    def free_values(self) -> list[float]:
        return [f.value for f in self.fitted]


def fit(cases: list[RunCase], free: list[FreeParam], base: Params, *, progress=None, max_nfev: int = 25) -> FitResult:
    """Least squares in log space; uncertainties from the Jacobian at the solution."""
    from scipy.optimize import least_squares

    started = time.perf_counter()
    timed = [c for c in cases if c.metric is not None]
    excluded = [f"{c.where} ({c.label}): {c.status}, nothing to fit to" for c in cases
                if c.metric is None and c.status != "out-of-memory"]
    used_free = [p for p in free if any(p.affects(c) for c in timed)]
    warnings = [f"{p.name}: no record depends on it; left at {p.initial:g} {p.unit}" for p in free if p not in used_free]
    if not timed:
        raise GeosimError("no record with a measured time or throughput to fit to")
    # a per-link value's weak prior is one pseudo-observation of it: only the others need a record each
    if len(timed) < len([p for p in used_free if p.kind not in LINK_KINDS]):
        raise GeosimError(f"{len(timed)} measured records cannot determine {len(used_free)} free parameters "
                          f"({', '.join(p.name for p in used_free)}): add records or fix parameters")
    ev = Evaluator(timed, used_free, base)
    lower = np.log([p.lower / p.initial for p in used_free])
    upper = np.log([p.upper / p.initial for p in used_free])
    calls = [0]

    def fun(x):
        calls[0] += 1
        r = ev.residuals(x)
        if progress and calls[0] % 10 == 0:
            progress(f"  evaluation {calls[0]}: rms log error {np.sqrt(np.mean(r ** 2)):.3f} "
                     f"({ev.predictions} simulations, {time.perf_counter() - started:.0f} s)")
        return r

    if used_free:
        solution = least_squares(fun, np.zeros(len(used_free)), bounds=(lower, upper), method="trf", jac="2-point",
                                 diff_step=DIFF_STEP, x_scale=1.0, xtol=1e-3, ftol=1e-4, gtol=1e-6, max_nfev=max_nfev)
        x, jac, active = solution.x, solution.jac, solution.active_mask
        r = solution.fun
        if solution.status == 0:
            warnings.append(f"the fit stopped after {max_nfev} evaluations without converging")
    else:
        x, jac, active, r = np.zeros(0), np.zeros((len(timed), 0)), np.zeros(0), fun(np.zeros(0))
    if used_free:
        # the simulated clock is piecewise (slow-start rounds, buckets, which stage or GPU is the slowest):
        # a one-sided 2% difference at the solution can straddle a step and report a huge slope, hence a
        # tiny uncertainty. The uncertainties use central secants over +-SIGMA_STEP instead.
        jac = secant_jacobian(fun, x, lower, upper, r)
    fitted = uncertainties(used_free, ev.values(x), jac, r, active, warnings)
    covariance = {}
    if used_free:
        warnings[:0] = pinned_by_prior(ev, jac, ev.values(x))
        covariance = drawable_covariance(fitted, jac, r, active)
    values = ev.values(x)
    params = apply_params(base, used_free, values)
    results = [CaseResult(c, getattr(ev.predict(i, values, params), PREDICTION_FIELD[c.metric]), c.measured)
               for i, c in enumerate(timed)]
    links: dict[str, dict[str, float]] = {}
    workload: dict[str, int] = {}
    for f in fitted:
        if f.param.kind in LINK_KINDS:
            links.setdefault(f.param.target, {})[LINK_KEYS[f.param.kind]] = f.value
        elif f.param.kind == "tokens_per_epoch":
            workload["tokens_per_epoch"] = max(1, round(f.value))
    warnings.extend(overhead_warnings(ev, timed, values, params))
    warnings[:0] = misfit_warnings(results, fitted)
    params, memory = fit_memory(cases, params)
    assumed = sorted({k for c in timed for k in c.assumed_workload})
    if assumed:
        fitted_names = set(workload)
        told = [k for k in assumed if k not in fitted_names]
        if told:
            warnings.append(f"the records do not give {', '.join(told)}: the fit assumed the scenario/default workload "
                            f"for them, so fitted values are conditional on that assumption")
    return FitResult(params, fitted, results, memory, warnings, calls[0], ev.predictions,
                     time.perf_counter() - started, excluded, links, workload, covariance)


def fit_memory(cases: list[RunCase], params: Params) -> tuple[Params, dict]:
    """Count memory outcomes (fits / out of memory) the model gets right; when there are out-of-memory
    records, choose the per-GPU workspace that gets the most right (the memory model's one free constant)."""
    judged = [c for c in cases if c.status in ("ok", "out-of-memory")]
    if not judged:
        return params, {"right": 0, "total": 0, "workspace_gib": params.workspace_bytes / GIB, "note": "no records"}
    margins = []  # GiB left on the tightest GPU with no workspace reserved: the run fits iff workspace <= margin
    for c in judged:
        # memory depends on the model, the batch and the technique, not on links or the epoch length
        try:
            schedule = build_schedule(c.technique, SimCase(c.cluster, c.model, c.workload, params).on(c.hosts))
        except GeosimError as exc:
            if exc.key == "technique":
                raise
            margins.append(None)
            continue
        gpu = {d.rank: d.gpu for d in schedule.devices}
        margins.append(min(gpu[r].memory_gib - (need - params.workspace_bytes) / GIB
                           for r, need in schedule.memory_bytes.items()))
    fits = [c.status == "ok" for c in judged]

    def right(workspace: float) -> int:
        return sum(1 for m, ok in zip(margins, fits) if m is not None and (workspace <= m) == ok)

    note = "no out-of-memory records: the workspace is not constrained, left at its value"
    workspace = params.workspace_bytes / GIB
    if not all(fits):
        grid = np.round(np.arange(0.0, 8.0001, 0.05), 2)
        best = max(right(w) for w in grid)
        workspace = float(min((w for w in grid if right(w) == best), key=lambda w: abs(w - params.workspace_bytes / GIB)))
        note = f"workspace per GPU chosen from the out-of-memory records: {workspace:g} GiB"
        params = replace(params, workspace_bytes=workspace * GIB)
    return params, {"right": right(workspace), "total": len(judged), "workspace_gib": workspace, "note": note}


def predict_with(result: FitResult, cases: list[RunCase]) -> list[CaseResult]:
    """Predictions of cases the fit never saw, with the fitted values: a held-out slice without a
    fitted link keeps its scenario's link (its RTT and the global transport), a held-out technique
    without a fitted overhead keeps the default one."""
    free = [f.param for f in result.fitted]
    timed = [c for c in cases if c.metric is not None]
    ev = Evaluator(timed, free, result.params)
    values = result.free_values()
    return [CaseResult(c, getattr(ev.predict(i, values), PREDICTION_FIELD[c.metric]), c.measured)
            for i, c in enumerate(timed)]
