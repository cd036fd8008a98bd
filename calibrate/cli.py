"""geosim calibrate: import measured runs, fit the simulator to them, cross-validate on the study.

    geosim calibrate import study --records-out runs.jsonl
    geosim calibrate import alpa-tsv results.tsv --scenario utah-gpn --global-batch 8 --records-out runs.jsonl
    geosim calibrate import alpa-log train.log --scenario utah-gpn --technique pipeshard --model gpt2m --records-out runs.jsonl
    geosim calibrate fit --records runs.jsonl --out fitted.toml [--scenarios-out fitted-scenarios/]
    geosim calibrate crossval [--records runs.jsonl] [--json] [--plot crossval.png]
    geosim calibrate check runs.jsonl [--params fitted.toml] [--json]
    geosim calibrate wan-public [PROFILES.csv] [--params fitted.toml] [--json]

Nothing is written until everything has been read, fitted and checked; files are
replaced atomically, so a failed command leaves no half-written output.

Over 400 lines: the calibrate subcommands (import, fit, crossval, check, wan-public) and their
printing, one module as every command is one module.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

from geosim.calibrate import OVERHEAD_KINDS
from geosim.cli.common import LAYOUT_BOUNDS, WORKLOAD_BOUNDS, add_layout_arguments
from geosim.cli.vocabulary import add_renamed, deprecate
from geosim.base.errors import GeosimError, require
from geosim.studies.reference import study_records
from geosim.base.validate import count

HELP = "fit the simulator to measured runs (study, Alpa, live) and cross-validate it on the study's Table II"
IMPORT_KINDS = ("study", "alpa-tsv", "alpa-console", "alpa-log", "live")
# the free set cross-validation uses (docs/guide/calibrate.md): the collective step's round trips
# globally (per-link values fitted on three techniques extrapolate worse to the fourth), one
# per-iteration overhead shared by all techniques (a held-out technique has no overhead of its own to
# fit), and no technique-only scalar (ZeRO-2's gather width is a fact of what Alpa sends, not a knob)
CROSSVAL_STEP_RTTS = "global"
CROSSVAL_ALSO = "transport.p2p_handshake_rtts"  # a pipeline stage's send: Alpa's cross-mesh rendezvous
CROSSVAL_OVERHEAD = "shared"
OVERHEAD_HELP = ("per-iteration overhead fitted per technique, once for all techniques (shared), or not at all "
                 "(none: the parameters file's values)")

# every numeric flag's bound, checked before the command runs (geosim/base/validate.py check_flags)
FLAG_BOUNDS = {
    "calibrate import": {"--global-batch": WORKLOAD_BOUNDS["--global-batch"],
                         "--microbatches": WORKLOAD_BOUNDS["--microbatches"], **LAYOUT_BOUNDS},
    "calibrate fit": {"--max-evaluations": count(10_000, "least-squares iterations; 25-40 converge")},
    "calibrate crossval": {"--workers": count(1024, "parallel fits"),
                           "--max-evaluations": count(10_000, "least-squares iterations; 25-40 converge")},
}


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("import", help="convert measurements into a run-records file (JSON Lines, geosim.run/1)")
    p.add_argument("kind", choices=IMPORT_KINDS, help="study: Table II of the study; alpa-tsv: Alpa's benchmark "
                   "result file (its TSV or its console output, whichever the file is); alpa-console: the same; "
                   "alpa-log: Alpa's GPT-2 training log; live: records written by `geosim live`")
    p.add_argument("file", nargs="?", help="the file to import (not for 'study')")
    p.add_argument("--records-out", dest="out", metavar="RUNS.jsonl",
                   help="run-records file to write (replaced atomically; required)")
    add_renamed(p, "--out", "--records-out", dest="out")
    p.add_argument("--append", action="store_true",
                   help="append to --records-out (under its lock) the records not already in it, instead of "
                        "replacing it")
    p.add_argument("--scenario", help="the slice the Alpa runs ran on (built-in name or scenario file)")
    p.add_argument("--hosts", metavar="VMS",
                   help="VMs of the slice the runs used, names joined by + (vm1+vm2) or 'all' (default: all)")
    p.add_argument("--technique", help="alpa-log: the technique the run used")
    p.add_argument("--model", help="alpa-log: the model (catalog name)")
    p.add_argument("--global-batch", type=int, help="sequences per iteration, if the file does not say")
    p.add_argument("--microbatches", type=int, help="alpa-log: pipeline microbatches")
    add_layout_arguments(p)  # alpa-log: the layout the run used, written into its record's options
    p.add_argument("--json", action="store_true", help="print what was written as JSON")

    p = sub.add_parser("fit", help="fit parameters to run records; report fit quality and uncertainties")
    p.add_argument("--records", metavar="RUNS.jsonl", help="run-records file (JSON Lines) to fit to (required)")
    p.add_argument("old_records", nargs="?", metavar="RECORDS", help=argparse.SUPPRESS)  # the old positional
    p.add_argument("--out", required=True, help="fitted parameters file to write (what `geosim --params` reads)")
    p.add_argument("--params", help="starting parameters (default: the shipped defaults)")
    p.add_argument("--links", choices=("auto", "bandwidth", "window", "none"), default="auto",
                   help="per-link value fitted for each slice whose link capacity is unknown: auto = what limits "
                        "the link (line rate on a LAN, TCP window over a WAN); none = global transport only")
    p.add_argument("--known-links", default="", help="comma-separated slices whose link capacity is known (not fitted)")
    p.add_argument("--step-rtts", choices=("link", "global", "none"), default="link",
                   help="the round trips a collective step waits for: fitted globally and per link (default), "
                        "globally only, or not at all")
    p.add_argument("--also", default="", metavar="KEYS",
                   help="comma-separated global scalars to fit as well, e.g. "
                        "transport.p2p_handshake_rtts,zero2.gather_bytes_per_param")
    p.add_argument("--overhead", choices=OVERHEAD_KINDS, default="technique",
                   help=OVERHEAD_HELP + " (default %(default)s)")
    p.add_argument("--fit-workload", action="store_true",
                   help="also fit tokens per epoch where the records do not give it (reported as fitted)")
    p.add_argument("--scenarios-out", metavar="DIR", help="also write each fitted slice's scenario file with its "
                                                          "fitted link, for `geosim predict --scenario`")
    p.add_argument("--max-evaluations", type=int, default=25, help="least-squares iterations (default %(default)s)")
    p.add_argument("--json", action="store_true", help="machine-readable report")

    p = sub.add_parser("check", help="predict every record with the given parameters (no fitting): predicted "
                                     "against measured time per iteration, TFLOP/s and peak memory")
    p.add_argument("--records", metavar="RUNS.jsonl",
                   help="run-records file (JSON Lines), or 'study' for the study's measurements (required)")
    p.add_argument("old_records", nargs="?", metavar="RECORDS", help=argparse.SUPPRESS)  # the old positional
    p.add_argument("--params", help="parameters to predict with (default: the shipped defaults)")
    p.add_argument("--json", action="store_true", help="machine-readable report")

    p = sub.add_parser("wan-public", help="the TCP model against hivemind-multi-cloud's public iperf profiles "
                                          "(VLDB'24): predicted against measured throughput per host pair and streams")
    p.add_argument("profiles", nargs="?", help="an extract of the profiles (default: the one geosim ships, "
                                               "geosim/data/hivemind-iperf.csv)")
    p.add_argument("--params", help="parameters to predict with (default: the shipped defaults)")
    p.add_argument("--json", action="store_true", help="machine-readable report")

    p = sub.add_parser("crossval", help="leave-one-technique-out and leave-one-slice-out on the study's Table II")
    p.add_argument("--records", metavar="RUNS.jsonl", help="run-records file (default: the study's measurements)")
    p.add_argument("old_records", nargs="?", metavar="RECORDS", help=argparse.SUPPRESS)  # the old positional
    p.add_argument("--params", help="starting parameters (default: the shipped defaults)")
    p.add_argument("--kind", choices=("all", "both", "loto", "loso", "single-vm"), default="all",
                   help="all: the three; both: loto and loso (default %(default)s)")
    p.add_argument("--plot", default="crossval.png", help="PNG of predicted vs measured (default %(default)s; "
                                                          "'' for none)")
    p.add_argument("--step-rtts", choices=("link", "global", "none"), default=CROSSVAL_STEP_RTTS,
                   help="the round trips a collective step waits for: fitted per link and globally (link), globally "
                        "only (global), or not at all (default %(default)s: per-link values fitted on three "
                        "techniques' cells extrapolate poorly to the fourth)")
    p.add_argument("--also", default=CROSSVAL_ALSO, metavar="KEYS",
                   help="comma-separated global scalars to fit as well (a technique's own only in folds that "
                        "have its cells; default: %(default)s), e.g. zero2.gather_bytes_per_param")
    p.add_argument("--overhead", choices=OVERHEAD_KINDS, default=CROSSVAL_OVERHEAD,
                   help=OVERHEAD_HELP + " (default %(default)s)")
    p.add_argument("--keep-links", action="store_true",
                   help="keep the scenario files' per-link window/step/bandwidth (by default they are stripped: "
                        "values inferred from the same measurements would leak the held-out cells)")
    p.add_argument("--workers", type=int, help="parallel fits (default: one per core)")
    p.add_argument("--max-evaluations", type=int, default=25, help="least-squares iterations per fit (default %(default)s)")
    p.add_argument("--json", action="store_true", help="machine-readable report")


def run(args) -> int:
    return {"import": run_import, "fit": run_fit, "crossval": run_crossval, "check": run_check,
            "wan-public": run_wan_public}[args.action](args)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def old_positional_records(args) -> None:
    """`calibrate fit RECORDS` (the old positional) still works for now, with a deprecation line."""
    if getattr(args, "old_records", None) is not None:
        deprecate(args, "the positional RECORDS is deprecated; use --records RECORDS")
        if args.records is None:
            args.records = args.old_records


# ----------------------------------------------------------------------------- import

def run_import(args) -> int:
    from geosim.cli._progress import Heartbeat

    with Heartbeat("import") as beat:  # a line every few seconds on a large file, whatever stderr is
        return _run_import(args, beat)


def _with_layout(args, records) -> None:
    """The layout flags (--tensor-parallel and its kin) of an alpa-log import: the run's layout, checked
    against its hosts as predict checks one, written into the record's options. Other kinds' files
    say what ran: a layout flag with them is a mistake."""
    from geosim.inputs.case import Case
    from geosim.calibrate.cases import to_case
    from geosim.cli.common import check_layout_techniques, layout_arguments, refuse_layout
    from geosim.inputs.params import default_params
    from geosim.techniques import layout_options

    layout = layout_arguments(args)
    if not layout:
        return
    if args.kind != "alpa-log":
        refuse_layout(args, f"'import {args.kind}' reads what each run used from the file; a layout is for alpa-log")
    check_layout_techniques((records[0].technique,), layout)
    for r in records:
        run = to_case(args.file, r)
        case = Case(run.cluster, run.model, run.workload, default_params())
        r.options = {**(r.options or {}), **layout_options(r.technique, case, run.hosts or tuple(
            h.name for h in run.cluster.hosts), **layout)}


def _run_import(args, beat) -> int:
    from geosim.calibrate import importers
    from geosim.calibrate.cases import read_runs, to_case
    from geosim.base.fileio import check_output_path
    from geosim.inputs.records import append_records, scenario_for_file, write_records

    if not args.out:
        raise GeosimError("required: the run-records file to write", source="--records-out")
    out = check_output_path(args.out, "--records-out")
    hosts = [h for h in args.hosts.replace("+", ",").split(",") if h] if args.hosts and args.hosts != "all" else None
    if args.kind != "study" and not args.file:
        raise GeosimError(f"'import {args.kind}' needs the file to import", source="calibrate import")
    for flag in ("global_batch", "microbatches"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise GeosimError(f"must be >= 1, got {getattr(args, flag)}", source=f"--{flag.replace('_', '-')}")
    if args.kind.startswith("alpa") and not args.scenario:
        raise GeosimError("Alpa's files do not say which slice they ran on: give --scenario", source=args.file)
    # a scenario file is stored relative to the records file, so a fit finds it from any directory
    scenario = scenario_for_file(args.scenario, out) if args.scenario else None
    skipped: list[str] = []
    beat.phase = f"reading {args.file or 'the study'}"
    if args.kind == "study":
        records = study_records()
    elif args.kind in ("alpa-tsv", "alpa-console"):
        records = importers.alpa_benchmark_records(args.file, args.scenario, global_batch=args.global_batch,
                                                   hosts=hosts, skipped=skipped)
    elif args.kind == "alpa-log":
        for option in ("technique", "model"):
            if not getattr(args, option):
                raise GeosimError(f"Alpa's log does not say the {option}: give --{option}", source=args.file)
        records = [importers.alpa_log_record(args.file, args.scenario, args.technique, args.model,
                                             global_batch=args.global_batch, microbatches=args.microbatches,
                                             hosts=hosts)]
    else:
        records = [r for _, r in read_runs(args.file)]
    _with_layout(args, records)
    # every record must be one the simulator can run: scenario, GPUs, model, technique, workload
    for i, r in enumerate(records):
        beat.phase = f"checking record {i + 1:,} of {len(records):,}"
        to_case(f"{args.file or 'study'}#{i + 1}", r)
    beat.phase = f"writing {len(records):,} records"
    for r in records:  # scenario files as the records file will find them
        if r.scenario is not None:
            r.scenario = scenario if args.kind.startswith("alpa") else scenario_for_file(r.scenario, out)
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    for r in records:  # a smaller run of a multi-run log: say which GPUs it is predicted on
        if r.cluster is not None and "predicted on the first" in (r.note or ""):
            print(r.note.split(": ", 1)[0] + ": " + r.note.rsplit("; ", 1)[-1], file=sys.stderr)
    # under --json stdout is the one document: the line saying what was written goes to stderr
    said = sys.stderr if args.json else sys.stdout
    if args.append:
        added, duplicates = append_records(out, records)
        print(f"appended {added} record(s) to {out}" + (f" ({duplicates} already there)" if duplicates else ""),
              file=said)
    else:
        write_records(out, records)
        print(f"wrote {len(records)} record(s) to {out}", file=said)
    if args.json:
        print(json.dumps({"out": str(out), "written": len(records), "skipped": skipped,
                          "records": [{"run_id": r.run_id, "technique": r.technique, "model": r.model,
                                       "scenario": r.scenario, "status": r.status} for r in records]},
                         indent=2, allow_nan=False))
    return 0


# ----------------------------------------------------------------------------- check

def run_check(args) -> int:
    from geosim.calibrate.cases import cases_from_records, load_cases
    from geosim.calibrate.check import check, interrupted, print_table, summary
    from geosim.cli._progress import Every
    from geosim.inputs.params import load_params

    old_positional_records(args)
    if args.records is None:
        raise GeosimError("required: the run-records file to check ('study': the study's measurements)",
                          source="--records")
    params = load_params(args.params)
    if args.records == "study":
        cases = cases_from_records(study_records(), "study")
    else:
        cases = load_cases(args.records)
    if not cases:
        raise GeosimError("no records in file (empty)", source=args.records)
    # an interrupted run (0 steps, or a status other than ok or out-of-memory) measured nothing to
    # compare: fit leaves it out, and so does check
    skipped = [c for c in cases if interrupted(c)]
    cases = [c for c in cases if not interrupted(c)]
    if skipped:
        print(f"skipped {len(skipped)} interrupted record(s) (0 steps, or not ok), as calibrate fit does",
              file=sys.stderr)
    if not cases:
        raise GeosimError(f"every record was interrupted ({len(skipped)}): nothing to compare", source=args.records)
    ticker = Every("check", "records")
    rows = check(cases, params, progress=lambda message: ticker.message(message))
    ticker.close(f"{len(rows):,} records checked")
    if args.json:
        print(json.dumps({"params": args.params or "defaults", "records": [r.to_dict() for r in rows],
                          "skipped": [{"where": c.where, "label": c.label, "status": c.status} for c in skipped],
                          "summary": summary(rows)}, indent=2, default=str, allow_nan=False))
        return 0
    print_table(rows, args.params or "the shipped parameters")
    return 0


def run_wan_public(args) -> int:
    from geosim.calibrate import wan_public
    from geosim.inputs.params import load_params

    profiles, dropped = wan_public.read_profiles(args.profiles)
    if not profiles:
        raise GeosimError("no profile in the file", source=args.profiles)
    rows = wan_public.compare(profiles, load_params(args.params))
    if args.json:
        print(json.dumps(wan_public.to_json(rows, dropped), indent=2, allow_nan=False))
        return 0
    print("\n".join(wan_public.table_lines(rows, dropped)))
    return 0


# ----------------------------------------------------------------------------- fit

def run_fit(args) -> int:
    require("scipy", "calibrate", "geosim calibrate fit")
    from geosim.calibrate.cases import load_cases
    from geosim.calibrate.fit import fit
    from geosim.calibrate.free import default_free
    from geosim.inputs.params import load_params

    from geosim.base.fileio import check_output_path

    old_positional_records(args)
    if not args.records:
        raise GeosimError("required: the run records to fit to", source="--records")
    check_output_path(args.out, "--out")  # before the fit, not after it
    if args.scenarios_out:
        parent = Path(args.scenarios_out).resolve().parent
        if not parent.is_dir() or (Path(args.scenarios_out).exists() and not Path(args.scenarios_out).is_dir()):
            raise GeosimError("cannot make this directory (its parent is missing, or it is a file)",
                              source="--scenarios-out")
    if args.max_evaluations < 1:
        raise GeosimError(f"must be >= 1, got {args.max_evaluations}", source="--max-evaluations")
    cases = load_cases(args.records)
    base = load_params(args.params)
    known = {s.strip() for s in args.known_links.split(",") if s.strip()}
    unknown = sorted(known - {c.slice_key for c in cases})
    if unknown:  # a misspelt slice would silently leave its link fitted
        raise GeosimError(f"no record is on {', '.join(map(repr, unknown))} (the records' slices: "
                          f"{', '.join(sorted({c.slice_key for c in cases}))})", source="--known-links")
    slices = {c.slice_key for c in cases} - known
    free = default_free(cases, base, fit_links=set() if args.links == "none" else slices,
                        link_kind="auto" if args.links == "none" else args.links, fit_workload=args.fit_workload,
                        step_rtts=None if args.step_rtts == "none" else args.step_rtts, extra=tuple(k for k in args.also.split(",") if k),
                        overhead=args.overhead)
    if not args.json:
        progress(f"fitting {len(free)} parameters to {sum(c.metric is not None for c in cases)} measured runs "
                 f"({len(cases)} records) from {args.records}")
    from geosim.cli._progress import Heartbeat

    # each evaluation predicts every record: thousands of records are minutes between its own lines
    with Heartbeat("fit", f"fitting {len(free)} parameters to {len(cases)} records"):
        result = fit(cases, free, base, progress=None if args.json else progress, max_nfev=args.max_evaluations)
    fitted_table = fitted_summary(result, args.records)
    scenario_files = fitted_scenarios(result, cases, args.scenarios_out) if args.scenarios_out else {}
    from geosim.inputs.params import write_params

    write_params(result.params, args.out, fitted=fitted_table)
    for path, text in scenario_files.items():
        write_atomically(path, text)
    if args.json:
        print(json.dumps(fit_to_dict(result, args.out, list(scenario_files)), indent=2, default=str, allow_nan=False))
    else:
        print_fit(result, args.out, list(scenario_files))
    return 0


def fitted_summary(result, records_path: str) -> dict:
    """The [fitted] table: what the file was fitted on, how well, and each value's uncertainty."""
    table = {
        "on": [f"{c.case.record.source}:{c.case.label}" for c in result.cases],
        "records": str(records_path),
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "method": "scipy.optimize.least_squares (trf) on log(predicted/measured), parameters in log space, "
                  "1-sigma from the Jacobian",
        "rms_log_error": round(result.rms_log_error, 5),
        "median_abs_error": round(result.median_abs_error, 5),
        "sigma_log": {f.param.name: round(f.sigma_log, 5) if math.isfinite(f.sigma_log) else 1e9
                      for f in result.fitted},
        "memory": {"right": result.memory["right"], "total": result.memory["total"]},
    }
    if result.covariance:
        table["covariance"] = result.covariance
    if result.links:
        table["links"] = {s: {k: round(v, 6) for k, v in d.items()} for s, d in result.links.items()}
    if result.workload:
        table["workload"] = dict(result.workload)
    if result.warnings:
        table["warnings"] = list(result.warnings)
    return table


