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

from geosim.calibrate import OVERHEAD_KINDS
from geosim.calibrate.cases import PREDICTION_FIELD, RunCase
from geosim.errors import GeosimError
from geosim.params import SCALARS
from geosim.case import Case as SimCase
from geosim.sim.predict import Prediction, predict
from geosim.specs import GIB, Cluster, Params
from geosim.techniques import build_schedule, is_pipelined

SCALAR_FIELDS = {key: (name, scale) for key, name, scale in SCALARS}
DIFF_STEP = 0.02  # log units: a 2% step; the simulated clock is piecewise (slow-start rounds, buckets)
POORLY_DETERMINED = math.log(2.0)  # 1-sigma beyond a factor of 2: say the data do not pin it down
CONDITION_LIMIT = 1e6
SIGMA_STEP = 0.05  # log units: the secant half-width the uncertainties are computed over (a 5% nudge)
# A per-link value is a slice's deviation from the global transport (window) or from the scenario's
# nominal capacity (bandwidth). A weak prior, log(value / reference) ~ N(0, LINK_PRIOR_SIGMA), keeps a
# link the data cannot see (a LAN link's window, a WAN link's idle line rate) at its reference, and
# makes the global window the typical slice's: what a slice never measured is predicted with.
LINK_PRIOR_SIGMA = 2.0
NOT_IDENTIFIABLE = math.log(100.0)
# scalars only some techniques' schedules use: a p2p send's rendezvous is paid by pipeline stages only
P2P_SCALARS = ("transport.p2p_handshake_rtts",)
# A message's fixed cost (NCCL's proxy hand-off, the socket calls, a chunk's copy to the host) is
# tens to hundreds of microseconds; 20 ms is a generous ceiling. Without one a fit explained runs
# 40 s slower than their compute by 0.87 s per message, a fixed per-iteration cost in disguise.
MAX_PER_MESSAGE_US = 2e4
# (lowest, highest) a global transport scalar may be fitted to, in its file unit; a technique's own
# fittable settings come with their ranges from its Settings (tunable(..., fit=(low, high)))
SCALAR_RANGES = {"transport.collective_step_rtts": (0.02, 20.0), "transport.p2p_handshake_rtts": (0.1, 50.0),
                 "transport.window_mib": (1 / 16, 512.0), "compute.gemm_fraction": (0.05, 1.0),
                 "compute.memory_fraction": (0.05, 1.0),
                 "transport.per_message_overhead_us": (1.0, MAX_PER_MESSAGE_US), "transport.stream_rate_gbps": (0.1, 100.0)}


def fittable_settings() -> dict[str, tuple[float, float]]:
    """TECHNIQUE.SETTING -> the range the fitter may move it in, for every technique's fittable tunables."""
    from geosim.techniques import settings_class, technique_names
    from geosim.techniques._settings import tunables

    return {f"{name}.{leaf}": t.fit for name in technique_names()
            for leaf, t in tunables(settings_class(name)).items() if t.fit is not None}


def _uses(technique: str, owner: str) -> bool:
    """Whether `technique`'s schedules are built with `owner`'s (so its settings affect them)."""
    from geosim.techniques import builds_on

    return technique == owner or any(_uses(t, owner) for t in builds_on(technique))
