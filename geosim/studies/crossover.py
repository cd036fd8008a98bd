"""Crossovers: the RTT (or bandwidth) at which two techniques' order flips.

The grid only brackets a flip (two neighbouring values where the faster technique
differs); the point itself is then found by bisection on the simulator, to a relative
tolerance on the axis. On RTT and bandwidth the bisection runs on the log of the
value, because predicted times vary over decades there. A pair that flips twice
between two grid values looks unchanged to the grid and is missed: a finer grid finds it.
"""

from __future__ import annotations

import itertools
import math

from geosim.studies.sweep.run import SweepContext, metric_of
from geosim.techniques import is_low_communication
from geosim.base.units import bisect, middle
from geosim.studies.sweep.grid import NATIVE
from geosim.studies.sweep.table import as_table

AXES = ("rtt_ms", "bandwidth_gbps")
REL_TOL = 1e-3


def bisect_flip(f, lo: float, hi: float, *, rel_tol: float = REL_TOL, log: bool = True, max_steps: int = 100):
    """A root of f between lo and hi, where f(lo) and f(hi) differ in sign (geosim.base.units.bisect).

    Returns (x, steps): x is the middle of the last bracket, whose width is at most
    rel_tol * x. f may return None (the point does not run): that is an error here.
    """
    f_lo, f_hi = f(lo), f(hi)
    if f_lo is None or f_hi is None or ((f_lo > 0) == (f_hi > 0) and f_lo != 0 and f_hi != 0):
        raise ValueError(f"f does not change sign on [{lo:g}, {hi:g}]: f(lo)={f_lo}, f(hi)={f_hi}")
    if f_lo == 0:
        return lo, 0
    if f_hi == 0:
        return hi, 0
    exact, calls = [], [0]

    def same_sign_as_low(x: float) -> bool:
        calls[0] += 1
        value = f(x)
        if value is None:
            raise ValueError(f"f is undefined at {x:g} inside the bracket")
        if value == 0:
            exact.append(x)
            raise _Exact
        return (value > 0) == (f_lo > 0)

    try:
        lo, hi, steps = bisect(same_sign_as_low, lo, hi, rel_tol=rel_tol, log=log, max_steps=max_steps)
    except _Exact:
        return exact[0], calls[0]
    return middle(lo, hi, log), steps


class _Exact(Exception):
    """f is exactly 0 at a midpoint: that is the crossing."""


def find_brackets(rows, axis: str, metric: str, order: list[str]) -> tuple[list[dict], list[dict]]:
    """From a sweep's table (or a list of rows): (bisection jobs for each bracketed flip, summaries of pairs
    that never flip). A native point sits on the curve but cannot be re-set: it is no bracket end. Each
    pair is one walk along the axis, holding nothing per point."""
    jobs, steady = [], []
    for panel in as_table(rows, metric).panels(axis):
        ran = [t for t in panel.techniques if panel.ran(t)]
        techs = [t for t in order if t in ran] + sorted(t for t in ran if t not in order)
        for a, b in itertools.combinations(techs, 2):
            if is_low_communication(a) != is_low_communication(b):
                continue  # time per epoch does not compare training that needs more tokens for the same loss
            base = {"point": panel.template, "a": a, "b": b, "axis": axis, "metric": metric}
            first = last = None  # (x, a's time - b's) at the first and the latest x where both run
            flipped = False
            for i in panel.by_x:
                va, vb = panel.value[a][i], panel.value[b][i]
                if math.isnan(va) or math.isnan(vb):
                    continue
                here = (panel.xs[i], va - vb)
                if last is not None and (last[1] > 0) != (here[1] > 0):
                    jobs.append({**base, "lo": last[0], "hi": here[0]})
                    flipped = True
                first, last = first or here, here
            if first is not None and not flipped:
                steady.append({**base, "at": None, "range": [first[0], last[0]], "faster": a if first[1] < 0 else b})
    return jobs, steady


def solve(ctx: SweepContext, job: dict) -> dict:
    """Bisect one bracketed flip on the simulator (runs in a worker)."""
    axis, template = job["axis"], job["point"]

    seen: dict[float, float | None] = {}

    def diff(x: float):
        if x not in seen:
            ta = metric_of({**template, "technique": job["a"], axis: x}, ctx)
            tb = metric_of({**template, "technique": job["b"], axis: x}, ctx)
            seen[x] = None if ta is None or tb is None else ta - tb
        return seen[x]

    at, steps = bisect_flip(diff, job["lo"], job["hi"])
    faster_below = job["a"] if diff(job["lo"]) < 0 else job["b"]
    other = job["b"] if faster_below == job["a"] else job["a"]
    return {**job, "at": at, "steps": steps, "evaluations": 2 * len(seen),
            "faster_below": faster_below, "faster_above": other}


def crossovers(rows, ctx: SweepContext, executor, axis: str, order: list[str]) -> list[dict]:
    jobs, steady = find_brackets(rows, axis, ctx.metric, order)
    for index, job in enumerate(jobs):
        job["index"] = index
    found = sorted(executor.imap(solve, jobs), key=lambda c: c.pop("index"))  # the rows' order, not completion order
    return found + steady


def orders_at_ends(rows, axis: str, metric: str) -> list[dict]:
    """Per group, the techniques fastest first at the lowest and the highest value of the axis
    (a sweep's table, or a list of rows)."""
    out = []
    for panel in as_table(rows, metric).panels(axis):
        seen = (i for i in panel.by_x if any(panel.codes[t][i] for t in panel.techniques))
        low = high = next(seen)
        for high in seen:
            pass
        ends = {}
        for end, i in (("low", low), ("high", high)):
            at = [t for t in panel.techniques if panel.codes[t][i]]
            ok = sorted((t for t in at if panel.status(t, i) == "ok"), key=lambda t: panel.value[t][i])
            ends[end] = {"at": panel.xs[i], "order": [t for t in ok if not is_low_communication(t)],
                         "low_communication": [t for t in ok if is_low_communication(t)],
                         "not_running": {t: panel.status(t, i) for t in at if panel.status(t, i) != "ok"}}
        out.append({"where": describe(panel.template, axis), **ends})
    return out


def describe(point: dict, axis: str) -> str:
    """Where a crossover lives, in words: scenario, model and whatever else is not at its default."""
    parts = [point["scenario"], point["model"]]
    for key, value in point.items():
        if key not in ("scenario", "model", "technique", axis, "workload") and value not in (NATIVE, "all"):
            parts.append(f"{key}={value}")
    parts += [f"{k}={v}" for k, v in point["workload"].items()]
    return " ".join(parts)


def pick_axis(grid_axes: dict) -> str | None:
    """The axis to find crossovers on: RTT if the grid varies it, else bandwidth, else none."""
    for axis in AXES:
        if len([v for v in grid_axes.get(axis, []) if v != NATIVE]) > 1:
            return axis
    return None