def fitted_scenarios(result, cases, directory: str) -> dict[Path, str]:
    """Each fitted slice's scenario file with the fitted bandwidth/window on its links between sites."""
    import tomli_w

    from geosim.base.input_limits import loads_toml
    from geosim.inputs.scenario import read_text

    out: dict[Path, str] = {}
    names: set[str] = set()
    for slice_key, values in result.links.items():
        case = next(c for c in cases if c.slice_key == slice_key)
        if case.record.cluster is not None:
            doc = dict(case.record.cluster)
        else:
            doc = loads_toml(read_text(Path(case.cluster.source)), case.cluster.source)
        sites = {h["name"]: h["site"] for h in doc.get("hosts", [])}
        for link in doc.get("links", []):
            a, b = (sites.get(end, end) for end in link["between"])
            if a != b or len(doc.get("links", [])) == 1:
                for key, value in values.items():  # bandwidth_gbps, window_mib, step_rtts
                    link[key] = round(value, 6)
        doc["description"] = f"{slice_key} with link values fitted by `geosim calibrate fit` ({values})"
        name = safe_file_name(slice_key, names)
        names.add(name)
        out[Path(directory) / f"{name}.toml"] = tomli_w.dumps(doc)
    Path(directory).mkdir(exist_ok=True)  # its parent was checked before the fit: never made silently
    return out


