"""geosim predict: the verdict per slice, then time, throughput, memory and the why per technique.

Each slice starts with one line (geosim.studies.ranking.verdict): what to use, where, how long,
the runner-up and Algorithm 1 where it differs. Every technique considered is ranked on one
measure, the time to the same training progress (ranking.time_to_progress_s), the same as select
and plan rank on. The table below it holds the synchronous techniques (the study's four) on both
VMs and each alone; low-communication techniques (DiLoCo, SparseLoCo, the hybrid) need more tokens
for the same loss, so their rows are in a time-to-target table beside Data with their efficiency.

Over 400 lines: the command's whole text output (the table, memory by part, estimates, window notes,
time to target, draws) is here, one command as one module; the ranking itself is geosim.studies'.
"""

from __future__ import annotations

import sys

from geosim.inputs.case import Case
from geosim.cli.common import (add_time_limit_argument, add_memory_parts_argument, memory_by_part_line, DRAWS_BOUNDS, LAYOUT_BOUNDS, WORKLOAD_BOUNDS, Progress, add_hosts_argument, add_layout_arguments, check_layout_techniques,
                               layout_arguments, technique_options, add_json_argument, add_renamed, parse_hosts, add_technique_argument, add_workload_arguments, answer_envelope,
                               ESTIMATE_NOTE, add_progress_arguments, layout_choices, check_progress_arguments, same_progress, workload_note,
                               chosen_techniques, fmt_duration, load_case, load_params_arg, print_json,
                               scenario_names)
from geosim.base.errors import GeosimError
from geosim.predict import Prediction, predict, shared_predictions
from geosim.inputs.runtime import runtime_differences, runtime_of
from geosim.studies.asked import MAX_ALONE_ROWS, asked_candidates, asked_rows, microbatch_alternatives, verdict_notes
from geosim.studies.ranking import SameProgress, fmt_time, time_to_progress_s
from geosim.cli._progress import Heartbeat
from geosim.studies.reference import attach_measurement
from geosim.inputs.structure import host_groups, host_list
from geosim.studies.whatif import wan_links
from geosim.techniques import is_baseline, is_low_communication, label
from geosim.base.units import s_to_ms

HELP = "predict the best option and each technique's time, TFLOP/s and memory on a slice (default: the study's five)"

# every numeric flag's bound, checked before the command runs (geosim/base/validate.py check_flags)
FLAG_BOUNDS = {"predict": {**WORKLOAD_BOUNDS, **DRAWS_BOUNDS, **LAYOUT_BOUNDS}}


def add_arguments(parser) -> None:
    add_workload_arguments(parser)
    add_technique_argument(parser)
    add_layout_arguments(parser)
    add_hosts_argument(parser, "all,each")
    add_renamed(parser, "--all-vms-only", "--hosts all", dest="hosts", value="all")
    add_json_argument(parser)
    add_time_limit_argument(parser)
    add_memory_parts_argument(parser)
    add_progress_arguments(parser)
    parser.add_argument("--draws", type=int, metavar="N",
                        help="also predict with N parameter draws from the fit's covariance and show the range")


def host_subsets(cluster, spec: str) -> list[tuple[str, ...]]:
    """The table's rows: --hosts (default: all the VMs together, then each alone)."""
    subsets = parse_hosts(spec, cluster)
    alone = [s for s in subsets if len(s) == 1]
    if len(cluster.hosts) > MAX_ALONE_ROWS and len(alone) > MAX_ALONE_ROWS:
        print(f"geosim predict: note: {cluster.name} has {len(cluster.hosts)} VMs: the 'each VM alone' rows are "
              f"shown up to {MAX_ALONE_ROWS} VMs (name the VMs with --hosts to see them)", file=sys.stderr)
        return [s for s in subsets if len(s) > 1] or subsets[:1]
    return subsets


def run(args) -> int:
    # the table's rows, the planner's options and Algorithm 1's probes ask some of the same questions
    with shared_predictions():
        return _run(args)


