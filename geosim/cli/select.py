"""geosim select: the study's Algorithm 1 on predicted, measured or live probes, every step shown."""

from __future__ import annotations

import shlex
import sys

from dataclasses import replace

from geosim.inputs.case import Case
from geosim.cli.common import (add_time_limit_argument, add_memory_parts_argument, memory_by_part_line, DELTA_BOUNDS, LIVE_RUN_SIZE_BOUNDS, DRAWS_BOUNDS, LAYOUT_BOUNDS, WORKLOAD_BOUNDS, ESTIMATE_NOTE, MEASURED_NOTE, add_json_argument, add_layout_arguments, add_renamed,
                               answer_envelope, add_sweep_rtt_argument, add_technique_argument, add_workload_arguments,
                               check_layout_plannable, check_layout_techniques, chosen_techniques, layout_arguments,
                               load_case, load_params_arg, print_json, refuse_layout, scenario_names,
                               add_progress_arguments, check_progress_arguments, refuse_progress, same_progress,
                               workload_note, layout_choices)
from geosim.cli.plan import print_answer_vs_rtt
from geosim.cli.predict import describe_cluster
from geosim.base.errors import GeosimError
from geosim.inputs.records import read_records
from geosim.studies.asked import asked_candidates, default_host_sets, plan_notes
from geosim.studies.reference import study_records
from geosim.studies.select import DEFAULT_DELTA, LiveProbes, MeasuredProbes, PredictedProbes, Selection, algorithm1
from geosim.techniques import label
from geosim.base.units import parse_numbers

HELP = "choose a technique with the study's Algorithm 1 (probes predicted, measured or run live)"

# every numeric flag's bound, checked before the command runs (geosim/base/validate.py check_flags); --steps and
# --gpus-per-host drive live probes, bounded as live run's
FLAG_BOUNDS = {"select": {
    **WORKLOAD_BOUNDS, **DRAWS_BOUNDS, **DELTA_BOUNDS, **LAYOUT_BOUNDS,
    "--probe-epochs": WORKLOAD_BOUNDS["--epochs"],
    "--steps": LIVE_RUN_SIZE_BOUNDS["--steps"], "--gpus-per-host": LIVE_RUN_SIZE_BOUNDS["--gpus-per-host"]}}


def add_arguments(parser) -> None:
    add_workload_arguments(parser)
    add_technique_argument(parser, "the study's four and the low-communication ones, ranked together for the "
                                   "verdict; Algorithm 1 probes its own four configurations")
    parser.add_argument("--probe-epochs", type=int, default=1,
                        help="epochs each probe trains (the algorithm's epsilon; default %(default)s); --epochs is "
                             "the workload the verdict's time is for")
    parser.add_argument("--delta", type=float, default=DEFAULT_DELTA,
                        help="relative TFLOP/s gap that decides (default %(default)s)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--records", metavar="RUNS.jsonl",
                        help="probe values from run records ('study': the study's measurements)")
    add_renamed(source, "--measured", "--records", dest="records")
    source.add_argument("--live", action="store_true", help="run the probes for real with `geosim live run`")
    live = parser.add_argument_group("live probes")
    live.add_argument("--steps", type=int, help="steps per live probe, instead of --probe-epochs")
    add_renamed(live, "--devices-per-vm", "--gpus-per-host", dest="devices_per_vm", type=int)
    live.add_argument("--gpus-per-host", dest="devices_per_vm", type=int, default=2,
                      help="CPU devices standing for one VM on this machine (default %(default)s)")
    live.add_argument("--records-out", metavar="RUNS.jsonl", help="also append each live probe's run record here")
    live.add_argument("--live-args", default="", help="extra options for `geosim live run`, quoted")
    add_layout_arguments(parser)  # the verdict's ranking plans the layout asked; Algorithm 1 probes its own
    add_progress_arguments(parser)  # what the verdict ranks on, as predict and plan rank
    add_sweep_rtt_argument(parser, "redo the choice (predicted probes) and the ranking's best")
    parser.add_argument("--draws", type=int, metavar="N",
                        help="redo the choice (predicted probes) under N parameter draws from the fit's covariance "
                             "and say how often it wins")
    add_json_argument(parser)
    add_time_limit_argument(parser)
    add_memory_parts_argument(parser)


def make_source(args, scenario_name, cluster, model, workload, params):
    if args.live:
        return LiveProbes(model.name, workload.global_batch, workload.microbatches, epochs=workload.epochs,
                          steps=args.steps, devices_per_vm=args.devices_per_vm, record=args.records_out,
                          extra_args=tuple(shlex.split(args.live_args)), log=lambda line: print(line, file=sys.stderr))
    if args.records:
        study = args.records == "study"
        records = study_records() if study else read_records(args.records)
        return MeasuredProbes(records, cluster, scenario_name, model, workload, args.records,
                              record_hint="runs.jsonl" if study else None)
    return PredictedProbes(cluster, model, workload, params, args.network)