def safe_file_name(name: str, taken: set[str] = frozenset()) -> str:
    """A slice's name as a file name inside the output directory: a record names its cluster, and
    that name must not pick the path ('../../x', '/etc/y', '.hidden' all stay inside, renamed)."""
    import re

    base = re.sub(r"[^a-z0-9._-]+", "_", name.lower()).lstrip("._-")[:80] or "slice"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}-{n}", n + 1
    return candidate


def write_atomically(path: Path, text: str) -> None:
    from geosim.base.fileio import write_atomic

    write_atomic(path, text)


def fmt_value(v: float) -> str:
    return f"{v:.4g}" if math.isfinite(v) else "inf"


def print_fit(result, out: str, scenario_files: list) -> None:
    print(f"\nfitted {len(result.fitted)} parameters to {len(result.cases)} measured runs in {result.seconds:.0f} s "
          f"({result.evaluations} evaluations, {result.predictions} simulations)")
    print(f"\n  {'parameter':<38} {'value':>10} {'unit':<7} {'1-sigma range':>23}  note")
    for f in result.fitted:
        rng = f"{fmt_value(f.low)} .. {fmt_value(f.high)}" if math.isfinite(f.sigma_log) else "unknown"
        print(f"  {f.param.name:<38} {fmt_value(f.value):>10} {f.param.unit:<7} {rng:>23}  {f.note}")
    print(f"\n  {'run':<30} {'measured':>12} {'predicted':>12} {'error':>7}")
    for c in result.cases:
        unit = "s" if c.case.metric.endswith("_s") else c.case.metric
        print(f"  {c.case.label:<30} {c.measured:>12.4g} {c.predicted:>12.4g} {c.error:>+7.1%}  {unit}")
    print(f"\n  fit quality: rms log error {result.rms_log_error:.3f}, median |error| {result.median_abs_error:.1%}, "
          f"worst {max(abs(c.error) for c in result.cases):.1%}")
    m = result.memory
    print(f"  memory outcomes right: {m['right']} of {m['total']} ({m['note']})")
    for line in result.excluded:
        print(f"  excluded: {line}")
    for w in result.warnings:
        print(f"  warning: {w}")
    print(f"\nwrote {out}" + "".join(f", {p}" for p in scenario_files))


