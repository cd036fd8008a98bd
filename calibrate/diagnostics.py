"""What a fit could not tell: each fitted value's uncertainty from the Jacobian at the solution
(central secants, since the simulated clock is piecewise), what the records leave to a prior or
a bound, the covariance predictions draw from, and the warnings for a fit that explains runs by
a fixed cost or misses its own records."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from geosim.calibrate.cases import RunCase
from geosim.calibrate.free import COMPUTE_PRIORS, OVERHEAD_RANGE, SCALAR_PRIORS, FreeParam
from geosim.inputs.specs import Params

if TYPE_CHECKING:
    from geosim.calibrate.fit import CaseResult, Evaluator

POORLY_DETERMINED = math.log(2.0)  # 1-sigma beyond a factor of 2: say the data do not pin it down
CONDITION_LIMIT = 1e6
SIGMA_STEP = 0.05  # log units: the secant half-width the uncertainties are computed over (a 5% nudge)
NOT_IDENTIFIABLE = math.log(100.0)  # 1-sigma beyond a factor of 100: the data say nothing about it


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


DRAWABLE_KINDS = ("scalar", "iteration_overhead", "setting")


def drawable_covariance(fitted: list[Fitted], jac, residuals, active) -> dict:
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


def pinned_by_prior(ev: Evaluator, jac, values) -> list[str]:
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
    return [f"{technique}: the per-iteration overhead ({params.for_technique('iteration_overhead_s', technique):.3g} s) is "
            f"{share:.0%} of an iteration ({label}): the fit explains these runs by a fixed cost, so predictions "
            f"for other slices, models or batches are unreliable"
            for technique, (share, label) in sorted(worst.items()) if share >= OVERHEAD_WARN_SHARE]


MISFIT_MEDIAN = 0.25  # a median |error| beyond this on the fitted records themselves: the model misses them


def misfit_warnings(results: list[CaseResult], fitted: list[Fitted]) -> list[str]:
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
