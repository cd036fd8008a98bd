"""geosim plan: every feasible way to train on a slice, ranked, beside Algorithm 1's choice."""

from __future__ import annotations

from functools import cache

from geosim.inputs.case import Case
from geosim.cli.common import (add_time_limit_argument, add_memory_parts_argument, memory_by_part_line, DELTA_BOUNDS, DRAWS_BOUNDS, LAYOUT_BOUNDS, WORKLOAD_BOUNDS, Progress, ESTIMATE_NOTE, MEASURED_NOTE, add_json_argument, add_layout_arguments,
                               add_renamed, answer_envelope, add_sweep_rtt_argument, add_technique_argument,
                               add_workload_arguments, check_layout_plannable, check_layout_techniques, fmt_duration,
                               chosen_techniques, layout_arguments, load_case, load_params_arg, print_json,
                               refuse_layout, scenario_names, add_progress_arguments, check_progress_arguments,
                               refuse_progress, same_progress, workload_note, layout_choices)
from geosim.cli.predict import describe_cluster, interval_line, print_estimates, print_verdict_head
from geosim.base.validate import count
from geosim.base.errors import GeosimError
from geosim.inputs.records import read_records
from geosim.studies.plan import Plan, answer_vs_rtt, make_plan, measured_plan, parse_duration, twins
from geosim.studies.asked import asked_candidates, default_host_sets, plan_notes
from geosim.studies.ranking import is_assumed
from geosim.studies.reference import study_records
from geosim.studies.select import DEFAULT_DELTA
from geosim.techniques import add_plan_arguments, plan_choices
from geosim.base.units import parse_numbers

# Wings above the core (fabric/) add their own ways to plan under this entry-point group (pyproject.toml): a
# module with add_arguments(parser), wanted(args) -> bool and run(args, params, deadline_s, techniques) -> int.
# The core names none of them, as geosim.cli names no plugin command.
EXTENSION_GROUP = "geosim.plan_extensions"

HELP = "rank every feasible option (technique x VMs x microbatches x layer split) and compare with Algorithm 1"

# every numeric flag's bound, checked before the command runs (geosim/base/validate.py check_flags)
FLAG_BOUNDS = {"plan": {
    **WORKLOAD_BOUNDS, **DRAWS_BOUNDS, **DELTA_BOUNDS, **LAYOUT_BOUNDS,
    "--max-gpus": count(1_000_000, "a filter: any bound above the slice's GPUs is the same"),
    "--top": count(1_000_000, "options to print"),
    "--host-count": count(64, "with --sites: slices are ranked over site pairs; 64 VMs is past any FABRIC slice"),
    "--gpus-per-host": count(16, "no cloud VM or FABRIC node has more than 8-16 GPUs")}}


def add_arguments(parser) -> None:
    add_workload_arguments(parser)
    parser.add_argument("--deadline", metavar="TIME",
                        help="rank the options that finish within TIME (36h, 90min, 5400s) by GPU-hours")
    parser.add_argument("--max-gpus", type=int, help="only options using at most this many GPUs (default: no limit)")
    add_technique_argument(parser)
    parser.add_argument("--top", type=int, default=10, help="options to show (default %(default)s)")
    parser.add_argument("--all", action="store_true", help="simulate every option (no pruning) and list them all")
    add_plan_arguments(parser)  # each technique's own planner flags (Pipeshard: --intra-stage)
    add_layout_arguments(parser)  # the layout asked: the planner ranks it on each set of hosts it fits
    add_progress_arguments(parser)  # what the options are ranked on, as predict and select rank them
    parser.add_argument("--delta", type=float, default=DEFAULT_DELTA,
                        help="Algorithm 1's threshold: the relative TFLOP/s gap that decides (default %(default)s)")
    parser.add_argument("--records", metavar="RUNS.jsonl",
                        help="rank measured runs instead ('study': the study's measurements)")
    add_renamed(parser, "--measured", "--records", dest="records")
    add_sweep_rtt_argument(parser, "replan and show where the best option and Algorithm 1's choice flip")
    parser.add_argument("--draws", type=int, metavar="N",
                        help="re-rank the best options under N parameter draws from the fit's covariance and say "
                             "how often the best one wins")
    for extension in plan_extensions():  # a wing's own way to plan (FABRIC's: --sites)
        extension.add_arguments(parser)
    add_json_argument(parser)
    add_time_limit_argument(parser)
    add_memory_parts_argument(parser)


