"""geosim plan: every feasible way to train on a slice, ranked, beside Algorithm 1's choice."""

from __future__ import annotations

import sys
import time

from geosim.case import Case
from geosim.cli.common import (add_json_argument, add_sweep_rtt_argument, add_technique_argument,
                               add_workload_arguments, fmt_duration, load_case, load_params_arg, print_json,
                               scenario_names)
from geosim.cli.predict import ESTIMATE_NOTE, describe_cluster
from geosim.errors import GeosimError
from geosim.records import read_records
from geosim.studies.plan import Plan, answer_vs_rtt, make_plan, measured_plan, parse_duration, twins
from geosim.studies.reference import study_records
from geosim.studies.select import DEFAULT_DELTA
from geosim.techniques import STUDY_ORDER, get_technique
from geosim.techniques.pipeshard import INTRA_STAGES
from geosim.units import parse_numbers

HELP = "rank every feasible option (technique x VMs x microbatches x layer split) and compare with Algorithm 1"


def add_arguments(parser) -> None:
    add_workload_arguments(parser)
    parser.add_argument("--deadline", metavar="TIME",
                        help="rank the options that finish within TIME (36h, 90min, 5400s) by GPU-hours")
    parser.add_argument("--max-gpus", type=int, help="only options using at most this many GPUs (default: no limit)")
    add_technique_argument(parser, f"the study's four, {', '.join(STUDY_ORDER)}, so the plan compares with "
                                   "Algorithm 1 like for like")
    parser.add_argument("--top", type=int, default=10, help="options to show (default %(default)s)")
    parser.add_argument("--all", action="store_true", help="simulate every option (no pruning) and list them all")
    parser.add_argument("--intra-stage", choices=(*INTRA_STAGES, "both"),
                        help="what a Pipeshard stage does across its GPUs (default: the parameters file's pipeshard.intra_stage; "
                             "'both' also tries shard, ~40x slower to plan)")
    parser.add_argument("--delta", type=float, default=DEFAULT_DELTA,
                        help="Algorithm 1's threshold: the relative TFLOP/s gap that decides (default %(default)s)")
    parser.add_argument("--measured", metavar="RUNS.jsonl",
                        help="rank measured runs instead ('study': the study's measurements)")
    add_sweep_rtt_argument(parser, "replan and show where the best option and Algorithm 1's choice flip")
    parser.add_argument("--draws", type=int, metavar="N",
                        help="re-rank the best options under N parameter draws from the fit's covariance and say "
                             "how often the best one wins")
    fabric = parser.add_argument_group("choosing FABRIC sites (instead of --scenario; README and docs/guide/fabric.md)")
    fabric.add_argument("--sites", metavar="SITE,SITE,...|all",
                        help="rank every slice these FABRIC sites allow (site pairs x GPU models) by the planner's "
                             "best option on it; 'all': every site whose GPUs are known")
    fabric.add_argument("--gpu", help="with --sites: only this GPU model (RTX6000, T4, A30, A40)")
    fabric.add_argument("--vms", type=int, default=2, help="with --sites: VMs per slice (default: %(default)s)")
    fabric.add_argument("--gpus-per-vm", type=int, default=2, help="with --sites: GPUs per VM (default: %(default)s, as in the study)")
    add_json_argument(parser)


class Progress:
    """A line on stderr once planning has taken more than two seconds (and only on a terminal)."""

    def __init__(self, label: str):
        self.label, self.started, self.shown = label, time.monotonic(), False

    def __call__(self, done: int, total: int | None, what: str = "simulated") -> None:
        if sys.stderr.isatty() and time.monotonic() - self.started > 2:
            of = f" of at most {total:,}" if total is not None else ""
            print(f"\r  {self.label}: {what} {done:,}{of} options" + " " * 10, end="", file=sys.stderr)
            self.shown = True

    def close(self):
        if self.shown:
            print("\r" + " " * 70 + "\r", end="", file=sys.stderr)