def _run(args) -> int:
    from geosim.studies.plan import make_plan

    params = load_params_arg(args)
    if args.draws is not None and args.draws < 1:
        raise GeosimError(f"must be >= 1, got {args.draws}", source="--draws")
    techniques = chosen_techniques(args.technique)
    lowcomm = [t for t in techniques if is_low_communication(t)]
    layout = layout_arguments(args)
    check_layout_techniques(techniques, layout)
    check_progress_arguments(args)
    slices, progress_of = [], {}
    for name in scenario_names(args):
        scenario, cluster, model, workload = load_case(name, args)
        case = Case(cluster, model, workload, params, network=args.network)
        # the rows are the question as asked, at any size; the planner's best is the verdict's
        host_sets = host_subsets(cluster, args.hosts)
        with Heartbeat(cluster.name, "simulating the rows asked") as beat:  # a row at 1,024 GPUs takes minutes

            def options_for(t, hosts, case=case, beat=beat):
                beat.phase = f"simulating {t} on {len(hosts)} VM{'s' if len(hosts) != 1 else ''} (a row asked)"
                return technique_options(t, case, hosts, layout)

            told = LongRows(cluster.name, rows_too=not args.json)
            rows: list[Prediction] = asked_rows(case, techniques, host_sets, options_for, told.row, told.long)
        if args.rtt_ms is None and args.bandwidth_gbps is None:
            for prediction in rows:
                attach_measurement(prediction, cluster)
        # the verdict ranks what the planner finds among the same techniques (its layer splits and
        # microbatches included) on the same measure, so predict, select and plan name the same best
        # option, and the time-to-target table's figures are the ranking's
        progress = same_progress(args, params, model)
        bar = Progress(f"{cluster.name}: planning")
        try:
            plan = make_plan(case, keep=2, choices=layout_choices(args, layout) or None, techniques=techniques,
                             same_progress=progress, progress=bar,
                             asked=asked_candidates(case, techniques, host_sets, layout))
        finally:
            bar.close()
        targets = _time_to_target(progress, workload, rows) if lowcomm else None
        notes = ([n for n in [workload_note(scenario, model, args)] if n]
                 + verdict_notes(plan.best, rows, host_sets, progress, workload.microbatches,
                                 "--microbatches" if args.microbatches else "the workload's")
                 + [n for n in [plan.long_line()] if n] + microbatch_alternatives(plan))
        slices.append((case, rows, plan, targets, notes))
        progress_of[id(case)] = progress
    ranges = _ranges(args, params, slices)
    for warning in params.fit_warnings:  # what `calibrate fit` found suspicious when it wrote this file
        print(f"geosim predict: warning: {params.source}: [fitted] {warning}", file=sys.stderr)
    if args.json:
        docs = []
        for c, rows, plan, targets, notes in slices:
            estimated = [{"between": [link.a, link.b], "rtt_ms": s_to_ms(link.rtt_s)}
                         for link in c.cluster.links if link.rtt_estimated]
            docs.append({"scenario": c.cluster.name, "model": c.model.name, "verdict": plan.verdict("verdict"),
                         "best": plan.best.to_dict() if plan.best else None,
                         "runner_up": plan.options[1].to_dict() if len(plan.options) > 1 else None,
                         "algorithm1": plan.algorithm.label if plan.algorithm else None,
                         "why_algorithm1_differs": plan.why_algorithm1_differs(),
                         "verdict_notes": notes,
                         "runtime_differences": runtime_differences(runtime_of(c.workload, c.params), c.params),
                         # which RTTs are estimates (geosim.base.sites), not measurements
                         **({"estimated_rtts": estimated} if estimated else {}),
                         "predictions": [r.to_dict() | _target_fields(r, targets) | _ranked_fields(r, progress_of[id(c)])
                                         | ({"total_time_range_s": ranges[id(r)]} if ranges else {}) for r in rows]})
        print_json(answer_envelope("predict", params, docs))
        return 0
    for case, rows, plan, targets, notes in slices:
        print_slice(case, plan, rows, targets, ranges, notes, layout is not None, args.memory_parts)
    return 0