@cache
def plan_extensions() -> tuple:
    from importlib.metadata import entry_points  # 25 ms: only when plan runs or lists its flags

    return tuple(ep.load() for ep in sorted(entry_points(group=EXTENSION_GROUP), key=lambda ep: ep.name))


def run(args) -> int:
    if args.max_gpus is not None and args.max_gpus <= 0:
        raise GeosimError(f"must be > 0, got {args.max_gpus}", source="--max-gpus")
    if args.top <= 0:
        raise GeosimError(f"must be > 0, got {args.top}", source="--top")
    if args.draws is not None and (args.draws < 1 or args.records):
        raise GeosimError("needs N >= 1 and predicted options (not --records)", source="--draws")
    deadline = parse_duration(args.deadline) if args.deadline else None
    choices = plan_choices(args)
    rtts = parse_numbers(args.sweep_rtt, "--sweep-rtt") if args.sweep_rtt else None
    techniques = chosen_techniques(args.technique)
    layout = layout_arguments(args)
    check_layout_techniques(techniques, layout)
    check_progress_arguments(args)
    if args.records:
        refuse_layout(args, "--records ranks the measured runs as they ran; a layout applies to predicted options")
        refuse_progress(args, "--records ranks the measured runs on their own times; a training progress to rank "
                              "on applies to predicted options")
    choices = {**choices, "layout": layout, **layout_choices(args, layout)}
    params = load_params_arg(args)
    for extension in plan_extensions():
        if extension.wanted(args):
            refuse_layout(args, "ranking FABRIC's slices takes no layout; plan one slice's scenario with it")
            return extension.run(args, params, deadline, techniques)
    docs = []
    for name in scenario_names(args):
        scenario, cluster, model, workload = load_case(name, args)
        if args.records:
            records = study_records() if args.records == "study" else read_records(args.records)
            doc = measured_plan(records, name, cluster, model, workload, args.delta, args.records)
            docs.append(doc)
            if not args.json:
                print_measured(cluster, model, workload, doc)
            continue
        case = Case(cluster, model, workload, params, network=args.network)
        check_layout_plannable(case, techniques, layout, args.max_gpus)
        measure = same_progress(args, params, model)

        def plan_at(c: Case, label=cluster.name, keep=None if args.all else args.top, measure=measure) -> Plan:
            progress = Progress(label)
            try:
                # seeded with predict's default rows (every technique on all the VMs and on each alone, the
                # layout asked where it fits): the three commands weigh the same options
                return make_plan(c, deadline, args.max_gpus, args.delta, keep, choices, techniques,
                                 progress, same_progress=measure,
                                 asked=asked_candidates(c, techniques, default_host_sets(c.cluster), layout))
            finally:
                progress.close()

        if rtts:
            doc = answer_vs_rtt(case, rtts, lambda c, r: plan_at(c, f"{cluster.name} at {r:g} ms", keep=2))
            docs.append(doc)
            if not args.json:
                print_answer_vs_rtt(doc)
            continue
        plan = plan_at(case)
        notes = [n for n in [workload_note(scenario, model, args)] if n] + plan_notes(plan)
        doc = plan.to_dict() | {"verdict_notes": notes}
        if args.draws:
            from geosim.studies.plan import robustness
            from geosim.studies.uncertainty import parameter_draws

            doc["robustness"] = robustness(plan, parameter_draws(params, args.draws), on_draw=_draw_progress())
        docs.append(doc)
        if not args.json:
            print_plan(plan, None if args.all else args.top, notes, args.memory_parts)
            if args.draws and plan.best:
                r = doc["robustness"]
                print(f"  robust: {plan.best.kind} wins in {r['share']:.0%} of {r['draws']} parameter draws "
                      f"(re-ranking the best {r['contenders']})"
                      + (f"; else {', '.join(f'{k} {v:.0%}' for k, v in r['others'].items())}" if r["others"] else ""))
    if args.json:
        print_json(answer_envelope("plan", params, docs, MEASURED_NOTE if args.records else ESTIMATE_NOTE))
    elif len(docs) > 1 and not args.sweep_rtt and not args.records:
        print_summary(docs)
    return 0