def run(args) -> int:
    from geosim.studies.plan import answer_vs_rtt, make_plan, measured_plan

    if args.probe_epochs <= 0:
        raise GeosimError(f"must be > 0, got {args.probe_epochs}", source="--probe-epochs")
    if args.steps is not None and not args.live:
        raise GeosimError("only live probes take --steps", source="--steps")
    if args.records_out and not args.live:
        raise GeosimError("only live probes write run records (--live)", source="--records-out")
    if args.records_out:
        from geosim.base.fileio import check_output_path

        check_output_path(args.records_out, "--records-out")  # before the probes run, not after
    if args.draws and (args.live or args.records):
        raise GeosimError("--draws varies the simulator's parameters, so it needs predicted probes", source="--draws")
    if args.draws is not None and args.draws < 1:
        raise GeosimError(f"must be >= 1, got {args.draws}", source="--draws")
    if args.sweep_rtt and (args.live or args.records):
        raise GeosimError("--sweep-rtt varies the simulated network, so it needs predicted probes", source="--sweep-rtt")
    rtts = parse_numbers(args.sweep_rtt, "--sweep-rtt") if args.sweep_rtt else None
    techniques = chosen_techniques(args.technique)
    layout = layout_arguments(args)
    check_layout_techniques(techniques, layout)
    check_progress_arguments(args)
    if args.live or args.records:
        refuse_layout(args, "the verdict on live or measured probes ranks no predicted options; a layout applies to "
                            "the predicted ranking (Algorithm 1's probes are its own configurations)")
        refuse_progress(args, "the verdict on live or measured probes ranks no predicted options; a training "
                              "progress to rank on applies to the predicted ranking")
    choices = layout_choices(args, layout) or None
    params = load_params_arg(args)
    docs = []
    for name in scenario_names(args):
        scenario, cluster, model, workload = load_case(name, args)
        vms = [h.name for h in cluster.hosts]  # Algorithm 1 on every VM (the study's form on two)
        case = Case(cluster, model, workload, params, network=args.network)
        check_layout_plannable(case, techniques, layout)
        measure = same_progress(args, params, model)

        def plan_at(c, measure=measure):  # the ranking predict and plan make, seeded with the same rows
            return make_plan(c, keep=2, delta=args.delta, choices=choices, techniques=techniques,
                             same_progress=measure,
                             asked=asked_candidates(c, techniques, default_host_sets(c.cluster), layout))

        if rtts:
            doc = answer_vs_rtt(case, rtts, lambda c, _: plan_at(c))
            docs.append(doc)
            if not args.json:
                print_answer_vs_rtt(doc)
            continue
        probe_workload = replace(workload, epochs=args.probe_epochs)
        parts = None
        notes = [n for n in [workload_note(scenario, model, args)] if n]
        selection = algorithm1(make_source(args, name, cluster, model, probe_workload, params), *vms,
                               delta=args.delta)
        # the verdict: the same ranking predict and plan use, Algorithm 1's choice beside it
        if args.live:
            verdict, why = (f"verdict: Algorithm 1 on live probes picks {selection.label} (live probes measure "
                            f"TFLOP/s, not whole runs, so nothing is ranked)"), None
        elif args.records:
            verdict, why = measured_plan(study_records() if args.records == "study" else read_records(args.records),
                                         name, cluster, model, workload, args.delta, args.records)["verdict"], None
        else:
            plan = plan_at(case)
            verdict, why = plan.verdict("verdict"), plan.why_algorithm1_differs()
            notes += plan_notes(plan)
            by_part = plan.best and memory_by_part_line(plan.best.prediction, args.memory_parts)
            if by_part:
                parts = f"verdict's {by_part}"
        doc = {"scenario": cluster.name, "model": model.name, "verdict": verdict, "why_algorithm1_differs": why,
               "verdict_notes": notes, **selection.to_dict(),
               **estimates_of(case, selection, predicted=not (args.live or args.records))}
        if args.draws:
            doc["robustness"] = robustness_of(args, cluster, model, workload, params, vms, selection.label)
        docs.append(doc)
        if not args.json:
            print_selection(cluster, model, selection, verdict, why, workload.runtime, notes)
            if parts:
                print(f"  {parts}")
            for phrase in doc["estimated"]:
                print(f"  estimate: {phrase}; each probe's TFLOP/s within x/ {doc['estimate_spread']:.3g} "
                      "(docs/reference/runtimes.md, \"Efficiency per GPU generation\")")
            if args.draws:
                r = doc["robustness"]
                print(f"  robust: {selection.label} wins in {r['share']:.0%} of {r['draws']} parameter draws"
                      + (f" (else: {', '.join(f'{k} {v:.0%}' for k, v in r['others'].items())})" if r["others"] else ""))
    docs_ranked = [d for d in docs if "probes" in d]
    if args.json:
        print_json(answer_envelope("select", params, docs,
                                   MEASURED_NOTE if args.records else "live probes" if args.live else ESTIMATE_NOTE))
    elif len(docs_ranked) > 1 and not rtts:
        print_summary(docs_ranked)
    return 0


