"""Benchmark: the full cross-validation on the study's Table II (4 LOTO + 5 LOSO fits).

    .venv/bin/python bench/bench_calibrate.py [--workers N] [--plot crossval.png]
        [--step-rtts global|link|none] [--also zero2.gather_bytes_per_param,...]
        [--overhead technique|shared|none]

First an in-sample fit on all 20 cells (the slices' links stripped of inferred values,
per-link window and step round trips fitted): its global values are candidate defaults.
Then each fold as it finishes, the per-cell errors, median/worst errors, whether the
technique order is right on each slice, and the wall time. Not a test: the numbers are
what README: Calibrating geosim reports.
"""

from __future__ import annotations

import argparse
import time

from geosim.calibrate.cases import cases_from_records
from geosim.calibrate.cli import CROSSVAL_ALSO, CROSSVAL_OVERHEAD, CROSSVAL_STEP_RTTS, print_report
from geosim.calibrate.crossval import crossval, nominal_links
from geosim.calibrate.fit import fit
from geosim.calibrate.free import default_free
from geosim.studies.reference import study_records
from geosim.inputs.params import load_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--plot", default="")
    parser.add_argument("--max-evaluations", type=int, default=25)
    parser.add_argument("--step-rtts", choices=("global", "link", "none"), default=CROSSVAL_STEP_RTTS)
    parser.add_argument("--also", default=CROSSVAL_ALSO)
    parser.add_argument("--overhead", choices=("technique", "shared", "none"), default=CROSSVAL_OVERHEAD)
    args = parser.parse_args()
    cases = cases_from_records(study_records(), "fabric-slm-2026")
    options = {"step_rtts": None if args.step_rtts == "none" else args.step_rtts,
               "extra": tuple(k for k in args.also.split(",") if k), "overhead": args.overhead}

    started = time.perf_counter()
    base = load_params()
    stripped = nominal_links(cases)
    # in sample, every parameter the data can inform: per-link step round trips and ZeRO-2's gather width too
    full = fit(stripped, default_free(stripped, base, fit_links={c.slice_key for c in cases}, step_rtts="link",
                                      extra=("zero2.gather_bytes_per_param", "transport.p2p_handshake_rtts")),
               base, max_nfev=max(args.max_evaluations, 40))
    print(f"in-sample fit on all 20 cells: rms log error {full.rms_log_error:.3f}, median |error| "
          f"{full.median_abs_error:.1%}, {full.evaluations} evaluations, {full.predictions} simulations, "
          f"{full.seconds:.0f} s")
    for f in full.fitted:
        print(f"  {f.param.name:<38} {f.value:>10.4g} {f.param.unit:<7} sigma_log {f.sigma_log:.3g} {f.note}")
    for c in full.cases:
        print(f"  {c.case.label:<24} measured {c.measured / 60:>6.0f} min predicted {c.predicted / 60:>6.0f} min "
              f"{c.error:>+7.1%}")

    reports = crossval(cases, workers=args.workers, max_nfev=args.max_evaluations, progress=print,
                       free_options=options)
    for report in reports.values():
        print_report(report)
    if args.plot:
        from geosim.calibrate.plot import plot_predicted_vs_measured

        plot_predicted_vs_measured({k: [(c.slice, c.technique, c.measured_s, c.predicted_s) for c in r.cells]
                                    for k, r in reports.items()}, args.plot)
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
