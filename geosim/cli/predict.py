"""geosim predict: time, throughput, memory and the why, per technique, for both VMs and each alone."""

from __future__ import annotations

import sys

from geosim.cli.common import (add_workload_arguments, fmt_duration, load_case, load_params_arg, print_json,
                                    scenario_names)
from geosim.case import Case
from geosim.errors import GeosimError
from geosim.sim.predict import Prediction, predict
from geosim.studies.reference import attach_measurement
from geosim.techniques import get_technique, technique_names
from geosim.studies.whatif import wan_links

HELP = "predict time per epoch, TFLOP/s and memory of each technique on a slice (default: the study's five)"


def add_arguments(parser) -> None:
    add_workload_arguments(parser)
    parser.add_argument("--technique", action="append", help="technique(s) to predict (default: all)")
    parser.add_argument("--all-vms-only", action="store_true", help="skip the 'each VM alone' rows")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--target-tokens", metavar="N|chinchilla",
                        help="also predict the time to train as far as Data gets in N tokens (README: Low-communication techniques)")
    parser.add_argument("--token-efficiency", action="append", metavar="TECHNIQUE=VALUE",
                        help="override a technique's token efficiency (Data's tokens / its tokens, same loss)")
    parser.add_argument("--draws", type=int, metavar="N",
                        help="also predict with N parameter draws from the fit's covariance and show the range")
    parser.add_argument("--loss-curves", metavar="FILE",
                        help="JSON lines with technique and loss_curve [[tokens, loss], ...]: measured efficiencies")


def host_subsets(cluster, all_only: bool) -> list[tuple[str, ...]]:
    everything = tuple(h.name for h in cluster.hosts)
    if all_only or len(everything) == 1:
        return [everything]
    return [everything] + [(h,) for h in everything]


def run(args) -> int:
    params = load_params_arg(args)
    if args.draws is not None and args.draws < 1:
        raise GeosimError(f"must be >= 1, got {args.draws}", source="--draws")
    techniques = args.technique or technique_names()
    for name in techniques:
        get_technique(name)  # unknown names fail before any work
    results: list[Prediction] = []
    headers = []
    for name in scenario_names(args):
        scenario, cluster, model, workload = load_case(name, args)
        headers.append((cluster, model, workload))
        for hosts in host_subsets(cluster, args.all_vms_only):
            for technique in techniques:
                prediction = predict(Case(cluster, model, workload, params), technique, hosts=hosts)
                if args.rtt_ms is None and args.bandwidth_gbps is None:
                    attach_measurement(prediction, cluster)
                results.append(prediction)
    targets = _time_to_target(args, params, results, headers)
    ranges = _ranges(args, params, results, headers)
    for warning in params.fit_warnings:  # what `calibrate fit` found suspicious when it wrote this file
        print(f"geosim predict: warning: {params.source}: [fitted] {warning}", file=sys.stderr)
    if args.json:
        doc = {"params": params.source,
               **({"params_warnings": list(params.fit_warnings)} if params.fit_warnings else {}),
               "predictions": [r.to_dict() | (targets[i] if targets else {})
                               | ({"total_time_range_s": ranges[i]} if ranges else {})
                               for i, r in enumerate(results)]}
        estimated = [{"scenario": c.name, "between": [link.a, link.b], "rtt_ms": link.rtt_s * 1e3}
                     for c, _, _ in headers for link in c.links if link.rtt_estimated]
        if estimated:  # say which RTTs are estimates (geosim.fabric.sites), not measurements
            doc["estimated_rtts"] = estimated
        print_json(doc)
        return 0
    for cluster, model, workload in headers:
        rows = [(r, ranges[i] if ranges else None) for i, r in enumerate(results) if r.scenario == cluster.name]
        print_table(cluster, model, workload, [r for r, _ in rows], params.source)
        if ranges:
            print_ranges(rows)
        if targets:
            print_targets([(r, t) for r, t in zip(results, targets) if r.scenario == cluster.name])
    return 0


def _time_to_target(args, params, results, headers) -> list[dict] | None:
    """--target-tokens: time-to-target fields per prediction (geosim/convergence.py)."""
    if not args.target_tokens:
        return None
    from geosim.studies import convergence

    models = {cluster.name: model for cluster, model, _ in headers}
    overrides = convergence.parse_overrides(args.token_efficiency)
    measured = convergence.measured_efficiencies(convergence.read_loss_curves(args.loss_curves)) if args.loss_curves else None
    return convergence.annotate(results, params, lambda p: convergence.target_tokens(args.target_tokens, models[p.scenario]),
                                overrides, measured)