def run(args) -> int:
    if args.max_gpus is not None and args.max_gpus <= 0:
        raise GeosimError(f"must be > 0, got {args.max_gpus}", source="--max-gpus")
    if args.top <= 0:
        raise GeosimError(f"must be > 0, got {args.top}", source="--top")
    if args.draws is not None and (args.draws < 1 or args.measured):
        raise GeosimError("needs N >= 1 and predicted options (not --measured)", source="--draws")
    deadline = parse_duration(args.deadline) if args.deadline else None
    intra = INTRA_STAGES if args.intra_stage == "both" else ((args.intra_stage,) if args.intra_stage else None)
    rtts = parse_numbers(args.sweep_rtt, "--sweep-rtt") if args.sweep_rtt else None
    techniques = tuple(args.technique) if args.technique else STUDY_ORDER
    for name in techniques:
        get_technique(name)  # unknown names fail before any work
    params = load_params_arg(args)
    if args.sites:
        from geosim.fabric.choose_command import run_sites

        return run_sites(args, params, deadline, techniques)
    docs = []
    for name in scenario_names(args):
        scenario, cluster, model, workload = load_case(name, args)
        if args.measured:
            records = study_records() if args.measured == "study" else read_records(args.measured)
            doc = measured_plan(records, name, cluster, model, workload, args.delta, args.measured)
            docs.append(doc)
            if not args.json:
                print_measured(cluster, model, workload, doc)
            continue
        case = Case(cluster, model, workload, params)

        def plan_at(c: Case, label=cluster.name, keep=None if args.all else args.top) -> Plan:
            progress = Progress(label)
            try:
                return make_plan(c, deadline, args.max_gpus, args.delta, keep, {"intra_stages": intra}, techniques,
                                 progress)
            finally:
                progress.close()

        if rtts:
            doc = answer_vs_rtt(case, rtts, lambda c, r: plan_at(c, f"{cluster.name} at {r:g} ms", keep=2))
            docs.append(doc)
            if not args.json:
                print_answer_vs_rtt(doc)
            continue
        plan = plan_at(case)
        doc = plan.to_dict()
        if args.draws:
            from geosim.studies.plan import robustness
            from geosim.studies.uncertainty import parameter_draws

            doc["robustness"] = robustness(plan, parameter_draws(params, args.draws))
        docs.append(doc)
        if not args.json:
            print_plan(plan, None if args.all else args.top)
            if args.draws and plan.best:
                r = doc["robustness"]
                print(f"  robust: {plan.best.kind} wins in {r['share']:.0%} of {r['draws']} parameter draws "
                      f"(re-ranking the best {r['contenders']})"
                      + (f"; else {', '.join(f'{k} {v:.0%}' for k, v in r['others'].items())}" if r["others"] else ""))
    if args.json:
        print_json(docs)
    elif len(docs) > 1 and not args.sweep_rtt and not args.measured:
        print_summary(docs)
    return 0


def print_plan(plan: Plan, top: int | None) -> None:
    c = plan.case
    w = c.workload
    print(f"\n{c.cluster.name}  ({describe_cluster(c.cluster)})")
    print(f"  {plan.verdict('verdict')}")
    why = plan.why_algorithm1_differs()
    if why:
        print(f"  why Algorithm 1 differs: {why}")
    print(f"  {c.model.name}, {w.epochs} epochs of {w.tokens_per_epoch:,} tokens, batch {w.global_batch} x {w.seq_len}, "
          f"{w.precision}; params: {c.params.source}; {ESTIMATE_NOTE}")
    limits = [f"deadline {fmt_duration(plan.deadline_s)}: cheapest first"] if plan.deadline_s else []
    limits += [f"at most {plan.max_gpus} GPUs"] if plan.max_gpus else []
    failed = ", ".join(f"{n} {status}" for status, n in sorted(plan.failed.items()))
    print(f"  {plan.search_line()}")
    print(f"  {plan.considered} options: {len(plan.options)} feasible simulated"
          + (f", {failed}" if failed else "") + (f", {plan.pruned} pruned (cannot make the top {top})" if plan.pruned
                                                 else "") + (f"; {'; '.join(limits)}" if limits else ""))
    print(f"  {'#':>3} {'total':>9} {'per epoch':>10} {'GPU-h':>6} {'GPUs':>4} {'TFLOP/s':>7} {'mem/GPU':>8}  option")
    for i, o in enumerate(plan.options[:top], start=1):
        p = o.prediction
        late = "  (misses deadline)" if plan.deadline_s and o.total_time_s > plan.deadline_s else ""
        print(f"  {i:>3} {fmt_duration(o.total_time_s):>9} {fmt_duration(p.time_per_epoch_s):>10} {o.gpu_hours:>6.2f} "
              f"{o.gpus:>4} {p.tflops_per_gpu:>7.2f} {p.peak_memory_gib:>4.1f} GiB  {o.label}{late}")
    if len(c.cluster.hosts) > 4:  # interchangeable VMs (geosim.structure.host_groups) as ranges
        from geosim.structure import host_groups, host_list

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