STEP_SCALARS = ("transport.collective_step_rtts",)
# The compute model's global constants: (prior centre, 1-sigma of log(value)), sources in
# docs/reference/params.md. A prior is one pseudo-observation log(value / centre) ~ N(0, sigma),
# weighed against the records as if each record's log error had a 1-sigma of DATA_NOISE.
COMPUTE_PRIORS = {"compute.gemm_fraction": (0.7, 0.5), "compute.memory_fraction": (0.8, 0.4)}
# A per-iteration overhead is launch, host sync and the driver's bookkeeping: a tenth of a second,
# not the seconds a fit would otherwise move into it to stand in for slow compute.
OVERHEAD_PRIOR = (0.1, 1.0)
# A message's fixed cost over NCCL's socket transport (the proxy thread's hand-off, the socket
# calls, a chunk's copy through host memory) is tens to hundreds of microseconds: (centre in us,
# 1-sigma of its log). Without it, a fold without Shard moved the other techniques' misfit into
# ~8 ms per message, and Shard's thousands of small all-reduces came out twice too slow on a LAN.
PER_MESSAGE_PRIOR = {"transport.per_message_overhead_us": (100.0, 1.0)}
SCALAR_PRIORS = {**COMPUTE_PRIORS, **PER_MESSAGE_PRIOR}
OVERHEAD_RANGE = (1e-4, 1.0)  # s: physical bounds of a per-iteration overhead
DATA_NOISE = 0.2
SHARED = "shared"  # the target of an overhead every technique has (fitted once, predicts a technique never seen)
LINK_KINDS = ("link_bandwidth", "link_window", "link_step_rtts")
# the key a per-link value has in a scenario's [[links]] table and in [fitted].links
LINK_KEYS = {"link_bandwidth": "bandwidth_gbps", "link_window": "window_mib", "link_step_rtts": "step_rtts"}
# the global a per-link value deviates from (its prior's centre when that global is fitted too)
LINK_GLOBALS = {"link_window": "transport.window_mib", "link_step_rtts": "transport.collective_step_rtts"}  # 1-sigma beyond a factor of 100: the data say nothing about it


@dataclass(frozen=True)
class FreeParam:
    """One fitted quantity. kind: scalar | setting (a technique's) | efficiency | iteration_overhead | startup |
    link_bandwidth | link_window | link_step_rtts | tokens_per_epoch; target: the TOML key, GPU, technique or slice it applies to."""

    kind: str
    target: str
    initial: float  # in the unit below
    lower: float
    upper: float
    unit: str

    @property
    def name(self) -> str:
        return {
            "scalar": self.target,
            "setting": self.target,
            "efficiency": f"compute.efficiency.{self.target}",
            "iteration_overhead": f"overhead.iteration_s.{self.target}",
            "startup": f"overhead.startup_s.{self.target}",
            "link_bandwidth": f"link.{self.target}.bandwidth_gbps",
            "link_window": f"link.{self.target}.window_mib",
            "link_step_rtts": f"link.{self.target}.step_rtts",
            "tokens_per_epoch": "workload.tokens_per_epoch",
        }[self.kind]

    def affects(self, case: RunCase) -> bool:
        if self.kind == "efficiency":
            return self.target in case.gpus
        if self.kind in ("iteration_overhead", "startup"):
            return self.target in (case.technique, SHARED)
        if self.kind in LINK_KINDS:
            return case.networked and self.target == case.slice_key
        if self.kind == "tokens_per_epoch":
            return "tokens_per_epoch" in case.assumed_workload
        if self.kind == "setting":
            return _uses(case.technique, self.target.partition(".")[0])
        if self.target in P2P_SCALARS and not is_pipelined(case.technique):
            return False
        if self.target.startswith(("transport.", "host.lan")):
            return case.networked
        return True


def apply_params(base: Params, free: list[FreeParam], values) -> Params:
    """The global parameters (not per-link, not workload) set to values."""
    efficiency, iteration, startup = dict(base.efficiency), dict(base.iteration_overhead_s), dict(base.startup_s)
    changes: dict = {}
    for p, v in zip(free, values):
        if p.kind == "efficiency":
            efficiency[p.target] = float(v)
        elif p.kind == "iteration_overhead":
            for technique in (iteration if p.target == SHARED else (p.target,)):
                iteration[technique] = float(v)
        elif p.kind == "startup":
            startup[p.target] = float(v)
        elif p.kind == "scalar":
            name, scale = SCALAR_FIELDS[p.target]
            changes[name] = max(1, round(v)) if scale is int else float(v) * scale
        elif p.kind == "setting":
            technique, _, leaf = p.target.partition(".")
            kind = type(getattr(base.settings(technique), leaf))
            base = base.with_settings(technique, **{leaf: max(1, round(v)) if kind is int else float(v)})
    return replace(base, efficiency=efficiency, iteration_overhead_s=iteration, startup_s=startup, **changes)


