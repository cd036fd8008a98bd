"""geosim trace: one simulated iteration as Chrome trace-event JSON (open in Perfetto or chrome://tracing)."""

from __future__ import annotations

import json

from geosim.inputs.case import Case
from pathlib import Path

from geosim.cli.common import (add_time_limit_argument, LAYOUT_BOUNDS, WORKLOAD_BOUNDS, add_hosts_argument, add_layout_arguments, check_layout_techniques, layout_arguments,
                               technique_options, add_json_argument, add_technique_argument, add_workload_arguments,
                               chosen_techniques, fmt_duration, load_case, load_params_arg, parse_hosts, print_json)
from geosim.sim.engine import run_schedule
from geosim.sim.network import network_backend
from geosim.base.validate import count
from geosim.base.errors import GeosimError
from geosim.base.fileio import check_output_path, write_atomic
from geosim.inputs.runtime import runtime_of
from geosim.techniques import build_schedule

TRACE_SCHEMA = "geosim.trace/1"
HELP = "write one simulated iteration as a Chrome trace (a row per GPU and per link) for Perfetto"

# every numeric flag's bound, checked before the command runs (geosim/base/validate.py check_flags)
FLAG_BOUNDS = {"trace": {**WORKLOAD_BOUNDS, **LAYOUT_BOUNDS,
                         "--iterations": count(100, "each iteration adds every op as a trace event")}}


def add_arguments(parser) -> None:
    add_workload_arguments(parser, many_scenarios=False)
    add_technique_argument(parser, "pipeshard; several write one file each, OUT with -TECHNIQUE before its suffix")
    add_layout_arguments(parser)
    add_hosts_argument(parser, what=" (trace takes one set)")
    parser.add_argument("--iterations", type=int, default=2, help="iterations to simulate; the first is cold (default %(default)s)")
    parser.add_argument("--out", default="trace.json", help="trace file to write (default: %(default)s)")

    add_json_argument(parser)
    add_time_limit_argument(parser)


def trace_events(rows: list, devices) -> list[dict]:
    """Chrome trace 'complete' events: pid 1 holds a row per GPU, pid 2 a row per link."""
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "GPUs"}},
              {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "links"}}]
    for d in devices:
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": d.rank,
                       "args": {"name": f"GPU {d.rank} {d.gpu.name} ({d.host})"}})
    link_ids: dict[tuple[str, int], int] = {}
    lanes = link_lanes(rows)
    for i, (kind, where, label, start, end, amount) in enumerate(rows):
        if kind == "link":
            track = (where, lanes[i])
            if track not in link_ids:
                link_ids[track] = len(link_ids)
                name = where if lanes[i] == 0 else f"{where} ({lanes[i] + 1})"
                events.append({"ph": "M", "name": "thread_name", "pid": 2, "tid": link_ids[track], "args": {"name": name}})
            pid, tid, args = 2, link_ids[track], {"bytes": amount}
        else:
            pid, tid, args = 1, where, ({"flops": amount} if kind == "gpu" else {"bytes": amount})
        events.append({"ph": "X", "name": label, "cat": kind, "pid": pid, "tid": tid,
                       "ts": start * 1e6, "dur": max(0.0, end - start) * 1e6, "args": args})
    return events


def link_lanes(rows: list) -> dict[int, int]:
    """For each link row (by index), the lane of its link it is drawn on: transfers that share a link
    at once (flows splitting its bandwidth) overlap without nesting, which Perfetto cannot draw on
    one track, so each goes to the first lane of its link that is free by its start."""
    by_link: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        if row[0] == "link":
            by_link.setdefault(row[1], []).append(i)
    lane_of: dict[int, int] = {}
    for indices in by_link.values():
        ends: list[float] = []  # each lane's last end
        for i in sorted(indices, key=lambda i: (rows[i][3], rows[i][4])):
            start, end = rows[i][3], rows[i][4]
            lane = next((k for k, last in enumerate(ends) if last <= start), len(ends))
            if lane == len(ends):
                ends.append(end)
            else:
                ends[lane] = end
            lane_of[i] = lane
    return lane_of


def out_paths(out: str, techniques: tuple[str, ...]) -> dict[str, str]:
    """One trace file per technique: OUT itself for one, OUT with -TECHNIQUE before its suffix for several."""
    if len(techniques) == 1:
        return {techniques[0]: out}
    path = Path(out)
    return {t: str(path.with_name(f"{path.stem}-{t}{path.suffix}")) for t in techniques}