class LongRows:
    """A row expected to take long (geosim.cost.long_prediction) is asked after the others: before it
    starts, one line on stderr says so, the time it expects and what to ask instead. In text mode the
    rows already done are printed there first, and every row after it as it is done (the table still
    comes at the end, with the verdict); under --json only the announcement."""

    def __init__(self, cluster: str, rows_too: bool):
        self.cluster, self.rows_too = cluster, rows_too
        self.done: list[Prediction] = []
        self.told = False  # whether a long row was announced: rows are printed as they are done since

    def row(self, prediction: Prediction) -> None:
        self.done.append(prediction)
        if self.told and self.rows_too:
            self._print(prediction)

    def long(self, technique: str, hosts: tuple[str, ...], long) -> None:
        if self.rows_too and not self.told:
            for prediction in self.done:
                self._print(prediction)
        self.told = True
        on = f"{len(hosts)} VM{'s' if len(hosts) != 1 else ''}"
        print(f"  {self.cluster}: {technique} on {on} will take about {fmt_time(long.seconds)} of CPU "
              f"({long.work / 1e6:,.1f} million simulated steps; an estimate); the other rows are done. For an "
              f"answer in seconds ask fewer --hosts, fewer --microbatches, or leave {technique} out of --technique",
              file=sys.stderr, flush=True)

    def _print(self, p: Prediction) -> None:
        on = f"{len(p.hosts)} VM{'s' if len(p.hosts) != 1 else ''}"
        answer = fmt_time(p.total_time_s) if p.ok else f"{p.status}: {p.reason}"
        print(f"  {self.cluster}: {p.technique} on {on}: {answer} (row done)", file=sys.stderr, flush=True)


def _ranked_fields(prediction: Prediction, progress: SameProgress) -> dict:
    """A row's time on the verdict's measure (ranking.time_to_progress_s; None where it does not run): the
    verdict is never above it (tests/test_one_answer.py)."""
    return {"time_to_progress_s": time_to_progress_s(prediction, progress.efficiency(prediction).value,
                                                      progress.target_tokens)}


def _target_fields(prediction: Prediction, targets) -> dict:
    return targets.get(id(prediction), {}) if targets else {}


def _time_to_target(progress: SameProgress, workload, rows) -> dict[int, dict]:
    """Time-to-target fields for the low-communication rows and Data: the ranking's own measure
    (ranking.time_to_progress_s), so the table and the verdict cannot disagree."""
    tokens = progress.target_tokens or workload.iterations_per_epoch * workload.epochs * workload.tokens_per_iteration
    fields = {}
    for r in rows:
        if not (is_low_communication(r.technique) or is_baseline(r.technique)):
            continue
        eff = progress.efficiency(r)
        fields[id(r)] = {"target_tokens": tokens, "token_efficiency": eff.value, "token_efficiency_source": eff.source,
                         "time_to_target_s": time_to_progress_s(r, eff.value, progress.target_tokens)}
    return fields