def apply_case(case: RunCase, cluster: Cluster, free: list[FreeParam], values):
    """(cluster, workload) of a case with the per-link and workload values that apply to it."""
    workload = case.workload
    for p, v in zip(free, values):
        if not p.affects(case):
            continue
        if p.kind in LINK_KINDS:
            cluster = with_link(cluster, bandwidth_bps=v * 1e9 if p.kind == "link_bandwidth" else None,
                                window_bytes=v * 2**20 if p.kind == "link_window" else None,
                                step_rtts=v if p.kind == "link_step_rtts" else None)
        elif p.kind == "tokens_per_epoch":
            workload = replace(workload, tokens_per_epoch=max(1, round(v)))
    return cluster, workload


def with_link(cluster: Cluster, bandwidth_bps: float | None = None, window_bytes: float | None = None,
              step_rtts: float | None = None) -> Cluster:
    """The slice with its links between sites given a fitted bandwidth, window or collective step round trips."""
    from geosim.studies.whatif import wan_links

    change = set(map(id, wan_links(cluster)))
    links = []
    for link in cluster.links:
        if id(link) in change:
            if bandwidth_bps is not None:
                link = replace(link, bandwidth_bps=bandwidth_bps)
            if window_bytes is not None:
                link = replace(link, window_bytes=window_bytes)
            if step_rtts is not None:
                link = replace(link, step_rtts=step_rtts)
        links.append(link)
    return replace(cluster, links=tuple(links))


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
class Fitted:
    param: FreeParam
    value: float
    sigma_log: float  # 1-sigma of log(value): value x/ exp(sigma_log)
    note: str = ""  # at a bound | poorly determined | not identifiable

    @property
    def low(self) -> float:
        return self.value * math.exp(-self.sigma_log) if self.sigma_log < 700 else 0.0  # nan, inf: unknown

    @property
    def high(self) -> float:
        return self.value * math.exp(self.sigma_log) if self.sigma_log < 700 else math.inf


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


DRAWABLE_KINDS = ("scalar", "iteration_overhead", "setting")


def drawable_covariance(fitted: list["Fitted"], jac, residuals, active) -> dict:
    """The covariance of the logs of the global parameters a prediction can draw from: those the data
    (with the priors) determine, off their bounds. Per-link values live in scenario files, not here."""
    keep = [j for j, f in enumerate(fitted) if f.param.kind in DRAWABLE_KINDS and active[j] == 0
            and math.isfinite(f.sigma_log) and f.sigma_log < NOT_IDENTIFIABLE and f.note != "not identifiable"]
    inside = [j for j in range(len(fitted)) if active[j] == 0]
    if not keep:
        return {}
    m = jac.shape[0]
    dof = max(1, m - len(inside))
    s2 = float(residuals @ residuals) / dof
    J = jac[:, inside]
    cov = s2 * np.linalg.pinv(J.T @ J)
    index = [inside.index(j) for j in keep]
    sub = cov[np.ix_(index, index)]
    return {"names": [fitted[j].param.name for j in keep],
            "matrix": [[round(float(v), 8) for v in row] for row in sub]}


def pinned_by_prior(ev: "Evaluator", jac, values) -> list[str]:
    """A loud warning for each parameter with a prior whose value the records hardly move: the
    records' information on it (the sum of squared slopes of their residuals) below its prior's."""
    out = []
    data_rows = len(ev.cases)
    for j, _, sigma in ev.priors:
        p = ev.free[j]
        if p.target not in SCALAR_PRIORS:
            continue
        from_data = float(np.sum(jac[:data_rows, j] ** 2))
        from_prior = 1.0 / sigma ** 2
        if from_data < from_prior:
            centre, spread = SCALAR_PRIORS[p.target]
            runs = ("paced by compute (one VM, a LAN)" if p.target in COMPUTE_PRIORS
                    else "paced by many small messages (Shard on a LAN)")
            out.append(f"PINNED BY ITS PRIOR: {p.name} = {values[j]:.3g} is set by its prior ({centre:g} x/ "
                       f"{math.exp(spread):.2f}), not by the records: they carry {from_data / from_prior:.0%} of the "
                       f"prior's information on it. Add runs that are {runs}.")
    return out