def estimates_of(case, selection, predicted: bool) -> dict:
    """The estimated efficiency entries predicted probes rest on, and each probe's TFLOP/s interval: divided and
    multiplied by the spread of the measured and published entries (its whole time taken as compute: the widest)."""
    from geosim.predict import estimated_on
    from geosim.inputs.runtime import efficiency_spread

    estimated = estimated_on(case) if predicted else []
    spread = efficiency_spread() if estimated else 1.0
    return {"estimated": estimated, "estimate_spread": spread,
            "probe_tflops_interval": {name: [p.tflops / spread, p.tflops * spread]
                                      for name, p in selection.probes.items()} if estimated else None}


def robustness_of(args, cluster, model, workload, params, vms, chosen: str) -> dict:
    """The share of parameter draws (predicted probes) whose Algorithm 1 choice is `chosen`."""
    from collections import Counter

    from geosim.studies.uncertainty import parameter_draws, robustness

    import time

    from geosim.cli._progress import Every, refuse_if_too_long

    draws = parameter_draws(params, args.draws)
    ticker, started, labels = Every("draws", "Algorithm 1 runs"), time.monotonic(), []
    for d in draws:
        labels.append(algorithm1(PredictedProbes(cluster, model, workload, d, args.network), *vms,
                                 delta=args.delta).label)
        ticker(len(labels), len(draws))
        if len(labels) in (3, 30):  # the first few say what all of them would cost
            refuse_if_too_long(len(labels), len(draws), time.monotonic() - started, "--draws", "Algorithm 1 runs")
    ticker.close(f"{len(labels):,} Algorithm 1 runs under parameter draws")
    others = {k: v / len(labels) for k, v in Counter(labels).most_common() if k != chosen}
    return {"draws": len(labels), "share": robustness(labels, chosen), "others": others}


def fmt_tflops(value: float) -> str:
    return f"{value:.3f}" if value else "0"


def print_selection(cluster, model, s: Selection, verdict: str, why: str | None, runtime: str = "alpa",
                    notes=()) -> None:
    print(f"\n{cluster.name}  ({describe_cluster(cluster)})")
    print(f"  {verdict}")
    for note in notes:
        print(f"  note: {note}")
    if why:
        print(f"  why Algorithm 1 differs: {why}")
    print(f"  {model.name}, Algorithm 1 on {s.source} probes, delta {s.delta:g}, runtime {runtime}")
    print(f"  {'probe':<5} {'technique':<10} {'VMs':<8} {'TFLOP/s/GPU':>11}  status")
    last_single = [name for name in s.probes if name.startswith(("Td", "Ts"))][-1:]
    for name in probe_names(s.probes):
        p = s.probes[name]
        status = p.status if p.status != "ok" else "ok"
        detail = f": {p.detail}" if p.detail and p.status != "ok" else (f"  ({p.detail})" if p.detail else "")
        print(f"  {name:<5} {label(p.technique):<10} {'+'.join(p.hosts):<8} {fmt_tflops(p.tflops):>11}  "
              f"{status}{detail}")
        if [name] == last_single:
            print(f"  {'Tz':<5} {f'max(Td1..{name})':<19} {fmt_tflops(s.tz):>11}")
    print(f"  branch: {s.branch}: {s.reason}")
    for note in s.notes:
        print(f"  note:   {note}")
    print(f"  choice: {s.label}")


def probe_names(probes: dict) -> list[str]:
    """Tp, then Td1, Ts1, Td2, Ts2, ... in VM order, then Tz2: the order the algorithm probes."""
    singles = sorted((n for n in probes if n[:2] in ("Td", "Ts")), key=lambda n: (int(n[2:]), n[1] == "s"))
    return [n for n in ("Tp",) if n in probes] + singles + [n for n in ("Tz2",) if n in probes]


def print_summary(docs: list[dict]) -> None:
    print(f"\nSummary ({docs[0]['model']}, {docs[0]['source']} probes, delta {docs[0]['delta']:g})")
    print(f"  {'slice':<10} {'Tp':>7} {'Tz':>7} {'Tz2':>7}  {'branch':<9}  choice")
    for d in docs:
        tz2, tp = d["probes"].get("Tz2"), d["probes"].get("Tp")
        print(f"  {d['scenario']:<10} {fmt_tflops(tp['tflops']) if tp else '-':>7} {fmt_tflops(d['tz']):>7} "
              f"{fmt_tflops(tz2['tflops']) if tz2 else '-':>7}  {d['branch']:<9}  {d['label']}")
