"""`geosim sweep`: a what-if grid (RTT, bandwidth, model, batch, ...) in parallel, with crossovers."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from geosim.inputs.case import DEFAULT_NETWORK
from geosim.cli.common import (LAYOUT_BOUNDS, WORKLOAD_DEFAULTS, add_json_argument, add_layout_arguments,
                               check_layout_techniques, fmt_duration, layout_arguments, add_progress_arguments,
                               check_progress_arguments, model_of, refuse_progress)
from geosim.cli.vocabulary import CommaList, add_renamed, meaning
from geosim.base.errors import GeosimError
from geosim.base.validate import count
from geosim.inputs.scenario import BUILTIN_SCENARIOS
from geosim.sim.network import network_names
from geosim.inputs.runtime import check_runtime_name
from geosim.studies.sweep.grid import (NATIVE, Grid, WORKLOAD_KINDS, count_values, parse_assignment, parse_values,
                                       refuse_grid)
from geosim.base.units import RANGE_SYNTAX
from geosim.inputs.scale import DEFAULT_GPU, scale_name
from geosim.techniques import default_techniques, get_technique, technique_names

HELP = "sweep a grid of what-ifs (RTT, bandwidth, model, batch, ...) in parallel, locally or on Ray; find crossovers"

# every numeric flag's bound, checked before the command runs (geosim/base/validate.py check_flags)
FLAG_BOUNDS = {"sweep": {"--workers": count(1024, "worker processes on one machine"), **LAYOUT_BOUNDS}}

DEFAULT_RTT = "native,0.1,0.2,0.5,1,2,5,10,20,50,100,150"
METRICS = ("total_time_s", "time_per_epoch_s")


def add_arguments(p) -> None:
    g = p.add_argument_group(f"grid (each takes a comma list; numbers also ranges: {RANGE_SYNTAX})")
    g.add_argument("--scenario", action=CommaList, metavar="NAME|FILE",
                   help=f"built-in scenario or scenario file; repeatable and comma-separated "
                        f"(default: {', '.join(BUILTIN_SCENARIOS)})")
    g.add_argument("--site-count", dest="num_sites", metavar="N",
                   help="generate N-site clusters (with --hosts-per-site, --gpus-per-host)")
    g.add_argument("--hosts-per-site", dest="vms_per_site", metavar="M", default="1",
                   help="VMs per site of generated clusters (default %(default)s)")
    g.add_argument("--gpus-per-host", dest="gpus_per_vm", metavar="G", default="8",
                   help="GPUs per VM of generated clusters (default %(default)s)")
    add_renamed(g, "--num-sites", "--site-count", dest="num_sites")
    add_renamed(g, "--vms-per-site", "--hosts-per-site", dest="vms_per_site")
    add_renamed(g, "--gpus-per-vm", "--gpus-per-host", dest="gpus_per_vm")
    g.add_argument("--rtt-ms", metavar="SPEC", default=DEFAULT_RTT,
                   help="WAN round-trip times in ms; 'native' = the scenario's own (default %(default)s)")
    g.add_argument("--bandwidth-gbps", metavar="SPEC", default="native",
                   help="WAN bandwidths in Gbit/s; 'native' = the scenario's own (default %(default)s)")
    g.add_argument("--model", metavar="SPEC", default="gpt2m", help="models, e.g. gpt2m,gpt2-large (default %(default)s)")
    g.add_argument("--model-config", metavar="PATH", help=meaning("--model-config"))
    g.add_argument("--technique", action=CommaList, metavar="NAME",
                   help="techniques, or 'all'; repeatable and comma-separated (default: every technique found, "
                        "as predict, plan and select rank, so the best option against RTT is theirs)")
    g.add_argument("--gpu", metavar="SPEC", default=NATIVE,
                   help="every host's GPU model, e.g. A30,H100 ('native': each scenario's own); with --site-count "
                        f"the generated clusters' ({DEFAULT_GPU} where native), the scenarios given kept as "
                        "they are (default %(default)s)")
    add_renamed(g, "--replace-gpu", "--gpu", dest="gpu")
    add_renamed(g, "--scale-gpu", "--gpu", dest="scale_gpu")
    g.add_argument("--hosts", metavar="SPEC", default="all",
                   help="VM subsets to sweep: 'all', VM names, names joined by + (vm1+vm2), comma-separated "
                        "(default %(default)s)")
    add_renamed(g, "--subsets", "--hosts", dest="hosts")
    g.add_argument("--global-batch", metavar="SPEC",
                   help=f"{meaning('--global-batch')} (default: the scenario's, else {WORKLOAD_DEFAULTS.global_batch})")
    g.add_argument("--microbatches", metavar="SPEC",
                   help=f"{meaning('--microbatches')} (default: the scenario's, else {WORKLOAD_DEFAULTS.microbatches})")
    g.add_argument("--epochs", metavar="SPEC",
                   help=f"{meaning('--epochs')} (default: the scenario's, else {WORKLOAD_DEFAULTS.epochs})")
    g.add_argument("--runtime", metavar="SPEC", help=f"{meaning('--runtime')} (default: the scenario's, else "
                                                    f"{WORKLOAD_DEFAULTS.runtime})")
    g.add_argument("--remat", action="store_true", help=f"{meaning('--remat')} (default: the scenario's "
                                                        f"checkpointing, else off; --set checkpointing=true,false sweeps both)")
    g.add_argument("--set", action="append", metavar="FIELD=SPEC", default=[],
                   help=f"any workload field ({', '.join(WORKLOAD_KINDS)}); repeatable")
    add_layout_arguments(p)  # every point's layout: a row where it does not fit the point's hosts says why
    add_progress_arguments(p)  # the question's measure, as predict, plan and select take it (refused here: run())
    r = p.add_argument_group("run")
    r.add_argument("--sweep-dir", dest="out", default="sweep", metavar="DIR",
                   help="results directory; a rerun resumes it (default ./%(default)s)")
    add_renamed(r, "--out", "--sweep-dir", dest="out")
    add_renamed(r, "--out-dir", "--sweep-dir", dest="out")
    r.add_argument("--fresh", action="store_true", help="discard rows already in --sweep-dir instead of resuming")
    r.add_argument("--params", metavar="FILE", help=meaning("--params"))
    r.add_argument("--network", default=DEFAULT_NETWORK, choices=network_names(),
                   help=f"{meaning('--network')} (default: %(default)s)")
    r.add_argument("--workers", type=int, metavar="N", help="worker processes (default: all cores)")
    r.add_argument("--ray-address", metavar="ADDR", help="run on a Ray cluster: 'auto', ray://host:10001, or 'local'")
    r.add_argument("--metric", choices=METRICS, default="total_time_s", help="what crossovers compare (default %(default)s)")
    r.add_argument("--crossover-axis", choices=("auto", "rtt_ms", "bandwidth_gbps", "none"), default="auto",
                   help="the axis to find crossovers on; auto: RTT if the grid varies it, else bandwidth "
                        "(default %(default)s)")
    r.add_argument("--no-best", action="store_true",
                   help="skip the best option at each RTT (the planner's ranking, as `geosim plan` gives it)")
    r.add_argument("--quiet", action="store_true", help=meaning("--quiet"))
    add_json_argument(p)


def count_grid(args) -> None:
    """Refuse a grid of more than MAX_GRID_POINTS from its axes' sizes, before any axis is built (two
    ranges of 100,000 values, or generated clusters of every size in three ranges, are counted, not made)."""
    sites = [(args.num_sites, "int", "--site-count"), (args.vms_per_site, "int", "--hosts-per-site"),
             (args.gpus_per_vm, "int", "--gpus-per-host")]
    scenarios = count_values(args.scenario or [",".join(BUILTIN_SCENARIOS)], "str", "--scenario")
    gpus = count_values(args.gpu, "str", "--gpu")
    if args.num_sites:
        built = gpus if not getattr(args, "scale_gpu", None) else 1
        scenarios = (scenarios if args.scenario else 0) + math.prod(count_values(*s) for s in sites) * built
        gpus = 1
    sizes = {"scenario": scenarios, "technique": count_values(args.technique, "str", "--technique"),
             "model": count_values(args.model, "str", "--model"),
             "rtt_ms": count_values(args.rtt_ms, "float", "--rtt-ms"),
             "bandwidth_gbps": count_values(args.bandwidth_gbps, "float", "--bandwidth-gbps"), "gpu": gpus,
             "hosts": count_values(args.hosts, "str", "--hosts")}
    for name in ("global_batch", "microbatches", "epochs"):
        sizes[name] = count_values(getattr(args, name), "int", f"--{name.replace('_', '-')}")
    sizes["runtime"] = count_values(args.runtime, "str", "--runtime")
    for text in args.set:
        name, _, spec = text.partition("=")
        sizes[name.strip()] = count_values(spec, WORKLOAD_KINDS.get(name.strip(), "str"), "--set")
    refuse_grid(math.prod(sizes.values()), sizes, counted=True)


def build_grid(args) -> Grid:

    count_grid(args)
    scenarios = parse_values(args.scenario or [",".join(BUILTIN_SCENARIOS)], "str", "--scenario")
    gpus = parse_values(args.gpu, "str", "--gpu", allow_native=True)
    if args.num_sites:  # --gpu names the generated clusters' GPUs: they are built of them, not edited
        scenarios = [] if not args.scenario else scenarios
        built = ([getattr(args, "scale_gpu", None)] if getattr(args, "scale_gpu", None)
                 else [DEFAULT_GPU if g == NATIVE else g for g in gpus])
        gpus = [NATIVE]
        for s in parse_values(args.num_sites, "int", "--site-count"):
            for v in parse_values(args.vms_per_site, "int", "--hosts-per-site"):
                for g in parse_values(args.gpus_per_vm, "int", "--gpus-per-host"):
                    scenarios += [scale_name(s, v, g, name) for name in dict.fromkeys(built)]
    axes = {
        "scenario": scenarios,
        "technique": _techniques(args.technique),
        "model": [model_of(args).name] if args.model_config else parse_values(args.model, "str", "--model"),
        "rtt_ms": parse_values(args.rtt_ms, "float", "--rtt-ms", allow_native=True),
        "bandwidth_gbps": parse_values(args.bandwidth_gbps, "float", "--bandwidth-gbps", allow_native=True),
        "gpu": gpus,
        "hosts": parse_values(args.hosts, "str", "--hosts"),
    }
    for name in ("global_batch", "microbatches", "epochs"):
        if getattr(args, name):
            axes[name] = parse_values(getattr(args, name), "int", f"--{name.replace('_', '-')}")
    if args.runtime:
        axes["runtime"] = [check_runtime_name(r) for r in parse_values(args.runtime, "str", "--runtime")]
    if args.remat:
        axes["checkpointing"] = [True]
    for text in args.set:
        name, values = parse_assignment(text)
        axes[name] = values
    from geosim.inputs.scenario import WORKLOAD_RANGES
    from geosim.base.validate import check_number

    for name in WORKLOAD_KINDS:  # each value in a scenario's range, before any point runs
        for value in axes.get(name, []) if WORKLOAD_KINDS[name] == "int" else []:
            check_number(value, f"--{name.replace('_', '-')}", None, *WORKLOAD_RANGES.get(name, (1, 10**13)),
                         integer=True)
    layout = layout_arguments(args)
    check_layout_techniques(axes["technique"], layout)
    return Grid(axes, layout)


def _techniques(names: list[str] | None) -> list[str]:

    if not names:
        return default_techniques()  # predict's, plan's and select's set: one best option for all four
    found = list(dict.fromkeys(t for n in names for t in (technique_names() if n == "all" else [n])))
    for name in found:
        get_technique(name)  # unknown names fail before any work
    return found


def run(args) -> int:
    from geosim.studies.crossover import crossovers, orders_at_ends, pick_axis
    from geosim.studies.sweep.run import make_context, make_executor, run_sweep
    from geosim.studies.sweep.best import best_vs_rtt
    from geosim.studies.sweep.store import write_best, write_crossovers

    if args.workers is not None and not 1 <= args.workers <= 1024:
        raise GeosimError(f"must be in 1..1024, got {args.workers}", source="--workers")
    check_progress_arguments(args)
    refuse_progress(args, "a sweep's rows are whole runs of the workload, ranked on their tokens at the parameters "
                          "file's efficiencies; rank on another progress with `geosim plan --sweep-rtt` and this flag")
    grid = build_grid(args)
    models = {m.name: m for m in [model_of(args)]} if args.model_config else None
    ctx = make_context(grid, args.params, args.metric, args.network, models=models)
    axis = pick_axis(grid.axes) if args.crossover_axis == "auto" else (None if args.crossover_axis == "none" else args.crossover_axis)
    started = time.perf_counter()
    # starting Ray takes seconds to minutes on a busy machine (its raylet waits up to 30 s): the clock shows
    with _beat(not args.quiet and bool(args.ray_address), "starting Ray"):
        executor = make_executor(ctx, args.workers, args.ray_address)
    try:
        on_tty = not args.quiet and sys.stderr.isatty()
        # progress lines come from a thread (started after the pool's workers are forked), so a chunk of
        # slow points, or the planning after them, still shows the clock; a terminal has the bar instead,
        # except under Ray, whose chunks come back whole (8 slow points were one silent chunk of 240 s)
        with _beat(not args.quiet and (not on_tty or executor.name == "ray"), "0 points computed") as beat:
            result = run_sweep(grid, ctx, args.out, executor, fresh=args.fresh, progress=on_tty,
                               on_chunk=lambda done: setattr(beat, "phase", f"{done:,}/{len(grid):,} points computed"))
        with _beat(not args.quiet, "finding crossovers") as beat:
            found = crossovers(result.table, ctx, executor, axis, technique_names()) if axis else []
            beat.phase = "planning the best option at each RTT"
            best = [] if args.no_best or axis != "rtt_ms" else best_vs_rtt(result.table, ctx, executor)
    except KeyboardInterrupt:
        from geosim.studies.sweep.store import count_lines

        print(f"geosim sweep: interrupted; {count_lines(args.out)} rows are on disk in {args.out}/ "
              "(rerun the same command to resume)", file=sys.stderr)
        raise
    finally:
        executor.close()
    write_crossovers(args.out, found)
    write_best(args.out, best)
    summary = _summary(grid, result, found, axis, executor.name, executor.workers, time.perf_counter() - started, args)
    summary["orders"] = orders_at_ends(result.table, axis, args.metric) if axis else []
    summary["best"] = best
    if args.json:
        print(json.dumps(summary, indent=1, allow_nan=False))
    else:
        print(format_summary(summary))
    return 0


class _Silent:
    phase = ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def _beat(shown: bool, phase: str):
    from geosim.cli._progress import Heartbeat

    return Heartbeat("sweep", phase) if shown else _Silent()


def _summary(grid, result, found, axis, executor, workers, seconds, args) -> dict:
    # by name: a resumed sweep's as a fresh one's; "ok" always (0 when no point ran: the schema's one required count)
    statuses = dict(sorted({"ok": 0, **result.table.statuses()}.items()))
    return {
        "out": str(Path(args.out)), "points": result.total, "computed": result.computed, "resumed": result.skipped,
        "statuses": statuses, "executor": executor, "workers": workers,
        "sweep_seconds": round(result.seconds, 3), "points_per_s": round(result.points_per_s, 1),
        "total_seconds": round(seconds, 3), "metric": args.metric, "crossover_axis": axis,
        "axes": {k: v for k, v in grid.axes.items()},
        "crossovers": [{k: v for k, v in c.items() if k != "metric"} for c in found],
        # rows resting on estimated efficiency entries (runtime on a GPU generation), by those entries; each
        # such row carries them (`estimated`) and its step's interval (iteration_time_low_s, _high_s)
        "estimated": dict(sorted(result.table.estimated.items())),
    }


def format_summary(s: dict) -> str:
    from geosim.studies.crossover import describe

    unit = {"rtt_ms": "ms", "bandwidth_gbps": "Gbit/s"}.get(s["crossover_axis"], "")
    statuses = ", ".join(f"{n} {k}" for k, n in sorted(s["statuses"].items()))
    lines = [f"{s['points']} points in {s['out']}/ ({s['computed']} computed, {s['resumed']} resumed; {statuses})",
             f"{s['computed']} predictions in {s['sweep_seconds']:.1f} s = {s['points_per_s']:g} points/s "
             f"on {s['workers']} {s['executor']} worker(s); {s['total_seconds']:.1f} s with crossovers"]
    for phrase, n in s.get("estimated", {}).items():
        lines.append(f"{n} row(s) rest on estimated efficiency ({phrase}); each row gives its step's interval "
                     "(iteration_time_low_s, iteration_time_high_s)")
    flips = [c for c in s["crossovers"] if c["at"] is not None]
    if s["crossover_axis"]:
        lines += ["", f"Crossovers on {s['crossover_axis']} ({s['metric']}; bisection on the simulator to 0.1%):"]
        rows = [(describe(c["point"], s["crossover_axis"]), f"{c['a']} / {c['b']}", f"{c['at']:.4g} {unit}",
                 c["faster_below"], c["faster_above"]) for c in flips]
        lines += _table(("where", "pair", "flips at", "faster below", "faster above"), rows) if rows else ["  none in the grid"]
        if s.get("orders"):
            lines += ["", "Techniques fastest first, at both ends of the range:"]
            lines += _table(("where", "low end", "order", "high end", "order"),
                            [(o["where"], f"{o['low']['at']:g} {unit}", _order(o["low"], s["metric"]), f"{o['high']['at']:g} {unit}",
                              _order(o["high"], s["metric"])) for o in s["orders"]])
    lines += format_best(s.get("best", []))
    lines += ["", f"plots and report: geosim report --sweep-dir {s['out']}"]
    return "\n".join(lines)


def format_best(best: list[dict]) -> list[str]:
    """The best option at each RTT by the planner's ranking: what `geosim plan --sweep-rtt` says too."""
    from geosim.studies.crossover import describe

    if not best:
        return []
    lines = ["", "Best option against RTT (the planner's ranking over the swept techniques, single VMs and "
                 "Pipeshard's splits included; the same as `geosim plan --sweep-rtt`):"]
    for doc in best:
        where = describe({**doc["point"], "technique": "", "rtt_ms": ""}, "rtt_ms")
        if doc.get("skipped"):
            lines.append(f"  {where}: not planned ({doc['skipped']})")
            continue
        rows = doc["rows"]
        first, last = rows[0], rows[-1]
        lines.append(f"  {where}: {first['best']} at {first['rtt_ms']:g} ms ({fmt_duration(first['total_time_s'])})"
                     + (f", {last['best']} at {last['rtt_ms']:g} ms ({fmt_duration(last['total_time_s'])})"
                        if len(rows) > 1 else ""))
        for f in doc["flips"]:
            lo, hi = f["between_ms"]
            lines.append(f"    flips between {lo:g} and {hi:g} ms: {f['below']} -> {f['above']}")
    return lines


METRIC_WORDS = {"total_time_s": "total time", "time_per_epoch_s": "time per epoch"}


def _order(end: dict, metric: str = "total_time_s") -> str:
    text = " < ".join(end["order"]) or "-"
    if end.get("low_communication"):  # their time is not to the same progress: the best option below ranks them
        text += (f"  (not in this order on {METRIC_WORDS.get(metric, metric)}, needing more tokens for Data's "
                 f"progress: {', '.join(end['low_communication'])})")
    return text + "".join(f"  ({t}: {status})" for t, status in end["not_running"].items())


def _table(header, rows) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    out = ["  " + "  ".join(str(h).ljust(w) for h, w in zip(header, widths))]
    out += ["  " + "  ".join(str(v).ljust(w) for v, w in zip(row, widths)) for row in rows]
    return out