def secant_jacobian(fun, x, lower, upper, r0) -> np.ndarray:
    """d residual / d log-parameter by central secants over +-SIGMA_STEP (one-sided at a bound)."""
    jac = np.empty((len(r0), len(x)))
    for j in range(len(x)):
        hi, lo = x.copy(), x.copy()
        hi[j] = min(x[j] + SIGMA_STEP, upper[j])
        lo[j] = max(x[j] - SIGMA_STEP, lower[j])
        if hi[j] - lo[j] <= 0:
            jac[:, j] = 0.0
            continue
        r_hi = fun(hi) if hi[j] > x[j] else r0
        r_lo = fun(lo) if lo[j] < x[j] else r0
        jac[:, j] = (r_hi - r_lo) / (hi[j] - lo[j])
    return jac


# a fitted fixed overhead that is this share of a run or more explains the run by a constant, not by
# compute and communication: such a params file predicts poorly off the runs it was fitted on
OVERHEAD_WARN_SHARE = 0.5


def overhead_warnings(ev, timed: list[RunCase], values, params: Params) -> list[str]:
    """One warning per technique whose fixed overhead is most of its predicted runs."""
    worst: dict[str, tuple[float, str]] = {}
    for i, case in enumerate(timed):
        pred = ev.predict(i, values, params)
        b = pred.iteration_breakdown
        if b is None or not pred.iteration_time_s:
            continue
        share = b.overhead_s / pred.iteration_time_s
        if share > worst.get(case.technique, (0.0, ""))[0]:
            worst[case.technique] = (share, case.label)
    return [f"{technique}: the per-iteration overhead ({params.iteration_overhead_s.get(technique, 0.0):.3g} s) is "
            f"{share:.0%} of an iteration ({label}): the fit explains these runs by a fixed cost, so predictions "
            f"for other slices, models or batches are unreliable"
            for technique, (share, label) in sorted(worst.items()) if share >= OVERHEAD_WARN_SHARE]


MISFIT_MEDIAN = 0.25  # a median |error| beyond this on the fitted records themselves: the model misses them


def misfit_warnings(results: list[CaseResult], fitted: list["Fitted"]) -> list[str]:
    """One loud warning when the best fit within physical bounds still misses the records it was fitted
    on: their times hold a cost the model does not have (or the records are wrong)."""
    if not results:
        return []
    errors = [c.error for c in results]
    median = float(np.median([abs(e) for e in errors]))
    if median <= MISFIT_MEDIAN:
        return []
    worst = max(errors, key=abs)
    side = "slower" if np.median(errors) < 0 else "faster"
    held = [f.param.name for f in fitted if f.note.startswith("at its")]
    why = (f"with {', '.join(held)} held at their physical bounds" if held else "within the parameters' physical bounds")
    return [f"MODEL MISSES THE RECORDS: the best fit {why} is off by a median {median:.0%} (worst {worst:+.0%}) on "
            f"the records it was fitted to; the measured runs are {side} than anything the model explains (a cost "
            f"it does not have, such as a per-iteration overhead beyond {OVERHEAD_RANGE[1]:g} s, or records in the "
            f"wrong unit): check them; predictions from these parameters are unreliable"]


