"""Cross-validation on the study's Table II: does the fitted simulator predict cells it never saw?

(a) leave-one-technique-out (LOTO): fit on three techniques' 15 cells, predict the
    fourth technique's 5 cells; the held-out technique keeps the default overhead.
(b) leave-one-slice-out (LOSO): fit on four slices, predict the fifth from its RTT
    alone: its link keeps the scenario's nominal bandwidth, with the fitted global transport
    (window, collective step round trips).
(c) leave the single-VM runs out (single-vm): fit on Table II alone, predict the study's
    runs on one VM's two GPUs (no WAN): the test that compute is physical, since Table II's
    4-GPU runs are paced by the WAN.

The single-VM runs are training data in (a) and (b), except the held-out technique's or
slice's own; (a) and (b) are scored on Table II's cells only.

A scenario file may carry link values inferred from the very measurements cross-validated
here (a window, step round trips, a bandwidth below the slices' nominal one). Those would
leak the held-out cells into the prediction, so by default every case's links are first
reduced to what the slice's description gives: its RTT and the slices' common nominal
bandwidth. In LOTO the per-link values are then fitted on the training folds; in LOSO the
held-out slice uses the globals.

Folds are independent fits, so they run in a process pool (one per core).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from geosim.base.errors import GeosimError
from geosim.calibrate.cases import RunCase
from geosim.calibrate.fit import fit, predict_with
from geosim.calibrate.free import default_free
from geosim.inputs.params import load_params
from geosim.techniques import STUDY_ORDER
from geosim.studies.whatif import wan_links


@dataclass
class Cell:
    slice: str
    technique: str
    measured_s: float
    predicted_s: float
    fold: str
    metric: str = "total_time_s"  # what measured_s and predicted_s are: a time, or tflops_per_gpu

    @property
    def error(self) -> float:
        """The error in time: a throughput's is turned round (x% too fast = time x% too short)."""
        ratio = self.predicted_s / self.measured_s
        return (1.0 / ratio if self.metric in ("tflops_per_gpu", "tokens_per_s") else ratio) - 1.0


@dataclass
class FoldResult:
    name: str
    kind: str  # loto | loso | single-vm
    held_out: str
    cells: list[Cell]
    train_rms_log_error: float
    fitted: dict[str, dict]  # parameter -> {value, sigma_log, unit, note}
    warnings: list[str]
    seconds: float


@dataclass
class Report:
    kind: str
    folds: list[FoldResult] = field(default_factory=list)

    @property
    def cells(self) -> list[Cell]:
        return [c for f in self.folds for c in f.cells]

    @property
    def median_abs_error(self) -> float:
        return float(np.median([abs(c.error) for c in self.cells]))

    @property
    def worst(self) -> Cell:
        return max(self.cells, key=lambda c: abs(c.error))

    def order_right(self) -> dict[str, bool]:
        """Per slice: do the predictions rank the techniques as the measurements do?"""
        out = {}
        for s in dict.fromkeys(c.slice for c in self.cells):
            cells = [c for c in self.cells if c.slice == s]
            out[s] = ([c.technique for c in sorted(cells, key=lambda c: c.measured_s)]
                      == [c.technique for c in sorted(cells, key=lambda c: c.predicted_s)])
        return out

    def to_dict(self) -> dict:
        return {
            "kind": self.kind, "median_abs_error": self.median_abs_error,
            "worst": {"slice": self.worst.slice, "technique": self.worst.technique, "error": self.worst.error},
            "order_right": self.order_right(),
            "cells": [{"slice": c.slice, "technique": c.technique, "measured_s": c.measured_s,
                       "predicted_s": c.predicted_s, "error": c.error, "fold": c.fold, "metric": c.metric}
                      for c in self.cells],
            "folds": [{"name": f.name, "held_out": f.held_out, "train_rms_log_error": f.train_rms_log_error,
                       "fitted": f.fitted, "warnings": f.warnings, "seconds": f.seconds} for f in self.folds],
        }


def fitted_summary(fitted) -> dict:
    """A fold's fitted values for its report; an unknown 1-sigma (not identifiable, at a bound) is None,
    never NaN: the report is printed as JSON."""
    return {f.param.name: {"value": f.value, "sigma_log": f.sigma_log if math.isfinite(f.sigma_log) else None,
                           "unit": f.param.unit, "note": f.note} for f in fitted}


