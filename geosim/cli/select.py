"""geosim select: the study's Algorithm 1 on predicted, measured or live probes, every step shown."""

from __future__ import annotations

import shlex
import sys

from geosim.cli.common import (add_workload_arguments, load_case, load_params_arg, print_json,
                                    scenario_names)
from geosim.cli.predict import describe_cluster
from geosim.errors import GeosimError
from geosim.records import read_records
from geosim.studies.reference import study_records
from geosim.studies.select import (DEFAULT_DELTA, DEFAULT_SWEEP_MS, TECHNIQUE_LABEL, LiveProbes, MeasuredProbes,
                           PredictedProbes, Selection, algorithm1, parse_rtts, sweep_rtt)
from geosim.studies.whatif import with_rtt

HELP = "choose a technique with the study's Algorithm 1 (probes predicted, measured or run live)"
PROBE_NAMES = ("Tp", "Td1", "Ts1", "Td2", "Ts2", "Tz2")


def add_arguments(parser) -> None:
    add_workload_arguments(parser)
    for action in parser._actions:  # here --epochs is the algorithm's epsilon: how long each probe trains
        if action.dest == "epochs":
            action.help = "epochs each probe trains (the algorithm's epsilon; default 1)"
    parser.add_argument("--delta", type=float, default=DEFAULT_DELTA,
                        help=f"relative TFLOP/s gap that decides (default {DEFAULT_DELTA})")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--measured", metavar="RUNS.jsonl",
                        help="probe values from run records ('study': the paper's measurements)")
    source.add_argument("--live", action="store_true", help="run the probes for real with `geosim live run`")
    live = parser.add_argument_group("live probes")
    live.add_argument("--steps", type=int, help="steps per live probe, instead of --epochs")
    live.add_argument("--devices-per-vm", type=int, default=2,
                      help="CPU devices standing for one VM on this machine (default 2)")
    live.add_argument("--record", metavar="RUNS.jsonl", help="also append each live probe's run record here")
    live.add_argument("--live-args", default="", help="extra options for `geosim live run`, quoted")
    parser.add_argument("--sweep-rtt", nargs="?", const=DEFAULT_SWEEP_MS, metavar="MS",
                        help=f"redo the choice at these RTTs (predicted probes), e.g. 0:100:10 "
                             f"(default {DEFAULT_SWEEP_MS})")
    parser.add_argument("--draws", type=int, metavar="N",
                        help="redo the choice (predicted probes) under N parameter draws from the fit's covariance "
                             "and say how often it wins")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def make_source(args, scenario_name, cluster, model, workload, params):
    if args.live:
        return LiveProbes(model.name, workload.global_batch, workload.microbatches, epochs=workload.epochs,
                          steps=args.steps, devices_per_vm=args.devices_per_vm, record=args.record,
                          extra_args=tuple(shlex.split(args.live_args)), log=lambda line: print(line, file=sys.stderr))
    if args.measured:
        study = args.measured == "study"
        records = study_records() if study else read_records(args.measured)
        return MeasuredProbes(records, cluster, scenario_name, model, workload, args.measured,
                              record_hint="runs.jsonl" if study else None)
    return PredictedProbes(cluster, model, workload, params)


def two_vms(cluster) -> tuple[str, str]:
    hosts = [h.name for h in cluster.hosts]
    if len(hosts) != 2:
        raise GeosimError(f"Algorithm 1 compares two VMs; this scenario has {len(hosts)}", source=cluster.source,
                          key="hosts")
    return hosts[0], hosts[1]


def run(args) -> int:
    if args.epochs is None:
        args.epochs = 1
    if args.steps is not None and not args.live:
        raise GeosimError("only live probes take --steps", source="--steps")
    if args.draws and (args.live or args.measured):
        raise GeosimError("--draws varies the simulator's parameters, so it needs predicted probes", source="--draws")
    if args.draws is not None and args.draws < 1:
        raise GeosimError(f"must be >= 1, got {args.draws}", source="--draws")
    if args.sweep_rtt and (args.live or args.measured):
        raise GeosimError("--sweep-rtt varies the simulated network, so it needs predicted probes", source="--sweep-rtt")
    params = load_params_arg(args)
    docs = []
    for name in scenario_names(args):
        scenario, cluster, model, workload = load_case(name, args)
        v1, v2 = two_vms(cluster)
        if args.sweep_rtt:
            docs.append(sweep(args, cluster, model, workload, params, v1, v2))
            continue
        selection = algorithm1(make_source(args, name, cluster, model, workload, params), v1, v2, args.delta)
        doc = {"scenario": cluster.name, "model": model.name, **selection.to_dict()}
        if args.draws:
            doc["robustness"] = robustness_of(args, cluster, model, workload, params, v1, v2, selection.label)
        docs.append(doc)
        if not args.json:
            print_selection(cluster, model, selection)
            if args.draws:
                r = doc["robustness"]
                print(f"  robust: {selection.label} wins in {r['share']:.0%} of {r['draws']} parameter draws"
                      + (f" (else: {', '.join(f'{k} {v:.0%}' for k, v in r['others'].items())})" if r["others"] else ""))
    if args.json:
        print_json(docs)
    elif len(docs) > 1 and not args.sweep_rtt:
        print_summary(docs)
    return 0