def print_plan(plan: Plan, top: int | None, notes=(), parts: bool = False) -> None:
    c = plan.case
    w = c.workload
    print_verdict_head(c.cluster, plan, notes)
    print(f"  {c.model.name}, {w.epochs} epochs of {w.tokens_per_epoch:,} tokens, batch {w.global_batch} x {w.seq_len}, "
          f"{w.precision}{', remat' if w.checkpointing else ''}, runtime {w.runtime}; params: {c.params.source}; {ESTIMATE_NOTE}")
    limits = [f"deadline {fmt_duration(plan.deadline_s)}: cheapest first"] if plan.deadline_s else []
    limits += [f"at most {plan.max_gpus} GPUs"] if plan.max_gpus else []
    failed = ", ".join(f"{n} {status}" for status, n in sorted(plan.failed.items()))
    # one line for the search: what it weighed, simulated and pruned, then what the simulated options gave
    print(f"  {plan.search_line()}; {len(plan.options)} feasible" + (f", {failed}" if failed else "")
          + (f"; {'; '.join(limits)}" if limits else ""))
    # 'time': to the same training progress (the ranking's measure; the run's own time where the token
    # efficiency is 1), 'eff': the token efficiency it was ranked at
    print(f"  {'#':>3} {'time':>9} {'per epoch':>10} {'GPU-h':>6} {'GPUs':>4} {'TFLOP/s':>7} {'mem/GPU':>8} "
          f"{'eff':>5}  option")
    for i, o in enumerate(plan.options[:top], start=1):
        p = o.prediction
        late = "  (misses deadline)" if plan.deadline_s and o.ranked_time_s > plan.deadline_s else ""
        late += "  (may not fit)" if p.memory_verdict == "may not fit" else ""
        eff = f"{o.efficiency.value:.3g}" + ("*" if is_assumed(o.efficiency) else "")
        print(f"  {i:>3} {fmt_duration(o.ranked_time_s):>9} {fmt_duration(p.time_per_epoch_s):>10} {o.gpu_hours:>6.2f} "
              f"{o.gpus:>4} {p.tflops_per_gpu:>7.2f} {p.peak_memory_gib:>4.1f} GiB {eff:>5}  {o.label}{late}")
        by_part = memory_by_part_line(p, parts)
        if by_part:
            print(f"  {'':>3} {by_part}")
        if p.iteration_time_interval_s:
            print(f"  {'':>3} {interval_line(p)}")
    print_estimates([o.prediction for o in plan.options[:top]])
    if any(is_assumed(o.efficiency) for o in plan.options[:top]):
        print("  * token efficiency assumed (parameters file), not measured: time is to Data's progress")
    if len(c.cluster.hosts) > 4:  # interchangeable VMs (geosim.inputs.structure.host_groups) as ranges
        from geosim.inputs.structure import host_groups, host_list

        alike = [g for g in host_groups(c.cluster) if g.count > 1]
        if alike:
            print(f"  interchangeable VMs (same site, GPUs and links): {'; '.join(host_list(g.hosts) for g in alike)}")
    for group in (twins(c.cluster) if len(c.cluster.hosts) <= 4 else []):
        print(f"  {', '.join(group[1:])} {'has' if len(group) == 2 else 'have'} the same GPUs as {group[0]}: "
              f"options on {group[0]} stand for {'it' if len(group) == 2 else 'them'} too")
    if plan.deadline_s and not plan.meets_deadline:
        print(f"  no option finishes within {fmt_duration(plan.deadline_s)}")
    print(f"  {plan.comparison()}")


