"""geosim trace: one simulated iteration as Chrome trace-event JSON (open in Perfetto or chrome://tracing)."""

from __future__ import annotations

import json

from geosim.case import Case
from geosim.cli.common import add_json_argument, add_workload_arguments, fmt_duration, load_case, load_params_arg, print_json
from geosim.sim.engine import run_schedule
from geosim.sim.network import network_model
from geosim.errors import GeosimError
from geosim.fileio import check_output_path, write_atomic
from geosim.runtime import runtime_of
from geosim.techniques import build_schedule
from geosim.validate import host_names

HELP = "write one simulated iteration as a Chrome trace (a row per GPU and per link) for Perfetto"


def add_arguments(parser) -> None:
    add_workload_arguments(parser, many_scenarios=False)
    parser.add_argument("--technique", default="pipeshard", help="technique to trace (default: %(default)s)")
    parser.add_argument("--hosts", help="VMs of the slice to use, comma-separated names (default: all)")
    parser.add_argument("--iterations", type=int, default=2, help="iterations to simulate; the first is cold (default %(default)s)")
    parser.add_argument("--out", default="trace.json", help="trace file to write (default: %(default)s)")
    add_json_argument(parser)


def trace_events(rows: list, devices) -> list[dict]:
    """Chrome trace 'complete' events: pid 1 holds a row per GPU, pid 2 a row per link."""
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "GPUs"}},
              {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "links"}}]
    for d in devices:
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": d.rank,
                       "args": {"name": f"GPU {d.rank} {d.gpu.name} ({d.host})"}})
    link_ids: dict[str, int] = {}
    for kind, where, label, start, end, amount in rows:
        if kind == "link":
            if where not in link_ids:
                link_ids[where] = len(link_ids)
                events.append({"ph": "M", "name": "thread_name", "pid": 2, "tid": link_ids[where], "args": {"name": where}})
            pid, tid, args = 2, link_ids[where], {"bytes": amount}
        else:
            pid, tid, args = 1, where, ({"flops": amount} if kind == "gpu" else {"bytes": amount})
        events.append({"ph": "X", "name": label, "cat": kind, "pid": pid, "tid": tid,
                       "ts": start * 1e6, "dur": max(0.0, end - start) * 1e6, "args": args})
    return events


def run(args) -> int:
    if not 1 <= args.iterations <= 100:
        raise GeosimError(f"must be in 1..100, got {args.iterations}", source="--iterations")
    out = check_output_path(args.out, "--out")
    params = load_params_arg(args)
    scenario, cluster, model, workload = load_case(args.scenario, args)
    if args.hosts is not None:  # given, even empty: an empty list is a mistake, not "all"
        cluster = cluster.subset(host_names(args.hosts, [h.name for h in cluster.hosts]))
    case = Case(cluster, model, workload, params, network=args.network)
    schedule = build_schedule(args.technique, case)
    result = run_schedule(schedule, cluster, runtime_of(workload, params).applied_to(params), workload, iterations=args.iterations,
                          network=network_model(case.network), trace=True)
    doc = {"traceEvents": trace_events(result.trace, schedule.devices), "displayTimeUnit": "ms",
           "otherData": {"scenario": cluster.name, "technique": args.technique, "model": model.name,
                         "description": schedule.description, "iteration_end_s": result.iteration_end}}
    write_atomic(out, json.dumps(doc, allow_nan=False))
    if args.json:
        print_json({"out": str(out), "scenario": cluster.name, "technique": args.technique, "model": model.name,
                    "iterations_s": [result.iteration_time(i) for i in range(args.iterations)],
                    "events": len(doc["traceEvents"]), "description": schedule.description})
        return 0
    times = ", ".join(fmt_duration(result.iteration_time(i)) for i in range(args.iterations))
    print(f"wrote {out}: {args.technique} on {cluster.name}, {args.iterations} iteration(s) ({times}), "
          f"{len(doc['traceEvents'])} events; open it in https://ui.perfetto.dev")
    return 0