def fit_to_dict(result, out: str, scenario_files: list) -> dict:
    return {
        "out": out, "scenario_files": [str(p) for p in scenario_files], "seconds": result.seconds,
        "parameters": [{"name": f.param.name, "value": f.value, "unit": f.param.unit,
                        "sigma_log": f.sigma_log if math.isfinite(f.sigma_log) else None,
                        "low": f.low, "high": f.high if math.isfinite(f.high) else None, "note": f.note}
                       for f in result.fitted],
        "runs": [{"record": c.case.where, "label": c.case.label, "metric": c.case.metric, "measured": c.measured,
                  "predicted": c.predicted, "error": c.error} for c in result.cases],
        "rms_log_error": result.rms_log_error, "median_abs_error": result.median_abs_error,
        "memory": result.memory, "excluded": result.excluded, "warnings": result.warnings,
        "links": result.links, "workload": result.workload,
    }


# ----------------------------------------------------------------------------- crossval

def run_crossval(args) -> int:
    require("scipy", "calibrate", "geosim calibrate crossval")
    from geosim.calibrate.cases import cases_from_records, load_cases
    from geosim.calibrate.crossval import crossval

    if args.plot:
        require("matplotlib", "calibrate", "geosim calibrate crossval")
        from geosim.base.fileio import check_output_path

        check_output_path(args.plot, "--plot")  # a directory, a read-only or missing one: now, not after the fits
    if args.workers is not None and not 1 <= args.workers <= 1024:
        raise GeosimError(f"must be in 1..1024, got {args.workers}", source="--workers")
    if args.max_evaluations < 1:
        raise GeosimError(f"must be >= 1, got {args.max_evaluations}", source="--max-evaluations")
    old_positional_records(args)
    cases = load_cases(args.records) if args.records else cases_from_records(study_records(), "fabric-slm-2026")
    cases = [c for c in cases if c.metric is not None]
    if not cases:
        raise GeosimError("no measured runs to cross-validate on", source=args.records)
    kinds = {"all": ("loto", "loso", "single-vm"), "both": ("loto", "loso")}.get(args.kind, (args.kind,))
    options = {"step_rtts": None if args.step_rtts == "none" else args.step_rtts,
               "extra": tuple(k for k in args.also.split(",") if k), "overhead": args.overhead}
    from geosim.cli._progress import Heartbeat

    with Heartbeat("crossval", f"fitting and predicting {len(cases)} records"):  # a fit can be minutes of silence
        try:
            reports = _crossval(args, cases, kinds, options)
        except GeosimError as exc:  # about the records as a whole: named by their file
            if exc.source is not None:
                raise
            raise GeosimError(exc.problem, source=args.records or "the study's records", key=exc.key) from None
    empty = [k for k, r in reports.items() if not r.cells]  # no fold held anything out that could be predicted
    if len(empty) == len(reports):
        raise GeosimError(f"nothing to cross-validate in {len(cases)} record(s): no fold holds out a record the rest "
                          "can predict (loto needs two techniques on a slice, loso two slices, single-vm a run on "
                          "one VM)", source=args.records or "the study's records")
    for kind in empty:
        print(f"geosim calibrate crossval: note: {kind}: no fold holds out a record the rest can predict; left out",
              file=sys.stderr)
        del reports[kind]
    if args.plot:
        from geosim.calibrate.plot import plot_predicted_vs_measured

        plot_predicted_vs_measured({k: [plotted(c) for c in r.cells] for k, r in reports.items()}, args.plot)
    if args.json:
        print(json.dumps({k: r.to_dict() for k, r in reports.items()} | {"plot": args.plot or None}, indent=2, allow_nan=False))
        return 0
    for report in reports.values():
        print_report(report)
    if args.plot:
        print(f"\nwrote {args.plot}")
    return 0