def print_summary(docs: list[dict]) -> None:
    print(f"\nSummary ({docs[0]['model']}, predicted): Algorithm 1 against the planner")
    print(f"  {'slice':<10} {'Algorithm 1':<22} {'time':>8}  {'planner best':<64} {'time':>8} {'ratio':>6}")
    for d in docs:
        algo, chosen, best = d["algorithm1"], d["algorithm1_option"], d["best"]
        a_time = chosen["total_time_s"] if chosen and chosen["status"] == "ok" else None
        b_time = best["total_time_s"] if best else None
        ratio = f"{a_time / b_time:.2f}x" if a_time and b_time else "-"
        print(f"  {d['scenario']:<10} {algo['label'] if algo else '-':<22} {fmt_duration(a_time):>8}  "
              f"{best['label'] if best else 'none':<64} {fmt_duration(b_time):>8} {ratio:>6}")


def print_measured(cluster, model, workload, doc: dict) -> None:
    print(f"\n{cluster.name}  ({describe_cluster(cluster)})")
    print(f"  {doc['verdict']}")
    print(f"  {model.name}, measured runs from {doc['measured']}, scaled to {workload.epochs} epochs")
    if not doc["options"]:
        print("  no measured run of this slice and model")
    for i, row in enumerate(doc["options"], start=1):
        gpu_h = f"{row['gpu_hours']:.2f}" if row["gpu_hours"] else "-"
        print(f"  {i:>3} {fmt_duration(row['total_time_s']):>9} {gpu_h:>6} GPU-h  {row['label']}"
              + ("" if row["status"] == "ok" else f"  ({row['status']})"))
    if doc["algorithm1"]:
        print(f"  Algorithm 1 on these measurements picks {doc['algorithm1']['label']}")
    else:
        head, _, runs = doc["algorithm1_missing"].partition(": ")
        print(f"  Algorithm 1 cannot run on these measurements: {head}:")
        for run_line in runs.split("; "):
            print(f"    {run_line}")


def print_answer_vs_rtt(doc: dict) -> None:
    """The best option and Algorithm 1's choice against RTT (plan and select --sweep-rtt print this)."""
    print(f"\n{doc['scenario']}: the best option ({doc['model']}) against RTT, with Algorithm 1's choice")
    print(f"  {'RTT ms':>8} {'best':>9}  {'option':<64} {'Alg. 1':>9}  Algorithm 1")
    for row in doc["rows"]:
        print(f"  {row['rtt_ms']:>8g} {fmt_duration(row['total_time_s']):>9}  {row['best_option'] or 'none':<64} "
              f"{fmt_duration(row['algorithm1_total_time_s']):>9}  {row['algorithm1'] or '-'}")
    print_flips("the best option", doc["flips"])
    print_flips("Algorithm 1's choice", doc["algorithm1_flips"])


def print_flips(what: str, flips: list[dict]) -> None:
    if not flips:
        print(f"  {what} does not change over this range")
    for f in flips:
        lo, hi = f["between_ms"]
        print(f"  {what} flips at {(lo + hi) / 2:.3g} ms (between {lo:.3g} and {hi:.3g}): {f['below']} -> {f['above']}")


def _draw_progress():
    """--draws' progress line every few seconds, and its cost estimate from the first draws."""
    import time

    from geosim.cli._progress import Every, refuse_if_too_long

    ticker, started = Every("draws", "parameter draws"), time.monotonic()

    def on_draw(done: int, total: int) -> None:
        ticker(done, total)
        if done in (3, 30):
            refuse_if_too_long(done, total, time.monotonic() - started, "--draws", "parameter draws")
        if done == total:
            ticker.close(f"{total:,} parameter draws")
    return on_draw