def _ranges(args, params, results, headers) -> list[dict | None] | None:
    """--draws N: each prediction's total time under N parameter draws (5th, 50th, 95th percentile)."""
    if not args.draws:
        return None
    from geosim.studies.uncertainty import parameter_draws, spread

    draws = parameter_draws(params, args.draws)
    by_name = {cluster.name: (cluster, model, workload) for cluster, model, workload in headers}
    out = []
    for r in results:
        if not r.ok:
            out.append(None)
            continue
        cluster, model, workload = by_name[r.scenario]
        times = [p.total_time_s for p in (predict(Case(cluster, model, workload, d), r.technique, hosts=tuple(r.hosts))
                                          for d in draws) if p.ok]
        if not times:
            out.append(None)
            continue
        rng = spread(times)
        out.append({"low": rng.low, "median": rng.median, "high": rng.high, "draws": rng.draws,
                    "fits_in_draws": len(times) / len(draws)})
    return out


def print_ranges(rows) -> None:
    drawn = [(r, g) for r, g in rows if g]
    if not drawn:
        return
    print(f"  range over {drawn[0][1]['draws']} parameter draws from the fit's covariance (5th..95th percentile):")
    for r, g in drawn:
        print(f"    {r.technique:<10} {'+'.join(r.hosts):<8} {fmt_duration(g['low']):>10} .. {fmt_duration(g['high']):<10} "
              f"(median {fmt_duration(g['median'])})")


def print_targets(rows) -> None:
    if not rows:
        return
    print(f"  time to target ({rows[0][1]['target_tokens']:.3g} tokens of Data's progress): "
          f"tokens / token efficiency / tokens per s + start-up")
    ok = sorted((x for x in rows if x[0].ok), key=lambda x: (len(x[0].hosts), x[1]["time_to_target_s"]))
    for r, t in ok:
        print(f"    {r.technique:<10} {'+'.join(r.hosts):<8} {fmt_duration(t['time_to_target_s']):>10}  "
              f"efficiency {t['token_efficiency']:.3g} ({t['token_efficiency_source']})")


def describe_cluster(cluster) -> str:
    hosts = ", ".join(f"{h.name}: {len(h.gpus)}x {h.gpus[0].name} @{h.site}" for h in cluster.hosts)
    rtts = sorted({round(link.rtt_s * 1e3, 1) if link.rtt_estimated else link.rtt_s * 1e3
                   for link in wan_links(cluster)})
    estimated = any(link.rtt_estimated for link in wan_links(cluster))
    return f"{hosts}; RTT {'/'.join(f'{r:g}' for r in rtts)} ms" + (" (estimated from distance)" if estimated else "")


def print_table(cluster, model, workload, rows: list[Prediction], params_source: str) -> None:
    print(f"\n{cluster.name}  ({describe_cluster(cluster)})")
    print(f"  {model.name}, {workload.epochs} epochs of {workload.tokens_per_epoch:,} tokens, batch {workload.global_batch} "
          f"x {workload.seq_len}, {workload.microbatches} microbatches, {workload.precision}; params: {params_source}")
    head = (f"  {'technique':<10} {'VMs':<8} {'total':>10} {'per epoch':>10} {'TFLOP/s':>8} {'mem/GPU':>9}  "
            f"{'compute':>7} {'comm':>5} {'bubble':>6} {'ovhd':>5}  measured")
    print(head)
    print("  " + "-" * (len(head) - 2))
    ok = sorted((r for r in rows if r.ok), key=lambda r: (len(r.hosts) != len(cluster.hosts), r.total_time_s))
    for r in ok + [r for r in rows if not r.ok]:
        vms = "+".join(r.hosts)
        if not r.ok:
            print(f"  {r.technique:<10} {vms:<8} fails: {r.reason}")
            continue
        b = r.run_breakdown
        share = [100 * v / r.total_time_s for v in (b.compute_s, b.exposed_comm_s, b.bubble_s, b.overhead_s)]
        measured = ""
        if r.measured:
            m = r.measured["total_time_s_20_epochs"] * workload.epochs / 20
            measured = f"{fmt_duration(m)} (predicted x{r.total_time_s / m:.2f})"
        print(f"  {r.technique:<10} {vms:<8} {fmt_duration(r.total_time_s):>10} {fmt_duration(r.time_per_epoch_s):>10} "
              f"{r.tflops_per_gpu:>8.2f} {r.peak_memory_gib:>5.1f} GiB  "
              f"{share[0]:>6.0f}% {share[1]:>4.0f}% {share[2]:>5.0f}% {share[3]:>4.0f}%  {measured}")
        if r.memory_note:
            print(f"  {'':<10} {'':<8} memory: {r.memory_note}")