def run(args) -> int:
    if not 1 <= args.iterations <= 100:
        raise GeosimError(f"must be in 1..100, got {args.iterations}", source="--iterations")
    techniques = chosen_techniques(args.technique, default=("pipeshard",))
    layout = layout_arguments(args)
    check_layout_techniques(techniques, layout)
    outs = {t: check_output_path(o, "--out") for t, o in out_paths(args.out, techniques).items()}
    params = load_params_arg(args)
    scenario, cluster, model, workload = load_case(args.scenario, args)
    (hosts,) = parse_hosts(args.hosts, cluster, one=True)
    cluster = cluster.subset(hosts) if len(hosts) < len(cluster.hosts) else cluster
    docs = [_trace(args, technique, outs[technique], cluster, model, workload, params, layout) for technique in techniques]
    if args.json:  # one shape for one technique or several (docs/reference/cli.md, "JSON answers")
        print_json({"schema": TRACE_SCHEMA, "scenario": cluster.name, "model": model.name, "hosts": list(hosts),
                    "traces": docs})
    return 0


# a trace event is ~150 bytes of JSON and ~0.8 KB while it is built: a million are a 150 MB file
# written by a process of under 1 GB
MAX_TRACE_EVENTS = 1_000_000


def check_trace_size(schedule, iterations: int) -> int:
    """Refuse, before simulating, a trace that would pass MAX_TRACE_EVENTS; returns the estimate: every
    rank's ops per iteration with each collective's ring steps (a send and a receive each, every one an
    event: geosim.cost.schedule_work), the events a trace records at most (4,096 microbatches x 100
    iterations were a 1 GB file; data on 1,024 GPUs is 4 million steps an iteration, not the 1,024 ops
    its programs list)."""
    from geosim.cost import schedule_work

    ops = schedule_work(schedule, 1)
    if ops * iterations > MAX_TRACE_EVENTS:
        most = MAX_TRACE_EVENTS // max(ops, 1)
        fix = (f"use --iterations {most} or fewer, or fewer --microbatches" if most >= 1 else
               "one iteration is already more: trace fewer hosts (--hosts) or fewer --microbatches")
        raise GeosimError(f"about {ops * iterations:,} trace events ({ops:,} ops and collective steps per iteration x "
                          f"{iterations}), more than a trace holds ({MAX_TRACE_EVENTS:,}, ~150 MB): {fix}",
                          source="--iterations" if most >= 1 else "--hosts")
    return ops * iterations


def json_chunks(doc: dict, key: str = "traceEvents", batch: int = 10_000):
    """`doc` as JSON text in pieces, its long list `key` a batch of items at a time (json.dumps at C
    speed on each): a million events are never one 150 MB string in memory."""
    items = doc[key]
    rest = json.dumps({k: v for k, v in doc.items() if k != key}, allow_nan=False)
    yield "{" + json.dumps(key) + ": ["
    for start in range(0, len(items), batch):
        yield ("," if start else "") + ",".join(json.dumps(e, allow_nan=False) for e in items[start:start + batch])
    yield "]" + ("" if rest == "{}" else ", " + rest[1:-1]) + "}"


def _trace(args, technique, out, cluster, model, workload, params, layout=None) -> dict:
    case = Case(cluster, model, workload, params, network=args.network)
    options = technique_options(technique, case, tuple(h.name for h in cluster.hosts), layout)
    try:
        schedule = build_schedule(technique, case, options)
    except GeosimError as exc:  # a layout this case cannot run: one line naming the technique
        raise GeosimError(f"{technique} cannot run as asked: {exc.problem}", source="trace") from None
    from geosim.cli._progress import Heartbeat
    from geosim.cost import check_expansion

    events = check_trace_size(schedule, args.iterations)
    with Heartbeat("trace", f"simulating about {events:,} events") as beat:  # a line every few seconds
        result = run_schedule(schedule, cluster, runtime_of(workload, params).applied_to(params), workload,
                              iterations=args.iterations, network=network_backend(case.network), trace=True,
                              admit=check_expansion)  # a trace runs every rank: their steps bounded first
        doc = {"traceEvents": trace_events(result.trace, schedule.devices), "displayTimeUnit": "ms",
               "otherData": {"scenario": cluster.name, "technique": technique, "model": model.name,
                             "description": schedule.description, "iteration_end_s": result.iteration_end}}
        beat.phase = f"writing {len(doc['traceEvents']):,} events to {out}"
        write_atomic(out, json_chunks(doc))
    summary = {"out": str(out), "scenario": cluster.name, "technique": technique, "model": model.name,
               "iterations_s": [result.iteration_time(i) for i in range(args.iterations)],
               "events": len(doc["traceEvents"]), "description": schedule.description}
    if not args.json:
        times = ", ".join(fmt_duration(result.iteration_time(i)) for i in range(args.iterations))
        print(f"wrote {out}: {technique} on {cluster.name}, {args.iterations} iteration(s) ({times}), "
              f"{len(doc['traceEvents'])} events; open it in https://ui.perfetto.dev")
    return summary