def uncertainties(free: list[FreeParam], values, jac, residuals, active, warnings: list[str]) -> list[Fitted]:
    """1-sigma of each log-parameter from (J^T J)^-1 scaled by the residual variance; flags what the data
    cannot determine: parameters at a bound are held there, a near-singular J names its weakest direction."""
    m, n = jac.shape
    fitted = [Fitted(p, float(v), math.nan) for p, v in zip(free, values)]
    inside = [j for j in range(n) if active[j] == 0]
    for j in range(n):
        if active[j] != 0:
            side = "lower" if active[j] < 0 else "upper"
            fitted[j].note = f"at its {side} bound"
            warnings.append(f"{free[j].name} = {values[j]:.4g} {free[j].unit} is at its {side} bound "
                            f"[{free[j].lower:g}, {free[j].upper:g}]: not determined by the data")
    dof = m - len(inside)
    if not inside:
        return fitted
    J = jac[:, inside]
    s2 = float(residuals @ residuals) / dof if dof > 0 else math.nan
    if dof <= 0:
        warnings.append(f"{m} residuals for {len(inside)} free parameters: no degrees of freedom left, "
                        f"uncertainties unknown")
    u, sv, vt = np.linalg.svd(J, full_matrices=False)
    column_norm = np.linalg.norm(J, axis=0)
    tiny = sv <= sv[0] / CONDITION_LIMIT if sv[0] > 0 else np.ones_like(sv, dtype=bool)
    inv_sv2 = np.where(tiny, math.inf, 1.0 / np.where(tiny, 1.0, sv) ** 2)
    with np.errstate(invalid="ignore"):
        cov = (vt.T * inv_sv2) @ vt if not tiny.any() else np.linalg.pinv(J.T @ J)
    for k, j in enumerate(inside):
        sigma = math.sqrt(max(0.0, s2 * cov[k, k])) if math.isfinite(s2) else math.nan
        if column_norm[k] < 1e-9:
            fitted[j].note, sigma = "not identifiable", math.inf
            warnings.append(f"{free[j].name}: no residual changes with it; not identifiable from these records")
        elif tiny.any() and abs(vt[np.argmax(tiny)][k]) > 0.3:
            fitted[j].note, sigma = "not identifiable", math.inf
            partners = [free[inside[i]].name for i in np.argsort(-abs(vt[np.argmax(tiny)]))[:3] if i != k]
            warnings.append(f"{free[j].name}: not identifiable from these records (only a combination with "
                            f"{', '.join(partners)} is)")
        elif sigma > NOT_IDENTIFIABLE:
            fitted[j].note = "not identifiable"
            warnings.append(f"{free[j].name}: not identifiable from these records (1-sigma factor > {math.exp(NOT_IDENTIFIABLE):.0f})")
        elif sigma > POORLY_DETERMINED:
            fitted[j].note = "poorly determined"
            warnings.append(f"{free[j].name}: poorly determined (1-sigma factor {math.exp(min(sigma, 50)):.3g})")
        fitted[j].sigma_log = sigma
    return fitted


def fit_memory(cases: list[RunCase], params: Params) -> tuple[Params, dict]:
    """Count memory outcomes (fits / out of memory) the model gets right; when there are out-of-memory
    records, choose the per-GPU workspace that gets the most right (the memory model's one free constant)."""
    judged = [c for c in cases if c.status in ("ok", "out-of-memory")]
    if not judged:
        return params, {"right": 0, "total": 0, "workspace_gib": params.workspace_gib, "note": "no records"}
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
        margins.append(min(gpu[r].memory_gib - (need - params.workspace_gib * GIB) / GIB
                           for r, need in schedule.memory_bytes.items()))
    fits = [c.status == "ok" for c in judged]

    def right(workspace: float) -> int:
        return sum(1 for m, ok in zip(margins, fits) if m is not None and (workspace <= m) == ok)

    note = "no out-of-memory records: the workspace is not constrained, left at its value"
    workspace = params.workspace_gib
    if not all(fits):
        grid = np.round(np.arange(0.0, 8.0001, 0.05), 2)
        best = max(right(w) for w in grid)
        workspace = float(min((w for w in grid if right(w) == best), key=lambda w: abs(w - params.workspace_gib)))
        note = f"workspace per GPU chosen from the out-of-memory records: {workspace:g} GiB"
        params = replace(params, workspace_gib=workspace)
    return params, {"right": right(workspace), "total": len(judged), "workspace_gib": workspace, "note": note}