def robustness_of(args, cluster, model, workload, params, v1, v2, chosen: str) -> dict:
    """The share of parameter draws (predicted probes) whose Algorithm 1 choice is `chosen`."""
    from collections import Counter

    from geosim.studies.uncertainty import parameter_draws, robustness

    labels = [algorithm1(PredictedProbes(cluster, model, workload, d), v1, v2, args.delta).label
              for d in parameter_draws(params, args.draws)]
    others = {k: v / len(labels) for k, v in Counter(labels).most_common() if k != chosen}
    return {"draws": len(labels), "share": robustness(labels, chosen), "others": others}


def fmt_tflops(value: float) -> str:
    return f"{value:.3f}" if value else "0"


def print_selection(cluster, model, s: Selection) -> None:
    print(f"\n{cluster.name}  ({describe_cluster(cluster)})")
    print(f"  {model.name}, Algorithm 1 on {s.source} probes, delta {s.delta:g}")
    print(f"  {'probe':<5} {'technique':<10} {'VMs':<8} {'TFLOP/s/GPU':>11}  status")
    for name in PROBE_NAMES:
        if name not in s.probes:
            continue
        p = s.probes[name]
        status = p.status if p.status != "ok" else "ok"
        detail = f": {p.detail}" if p.detail and p.status != "ok" else (f"  ({p.detail})" if p.detail else "")
        print(f"  {name:<5} {TECHNIQUE_LABEL[p.technique]:<10} {'+'.join(p.hosts):<8} {fmt_tflops(p.tflops):>11}  "
              f"{status}{detail}")
        if name == "Ts2":
            print(f"  {'Tz':<5} {'max(Td1..Ts2)':<19} {fmt_tflops(s.tz):>11}")
    print(f"  branch: {s.branch}: {s.reason}")
    for note in s.notes:
        print(f"  note:   {note}")
    print(f"  choice: {s.label}")


def print_summary(docs: list[dict]) -> None:
    print(f"\nSummary ({docs[0]['model']}, {docs[0]['source']} probes, delta {docs[0]['delta']:g})")
    print(f"  {'slice':<10} {'Tp':>7} {'Tz':>7} {'Tz2':>7}  {'branch':<9}  choice")
    for d in docs:
        tz2 = d["probes"].get("Tz2")
        print(f"  {d['scenario']:<10} {fmt_tflops(d['probes']['Tp']['tflops']):>7} {fmt_tflops(d['tz']):>7} "
              f"{fmt_tflops(tz2['tflops']) if tz2 else '-':>7}  {d['branch']:<9}  {d['label']}")


def sweep(args, cluster, model, workload, params, v1, v2) -> dict:
    def choose(rtt_ms):
        s = algorithm1(PredictedProbes(with_rtt(cluster, rtt_ms / 1e3), model, workload, params), v1, v2, args.delta)
        return s.label, s

    rows, flips = sweep_rtt(parse_rtts(args.sweep_rtt), choose)
    doc = {"scenario": cluster.name, "model": model.name, "delta": args.delta,
           "rows": [{"rtt_ms": r, "choice": label, "tp": s.probes["Tp"].tflops, "tz": s.tz,
                     "branch": s.branch} for r, label, s in rows],
           "flips": [{"between_ms": [lo, hi], "below": a, "above": b} for lo, hi, a, b in flips]}
    if not args.json:
        print(f"\n{cluster.name}: Algorithm 1 ({model.name}, predicted probes, delta {args.delta:g}) against RTT")
        print(f"  {'RTT ms':>8} {'Tp':>7} {'Tz':>7}  {'branch':<9}  choice")
        for r, label, s in rows:
            print(f"  {r:>8g} {fmt_tflops(s.probes['Tp'].tflops):>7} {fmt_tflops(s.tz):>7}  {s.branch:<9}  {label}")
        print_flips(flips)
    return doc


def print_flips(flips) -> None:
    if not flips:
        print("  the choice does not change over this range")
    for lo, hi, below, above in flips:
        print(f"  flips at {(lo + hi) / 2:.3g} ms (between {lo:.3g} and {hi:.3g}): {below} -> {above}")