def folds(cases: list[RunCase], kinds: tuple[str, ...]) -> list[tuple[str, str, str, list[int], list[int]]]:
    """(name, kind, held out, train indices, test indices)."""
    out = []
    whole = [i for i, c in enumerate(cases) if not c.hosts]  # runs on the whole slice (Table II)
    if "loto" in kinds:
        for t in [t for t in STUDY_ORDER if any(c.technique == t for c in cases)]:
            test = [i for i in whole if cases[i].technique == t]
            out.append((f"without {t}", "loto", t, [i for i, c in enumerate(cases) if c.technique != t], test))
    if "loso" in kinds:
        for s in dict.fromkeys(c.slice_key for c in cases):
            test = [i for i in whole if cases[i].slice_key == s]
            out.append((f"without {s}", "loso", s, [i for i, c in enumerate(cases) if c.slice_key != s], test))
    if "single-vm" in kinds:
        test = [i for i in range(len(cases)) if i not in whole]
        if test:
            out.append(("without the single-VM runs", "single-vm", "single-VM runs", whole, test))
    return [f for f in out if f[4] and f[3]]


def nominal_links(cases: list[RunCase]) -> list[RunCase]:
    """The cases with every link between sites stripped of inferred values: no per-link window or step
    round trips (the globals apply unless a fold fits them), and the median nominal bandwidth of the
    slices' links in place of one that differs from it (a bandwidth inferred from the measurements)."""
    import statistics


    slices = {c.slice_key: c.cluster for c in cases}
    nominal = [link.bandwidth_bps for cl in slices.values() for link in wan_links(cl)]
    if not nominal:  # slices of one site each: no link between sites to strip
        return list(cases)
    nominal_bps = statistics.median(nominal)
    out = []
    for c in cases:
        change = set(map(id, wan_links(c.cluster)))
        links = tuple(replace(link, window_bytes=None, step_rtts=None, bandwidth_bps=nominal_bps)
                      if id(link) in change else link for link in c.cluster.links)
        out.append(replace(c, cluster=replace(c.cluster, links=links)))
    return out


def run_fold(cases: list[RunCase], params_path: str | None, name: str, kind: str, held_out: str,
             train: list[int], test: list[int], max_nfev: int, free_options: dict | None = None) -> FoldResult:
    started = time.perf_counter()
    base = load_params(params_path)
    train_cases = [cases[i] for i in train]
    # per-link values only for the slices being fitted: a LOSO slice keeps its scenario's link
    free = default_free(train_cases, base, fit_links={c.slice_key for c in train_cases}, **(free_options or {}))
    result = fit(train_cases, free, base, max_nfev=max_nfev)
    predicted = predict_with(result, [cases[i] for i in test])
    cells = [Cell(r.case.slice_key, r.case.label.partition("/")[2], r.measured, r.predicted, name, r.case.metric)
             for r in predicted]
    return FoldResult(name, kind, held_out, cells, result.rms_log_error, fitted_summary(result.fitted), result.warnings,
                      time.perf_counter() - started)


def _run_fold_args(args) -> FoldResult:
    return run_fold(*args)


KINDS = ("loto", "loso", "single-vm")


def crossval(cases: list[RunCase], *, params_path: str | None = None, kinds: tuple[str, ...] = KINDS,
             workers: int | None = None, max_nfev: int = 25, progress=None, strip_links: bool = True,
             free_options: dict | None = None) -> dict[str, Report]:
    """free_options: passed to default_free (step_rtts, extra). strip_links: see nominal_links."""
    if strip_links:
        cases = nominal_links(cases)
    jobs = [(cases, params_path, name, kind, held, train, test, max_nfev, free_options)
            for name, kind, held, train, test in folds(cases, kinds)]
    if not jobs:
        raise GeosimError(f"nothing to cross-validate in {len(cases)} record(s): no fold holds out a record the rest "
                          "can predict (loto needs two techniques on a slice, loso two slices, single-vm a run on "
                          "one VM)")
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    reports = {k: Report(k) for k in kinds}
    started = time.perf_counter()
    if progress:
        progress(f"crossval: {len(jobs)} fits on {workers} worker(s)")
    if workers == 1:
        results = map(_run_fold_args, jobs)
    else:
        # workers start clean (forkserver) rather than forked: the command's progress thread may hold
        # stderr's lock at the moment of a fork, and a forked worker would wait on that copy forever
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
        results = pool.map(_run_fold_args, jobs)
    try:
        for done, r in enumerate(results, start=1):
            reports[r.kind].folds.append(r)
            if progress:
                errors = ", ".join(f"{c.slice}/{c.technique} {c.error:+.0%}" for c in r.cells)
                progress(f"  [{done}/{len(jobs)}] {r.kind} {r.name}: fit rms log error {r.train_rms_log_error:.3f} "
                         f"in {r.seconds:.0f} s; held out: {errors}  ({time.perf_counter() - started:.0f} s)")
    finally:
        if workers > 1:
            pool.shutdown(cancel_futures=True)
    return reports