def default_free(cases: list[RunCase], base: Params, *, fit_links: set[str] | None = None, link_kind: str = "auto",
                 fit_workload: bool = False, techniques: set[str] | None = None, step_rtts: str | None = "link",
                 extra: tuple[str, ...] = (), overhead: str = "technique") -> list[FreeParam]:
    """The modest default set: the compute model's GEMM and memory-bandwidth fractions (one each for
    every GPU, with priors), the transport's window and per-message
    overhead, a fixed per-iteration overhead per technique, a link value for each slice in fit_links
    (those whose capacity is unknown) and, if asked, the epoch's length in tokens.

    overhead: "technique" (one per-iteration overhead per technique), "shared" (one for all techniques:
    what predicts a technique the records never ran) or "none" (the parameters' values stand).

    step_rtts: also the round trips a collective step waits for NCCL's flow control: "global"
    (transport.collective_step_rtts), "link" (that and one per window-bound link in fit_links: what
    differs between slices, each slice's hosts and path) or None (neither). extra: more global scalars to fit (keys of SCALAR_RANGES,
    e.g. transport.p2p_handshake_rtts, zero2.gather_bytes_per_param); one no record uses is left out."""
    from geosim.studies.whatif import wan_links

    timed = [c for c in cases if c.metric is not None]
    free: list[FreeParam] = []
    settings_ranges = fittable_settings()

    def scalar(key: str) -> FreeParam:
        if key in settings_ranges:
            technique, _, leaf = key.partition(".")
            lower, upper = settings_ranges[key]
            value = float(getattr(base.settings(technique), leaf))
            return FreeParam("setting", key, min(max(value, lower), upper), lower, upper,
                             "B/param" if key.endswith("per_param") else "")
        name, scale = SCALAR_FIELDS[key]
        value = getattr(base, name) / scale
        lower, upper = SCALAR_RANGES[key]
        unit = {"window_mib": "MiB", "overhead_us": "us", "rate_gbps": "Gbit/s", "per_param": "B/param", "rtts": "RTT"}
        return FreeParam("scalar", key, max(value, lower), lower, upper,
                         next((u for k, u in unit.items() if key.endswith(k)), ""))

    if timed:  # every GPU's speed from the datasheet and these two, with priors (COMPUTE_PRIORS)
        free.extend(scalar(k) for k in COMPUTE_PRIORS)
    networked = any(c.networked for c in timed)
    if networked:
        free.append(scalar("transport.window_mib"))
        free.append(scalar("transport.per_message_overhead_us"))
        if step_rtts:
            free.extend(scalar(k) for k in STEP_SCALARS)
    for key in extra:
        if key not in SCALAR_RANGES and key not in settings_ranges:
            raise GeosimError(f"cannot fit {key!r} (can: {', '.join([*SCALAR_RANGES, *settings_ranges])})",
                              key="extra")
        p = scalar(key)
        if p not in free and any(p.affects(c) for c in timed):
            free.append(p)
    if overhead not in OVERHEAD_KINDS:
        raise GeosimError(f"overhead must be one of {', '.join(OVERHEAD_KINDS)}, got {overhead!r}", key="overhead")
    if overhead == "shared" and timed:
        first = min(base.iteration_overhead_s.values(), default=0.05)
        free.append(FreeParam("iteration_overhead", SHARED, min(max(first, 1e-3), OVERHEAD_RANGE[1]), *OVERHEAD_RANGE, "s"))
    elif overhead == "technique":
        for technique in sorted({c.technique for c in timed} & (techniques or {c.technique for c in timed})):
            free.append(FreeParam("iteration_overhead", technique,
                                  min(max(base.iteration_overhead_s.get(technique, 0.05), 1e-3), OVERHEAD_RANGE[1]),
                                  *OVERHEAD_RANGE, "s"))
    seen = set()
    for c in timed:
        if not c.networked or c.slice_key in seen or (fit_links is not None and c.slice_key not in fit_links):
            continue
        seen.add(c.slice_key)
        link = wan_links(c.cluster)[0]
        window = (link.window_bytes or base.window_bytes) * (link.streams or base.streams)
        # fit what limits the link's rate: the line on a LAN, the TCP window over a WAN (rate = window / RTT)
        window_bound = link.rtt_s > 0 and window / link.rtt_s < link.bandwidth_bps / 8
        kind = link_kind if link_kind != "auto" else ("window" if window_bound else "bandwidth")
        if kind == "bandwidth":
            free.append(FreeParam("link_bandwidth", c.slice_key, link.bandwidth_bps / 1e9, 0.005, 400.0, "Gbit/s"))
        else:
            free.append(FreeParam("link_window", c.slice_key, (link.window_bytes or base.window_bytes) / 2**20,
                                  1 / 64, 512.0, "MiB"))
        if step_rtts == "link" and window_bound:  # on a LAN a step's round trip is lost in its transfer time
            initial = link.step_rtts if link.step_rtts is not None else base.collective_step_rtts
            free.append(FreeParam("link_step_rtts", c.slice_key, max(initial, 0.02), 0.02, 20.0, "RTT"))
    if fit_workload and any("tokens_per_epoch" in c.assumed_workload for c in timed):
        initial = next(c.workload.tokens_per_epoch for c in timed if "tokens_per_epoch" in c.assumed_workload)
        free.append(FreeParam("tokens_per_epoch", "workload", float(initial), 1e3, 1e9, "tokens"))
    return free


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