def plotted(cell) -> tuple[str, str, float, float]:
    """(slice, technique, measured_s, predicted_s) of a crossval cell for the plot: a single-VM run's technique
    without its '@vm', a throughput turned into the time it means (the error kept)."""
    technique = cell.technique.partition("@")[0]
    if cell.metric in ("tflops_per_gpu", "tokens_per_s"):
        seconds = 3600.0  # any scale: on a log-log plot only the ratio to the diagonal shows
        return cell.slice, technique, seconds, seconds * (1 + cell.error)
    return cell.slice, technique, cell.measured_s, cell.predicted_s


def _crossval(args, cases, kinds, options):
    from geosim.calibrate.crossval import crossval

    return crossval(cases, params_path=args.params, kinds=kinds, workers=args.workers,
                    max_nfev=args.max_evaluations, progress=progress, strip_links=not args.keep_links,
                    free_options=options)


def print_report(report) -> None:
    title = {"loto": "leave one technique out (fit on the other three, predict the held-out technique)",
             "loso": "leave one slice out (fit on four slices, predict the fifth from its RTT alone)",
             "single-vm": "leave the single-VM runs out (fit on Table II alone, predict the runs on one VM)",
             }[report.kind]
    print(f"\n{title}")
    print(f"  {'slice':<11} {'technique':<12} {'measured':>12} {'predicted':>12} {'error':>8}")

    def shown(value: float, metric: str) -> str:
        return f"{value:>7.2f} TF/s" if metric == "tflops_per_gpu" else f"{value / 60:>8.0f} min"

    for c in sorted(report.cells, key=lambda c: (c.slice, c.technique)):
        print(f"  {c.slice:<11} {c.technique:<12} {shown(c.measured_s, c.metric)} {shown(c.predicted_s, c.metric)} "
              f"{c.error:>+8.1%}")
    if report.kind == "single-vm":
        print(f"  worst {abs(report.worst.error):.1%} ({report.worst.slice} {report.worst.technique}); "
              f"errors are in time (a throughput's turned round)")
        return
    worst = report.worst
    print(f"  median |error| {report.median_abs_error:.1%}; worst {abs(worst.error):.1%} "
          f"({worst.slice} {worst.technique})")
    order = report.order_right()
    print("  technique order right: " + ", ".join(f"{s} {'yes' if ok else 'NO'}" for s, ok in order.items())
          + f" ({sum(order.values())} of {len(order)})")
