"""Benchmark: the full cross-validation on the study's Table II (4 LOTO + 5 LOSO fits).

    /work/venv/bin/python bench/bench_calibrate.py [--workers N] [--plot crossval.png]

Prints each fold as it finishes, the per-cell errors, median/worst errors, whether
the technique order is right on each slice, and the wall time. Not a test: the
numbers are what docs/calibrate.md reports.
"""

from __future__ import annotations

import argparse
import time

from calibrate.cases import cases_from_records
from calibrate.cli import print_report
from calibrate.crossval import crossval
from calibrate.fit import default_free, fit
from calibrate.importers import study_records
from geosim.params import load_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--plot", default="")
    parser.add_argument("--max-evaluations", type=int, default=25)
    args = parser.parse_args()
    cases = cases_from_records(study_records(), "fabric-slm-2026")

    started = time.perf_counter()
    base = load_params()
    full = fit(cases, default_free(cases, base, fit_links={c.slice_key for c in cases}), base,
               max_nfev=args.max_evaluations)
    print(f"in-sample fit on all 20 cells: rms log error {full.rms_log_error:.3f}, median |error| "
          f"{full.median_abs_error:.1%}, {full.evaluations} evaluations, {full.predictions} simulations, "
          f"{full.seconds:.0f} s")
    for f in full.fitted:
        print(f"  {f.param.name:<38} {f.value:>10.4g} {f.param.unit:<7} sigma_log {f.sigma_log:.3g} {f.note}")

    reports = crossval(cases, workers=args.workers, max_nfev=args.max_evaluations, progress=print)
    for report in reports.values():
        print_report(report)
    if args.plot:
        from calibrate.plot import plot_predicted_vs_measured

        plot_predicted_vs_measured({k: [(c.slice, c.technique, c.measured_s, c.predicted_s) for c in r.cells]
                                    for k, r in reports.items()}, args.plot)
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