def _ranges(args, params, slices) -> dict[int, dict | None] | None:
    """--draws N: each prediction's total time under N parameter draws (5th, 50th, 95th percentile)."""
    if not args.draws:
        return None
    from geosim.studies.uncertainty import has_covariance, link_draws, parameter_draws, spread, varies

    import time

    from geosim.cli._progress import Every, refuse_if_too_long

    # parameters from the fit's covariance, and each varying link's bandwidth from its samples
    # (a slice whose links are constant and parameters without a covariance still asks for the former)
    draws = (parameter_draws(params, args.draws) if has_covariance(params)
             or not any(varies(case.cluster) for case, *_ in slices) else [params] * args.draws)
    layout = layout_arguments(args)
    out: dict[int, dict | None] = {}
    total = sum(len(draws) for _, rows, *_ in slices for r in rows if r.ok)
    ticker, started, done = Every("draws", "predictions"), time.monotonic(), 0
    for case, rows, *_ in slices:
        clusters = link_draws(case.cluster, args.draws) if varies(case.cluster) else [case.cluster] * args.draws
        for r in rows:
            options = technique_options(r.technique, case, tuple(r.hosts), layout)  # the row's layout, as asked
            times = []
            for d, c in (zip(draws, clusters) if r.ok else ()):
                p = predict(case.with_(params=d, cluster=c), r.technique, hosts=tuple(r.hosts), options=options)
                if p.ok:
                    times.append(p.total_time_s)
                done += 1
                ticker(done, total)
                if done in (3, 30):  # the first few say what all of them would cost
                    refuse_if_too_long(done, total, time.monotonic() - started, "--draws", "predictions",
                                       per_flag=max(1, total // len(draws)))
            if not times:
                out[id(r)] = None
                continue
            rng = spread(times)
            out[id(r)] = {"low": rng.low, "median": rng.median, "high": rng.high, "draws": rng.draws,
                          "fits_in_draws": len(times) / len(draws)}
    ticker.close(f"{done:,} predictions under parameter draws")
    return out


def print_ranges(rows, ranges) -> None:
    drawn = [(r, ranges.get(id(r))) for r in rows if ranges.get(id(r))]
    if not drawn:
        return
    print(f"  range over {drawn[0][1]['draws']} draws (parameters from the fit's covariance, if it has one; "
          f"varying links' bandwidths from their samples) (5th..95th percentile):")
    for r, g in drawn:
        print(f"    {r.technique:<10} {host_list(r.hosts):<8} {fmt_duration(g['low']):>10} .. {fmt_duration(g['high']):<10} "
              f"(median {fmt_duration(g['median'])})")


def describe_cluster(cluster) -> str:
    if len(cluster.hosts) <= 4:
        hosts = ", ".join(f"{h.name}: {len(h.gpus)}x {h.gpus[0].name} @{h.site}" for h in cluster.hosts)
    else:  # interchangeable VMs as one group (geosim.inputs.structure.host_groups)
        hosts = ", ".join(f"{host_list(g.hosts)}: {len(g.gpus)}x {g.gpus[0]} @{g.site}" for g in host_groups(cluster))
    links = wan_links(cluster)
    if not links:  # one VM, or VMs of one site: nothing crosses a WAN
        return f"{hosts}; no WAN link"
    rtts = sorted({round(s_to_ms(link.rtt_s), 1) if link.rtt_estimated else s_to_ms(link.rtt_s) for link in links})
    estimated = any(link.rtt_estimated for link in links)
    shown = '/'.join(f'{r:g}' for r in rtts) if len(rtts) <= 6 else f"{rtts[0]:g} to {rtts[-1]:g}"
    return f"{hosts}; RTT {shown} ms" + (" (estimated from distance)" if estimated else "")


def print_verdict_head(cluster, plan, notes=()) -> None:
    """What predict and plan print first about a cluster: its hosts, the verdict, its notes and why
    Algorithm 1 differs."""
    print(f"\n{cluster.name}  ({describe_cluster(cluster)})")
    print(f"  {plan.verdict('verdict')}")
    for note in notes:
        print(f"  note: {note}")
    why = plan.why_algorithm1_differs()
    if why:
        print(f"  why Algorithm 1 differs: {why}")


def print_slice(case, plan, rows: list[Prediction], targets, ranges=None, notes=(), layout: bool = False,
                by_part: bool = False) -> None:
    cluster, model, workload = case.cluster, case.model, case.workload
    print_verdict_head(cluster, plan, notes)
    print(f"  {model.name}, {workload.epochs} epochs of {workload.tokens_per_epoch:,} tokens, batch {workload.global_batch} "
          f"x {workload.seq_len}, {workload.microbatches} microbatches, {workload.precision}{', remat' if workload.checkpointing else ''}, runtime "
          f"{workload.runtime}; params: "
          f"{case.params.source}; {ESTIMATE_NOTE}")
    synchronous = [r for r in rows if not is_low_communication(r.technique)]
    if synchronous:
        print_table(cluster, workload, synchronous, by_part)
        for r in (r for r in synchronous if layout and r.description):  # the layout asked, as built
            print(f"  {r.technique} on {host_list(r.hosts)}: {r.description}")
        if ranges:
            print_ranges(synchronous, ranges)
    # the socket links whose TCP window, not their line, limits a row's flows (each row's JSON lists its own),
    # links limited alike named once: a 256-host site would otherwise print 255 lines
    for note in window_notes(rows):
        print(f"  window: {note}")
    if targets:
        print_targets([(r, targets[id(r)]) for r in rows if id(r) in targets], plan, by_part)
    differs = runtime_differences(runtime_of(workload, case.params), case.params)
    if differs:  # why a time under another runtime is not Alpa's (the study's fit)
        print(f"  runtime {workload.runtime}, against the study's Alpa fit: {'; '.join(differs)} "
              f"(geosim/data/runtimes.toml)")


def print_table(cluster, workload, rows: list[Prediction], by_part: bool = False) -> None:
    head = (f"  {'technique':<10} {'VMs':<8} {'total':>10} {'per epoch':>10} {'TFLOP/s':>8} {'mem/GPU':>9}  "
            f"{'compute':>7} {'comm':>5} {'bubble':>6} {'ovhd':>5}  measured")
    print(head)
    print("  " + "-" * (len(head) - 2))
    ok = sorted((r for r in rows if r.ok), key=lambda r: (len(r.hosts) != len(cluster.hosts), r.total_time_s))
    for r in ok + [r for r in rows if not r.ok]:
        vms = host_list(r.hosts)
        if not r.ok:
            print(f"  {r.technique:<10} {vms:<8} fails: {r.reason}")
            parts = memory_by_part_line(r, by_part)
            if parts:
                print(f"  {'':<10} {'':<8} {parts}")
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
        print_memory_lines(r, by_part)
        if r.iteration_time_interval_s:
            print(f"  {'':<10} {'':<8} {interval_line(r)}")
    print_estimates(rows)


def print_memory_lines(r: Prediction, by_part: bool, indent: str = "  ") -> None:
    """Under a row: its memory note, and its memory by part (asked, or a sharded layout's)."""
    pad = f"{indent}{'':<10} {'':<8}"
    if r.memory_note:
        print(f"{pad} memory: {r.memory_note}")
    parts = memory_by_part_line(r, by_part)
    if parts:
        print(f"{pad} {parts}")


def window_notes(rows) -> list[str]:
    """One note per kind of window-limited link of the rows (the first such link named, the others counted)."""
    from geosim.sim.network.tcp import WindowLimit

    links = {tuple(w["between"]): WindowLimit(**{k: v for k, v in w.items() if k != "note"})
             for r in rows for w in r.window_limited}
    kinds: dict[tuple, list] = {}
    for limit in links.values():
        kinds.setdefault(limit.alike_key(), []).append(limit)
    return [alike[0].describe(len(alike) - 1) for alike in kinds.values()]


def interval_line(p: Prediction) -> str:
    """A prediction resting on an estimated efficiency entry: its step's interval (predict's and plan's rows)."""
    low, high = p.iteration_time_interval_s
    return f"estimated efficiency: a step {low:.3g} to {high:.3g} s (predicted {p.iteration_time_s:.3g} s)"


def print_estimates(rows, indent: str = "  ") -> None:
    """The estimated efficiency entries the rows rest on, once each, with where each estimate comes from."""
    said = list(dict.fromkeys(e for r in rows for e in getattr(r, "estimated", ())))
    for phrase in said:
        print(f"{indent}estimate: {phrase} (no measured or published entry; docs/reference/runtimes.md, \"Efficiency per GPU generation\")")


def print_targets(rows, plan, by_part: bool = False) -> None:
    """Low-communication techniques on time to target, beside Data and the verdict's best."""
    if not rows:
        return
    tokens = rows[0][1]["target_tokens"]
    print(f"  time to target ({tokens:.3g} tokens of Data's progress = tokens / token efficiency / tokens per s "
          f"+ start-up; an estimate: efficiencies are assumed unless measured)")
    best = plan.best
    ok = sorted((x for x in rows if x[0].ok), key=lambda x: (-len(x[0].hosts), x[1]["time_to_target_s"]))
    same = _same_as(ok)
    print(f"    {'technique':<10} {'VMs':<8} {'to target':>10}  {'efficiency':>10}  {'vs verdict':>10}  efficiency from")
    for r, t in ok:
        versus = f"{t['time_to_target_s'] / best.ranked_time_s:.2f}x" if best else "-"
        twin = f"; the same run as {label(same[id(r)])} here" if id(r) in same else ""
        source = t["token_efficiency_source"].replace(f"{r_params_source(t)} ", "")
        print(f"    {r.technique:<10} {host_list(r.hosts):<8} {fmt_duration(t['time_to_target_s']):>10}  "
              f"{t['token_efficiency']:>10.3g}  {versus:>10}  {source}{twin}")
        print_memory_lines(r, by_part, "    ")
    for r in (r for r, _ in rows if not r.ok):  # why, in the table: not only in --json
        print(f"    {r.technique:<10} {host_list(r.hosts):<8} does not run: {r.reason}")
        parts = memory_by_part_line(r, by_part)
        if parts:
            print(f"    {'':<10} {'':<8} {parts}")


def r_params_source(fields: dict) -> str:
    """The parameters file's path at the start of an efficiency's source: the header names it already."""
    source = fields["token_efficiency_source"]
    return source.split(" [", 1)[0] if " [" in source else ""


def _same_as(rows) -> dict[int, str]:
    """Rows whose run is the same as an earlier row's (the hybrid is SparseLoCo where every VM holds
    a replica): say so instead of leaving two identical lines unexplained."""
    seen, same = {}, {}
    for r, t in rows:
        key = (tuple(r.hosts), round(r.total_time_s, 6), r.peak_memory_gib, t["token_efficiency"])
        if key in seen:
            same[id(r)] = seen[key]
        else:
            seen[key] = r.technique
    return same
