"""Options and loading shared by the subcommands that predict (predict, trace, select, plan, sweep).

Over 400 lines: every option the predicting commands share, declared once here so that each
command takes the same flags with the same bounds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from geosim.base import plausibility
from geosim.inputs.case import DEFAULT_NETWORK
from geosim.cli._process import note_activity
from geosim.cli.vocabulary import CommaList, add_renamed, meaning
from geosim.base.errors import GeosimError
from geosim.inputs.params import load_params
from geosim.sim.network import network_names
from geosim.inputs.runtime import runtime_names
from geosim.inputs.scale import load_any_scenario
from geosim.inputs.model_config import SHAPE_RANGES
from geosim.inputs.scenario import (BUILTIN_SCENARIOS, PRECISIONS, Scenario, get_model, LINK_RANGES, MAX_GPUS, MODEL_RANGES,
                             WORKLOAD_RANGES, check_number)
from geosim.inputs.specs import Cluster, Model, Params, Workload
from geosim.studies.whatif import with_bandwidth, with_rtt
from geosim.studies.ranking import fmt_time
from geosim.base.units import RANGE_SYNTAX, gbps_to_bps, ms_to_s
from geosim.base.validate import Bound, count

DEFAULT_SWEEP_MS = "0.1,1,2,5,10,20,50,100,200"


WORKLOAD_DEFAULTS = Workload()  # what a scenario without a [workload] table trains: help texts quote these


def add_scenario_argument(parser: argparse.ArgumentParser, *, many: bool = True) -> None:
    if many:
        parser.add_argument("--scenario", action=CommaList, metavar="NAME|FILE",
                            help=f"scenario file, built-in name or a generated cluster (scale:SITESxVMSxGPUS[:GPU], e.g. "
                                 f"scale:3x4x8:H100); repeatable and comma-separated (default: the "
                                 f"study's five slices: {', '.join(BUILTIN_SCENARIOS)})")
    else:
        parser.add_argument("--scenario", default="utah-gpn", metavar="NAME|FILE",
                            help="scenario file, built-in name or a generated cluster (scale:SITESxVMSxGPUS[:GPU]) "
                                 "(default: %(default)s)")


def add_technique_argument(parser: argparse.ArgumentParser, default_help: str = "") -> None:
    default_help = default_help or ("the study's four and the low-communication ones, ranked together on time "
                                    "to the same training progress")
    parser.add_argument("--technique", action=CommaList, metavar="NAME|all",
                        help=f"technique(s); repeatable and comma-separated; 'all': every technique "
                             f"(default: {default_help})")


def add_hosts_argument(parser: argparse.ArgumentParser, default: str | None = None, what: str = "") -> None:
    parser.add_argument("--hosts", default=default, metavar="VMS",
                        help=f"which VMs: names joined by + (vm1+vm2: those together), 'all' (all together), "
                             f"'each' (each alone), comma-separated for several{what} (default: "
                             + ("%(default)s)" if default else "all)"))


def parse_hosts(spec: str | None, cluster, *, one: bool = False, flag: str = "--hosts") -> list[tuple[str, ...]]:
    """--hosts: 'all', 'each', vm1+vm2, comma-separated -> the VM subsets, in order, without repeats.
    one=True: the command takes one set of VMs (trace, calibrate import)."""
    names = tuple(h.name for h in cluster.hosts)
    if spec is None:
        return [names]
    subsets = []
    for item in (x.strip() for x in spec.split(",")):
        if not item:  # given, even empty: an empty name is a mistake, not "all"
            raise GeosimError(f"empty host name in {spec!r} (VM names joined by +, sets separated by commas)",
                              source=flag)
        if item.lower() == "all":
            subsets.append(names)
        elif item.lower() == "each":
            subsets += [(n,) for n in names]
        else:
            chosen = tuple(x.strip() for x in item.split("+"))
            unknown = [n for n in chosen if n not in names]
            if unknown or not all(chosen):
                raise GeosimError(f"no VM {unknown[0] if unknown else item!r} in {cluster.name} (its VMs: "
                                  f"{', '.join(names)}; join names with +)", source=flag)
            if len(set(chosen)) < len(chosen):
                raise GeosimError(f"host(s) named twice: {item}", source=flag)
            subsets.append(chosen)
    named = [x.strip() for x in spec.split(",") if x.strip().lower() not in ("all", "each")]
    repeated = sorted({n for n in named if named.count(n) > 1})
    if repeated:  # named twice by hand is a slip; 'all' and 'each' may cover the same VMs (one VM: both)
        raise GeosimError(f"host(s) named twice: {', '.join(repeated)}", source=flag)
    subsets = list(dict.fromkeys(subsets))
    if one and len(subsets) != 1:
        raise GeosimError(f"takes one set of VMs (join names with +: {'+'.join(names)}), got {spec!r}", source=flag)
    return subsets


def default_techniques() -> tuple[str, ...]:
    """What predict, select and plan rank when --technique is not given: one set, so the three print
    the same verdict (every technique found, low-communication ones at their token efficiency)."""
    from geosim.techniques import default_techniques as every_technique

    return tuple(every_technique())


def chosen_techniques(names: list[str] | None, default: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """--technique's names ('all': every technique), checked before any work; the default when not given."""
    from geosim.techniques import get_technique, technique_names

    if not names:
        return default if default is not None else default_techniques()
    chosen = []
    for name in names:
        if name.lower() == "all":
            chosen += technique_names()
            continue
        try:
            get_technique(name.lower())
        except GeosimError as exc:
            raise GeosimError(exc.problem, source="--technique") from None
        chosen.append(name.lower())
    return tuple(dict.fromkeys(chosen))


def add_workload_arguments(parser: argparse.ArgumentParser, *, many_scenarios: bool = True) -> None:
    w = WORKLOAD_DEFAULTS
    add_scenario_argument(parser, many=many_scenarios)
    parser.add_argument("--model", default="gpt2m", help=f"{meaning('--model')} (default: %(default)s)")
    parser.add_argument("--model-config", metavar="PATH", help=meaning("--model-config"))
    parser.add_argument("--params", metavar="FILE", help=meaning("--params"))
    parser.add_argument("--network", default=DEFAULT_NETWORK, choices=network_names(),
                        help=f"{meaning('--network')} (default: %(default)s)")
    parser.add_argument("--rtt-ms", type=float, metavar="MS",
                        help="set the RTT of the links between sites, ms (default: the scenario's)")
    parser.add_argument("--bandwidth-gbps", type=float, metavar="GBPS",
                        help="set the bandwidth of the links between sites, Gbit/s (default: the scenario's)")
    group = parser.add_argument_group("workload (default: the scenario's [workload], else the values shown)")
    group.add_argument("--epochs", type=int, help=f"{meaning('--epochs')} (default {w.epochs}, as in the study)")
    group.add_argument("--global-batch", type=int, help=f"{meaning('--global-batch')} (default {w.global_batch})")
    group.add_argument("--microbatches", type=int, help=f"{meaning('--microbatches')} (default {w.microbatches})")
    group.add_argument("--tokens-per-epoch", type=int, help=f"{meaning('--tokens-per-epoch')} (default {w.tokens_per_epoch})")
    group.add_argument("--seq-len", type=int, help=f"{meaning('--seq-len')} (default {w.seq_len})")
    group.add_argument("--precision", choices=PRECISIONS, help=f"{meaning('--precision')} (default {w.precision})")
    group.add_argument("--runtime", metavar="NAME", help=f"{meaning('--runtime')}: {', '.join(runtime_names())}, or one "
                       f"a --params file's [runtime.NAME] adds (default {w.runtime})")
    group.add_argument("--remat", action="store_true", help=f"{meaning('--remat')} (default: the scenario's "
                                                            f"checkpointing, else off)")


def _workload_bound(key: str) -> Bound:
    low, high = WORKLOAD_RANGES[key]
    return count(high, f"a scenario's workload.{key} range", low=low)


def _link_bound(key: str) -> Bound:
    return Bound(*LINK_RANGES[key], why=f"a scenario link's {key} range")


# The workload flags' bounds: a scenario's [workload] ranges (geosim/inputs/scenario.py), so a flag and a file agree
WORKLOAD_BOUNDS = {"--epochs": _workload_bound("epochs"), "--global-batch": _workload_bound("global_batch"),
                   "--microbatches": _workload_bound("microbatches"),
                   "--tokens-per-epoch": _workload_bound("tokens_per_epoch"), "--seq-len": _workload_bound("seq_len"),
                   "--rtt-ms": _link_bound("rtt_ms"), "--bandwidth-gbps": _link_bound("bandwidth_gbps")}
MAX_DRAWS = 10_000
DRAWS_BOUNDS = {"--draws": count(MAX_DRAWS, "each draw repeats every prediction: 10,000 gives percentiles to 0.1%")}
DELTA_BOUNDS = {"--delta": Bound(0.0, 10.0, why="a relative TFLOP/s gap; 10 = 1,000%")}
# The flags that size a live run, where live run, select's live probes and fabric calibrate share them
MAX_STEPS = 10_000_000
LIVE_RUN_SIZE_BOUNDS = {
    "--steps": count(MAX_STEPS, "training steps; 10 million steps is weeks of a real run"),
    "--global-batch": count(1_000_000, "sequences per step"),
    "--gpus-per-host": count(512, "virtual CPU devices share this machine's cores; 512 is past any real CPU"),
    "--seconds": Bound(0.0, 3600.0, exclusive_low=True, why="seconds per throughput test"),
}


# layout_options()'s keyword -> its flag (keywords, not strings: "data" would read as the technique's name)
LAYOUT_FLAGS = dict(tensor="--tensor-parallel", pipeline="--pipeline-parallel", data="--data-parallel",
                    virtual="--virtual-stages", layer_split="--layer-split", replica_per="--replica-per",
                    expert="--expert-parallel")


def add_layout_arguments(parser: argparse.ArgumentParser) -> None:
    """A layout the field's way (Megatron-LM's t, p, d, v), for a technique that takes one (Pipeshard),
    and what holds a replica for the low-communication ones; the microbatches are the workload's
    --microbatches."""
    from geosim.techniques._lowcomm import REPLICA_UNITS

    group = parser.add_argument_group("layout (the techniques that take one: pipeshard; --replica-per: diloco, "
                                      "sparseloco, hybrid; --expert-parallel: data; default: their own)")
    for flag in ("--tensor-parallel", "--pipeline-parallel", "--data-parallel", "--virtual-stages", "--expert-parallel"):
        group.add_argument(flag, type=int, metavar="N", help=meaning(flag))
    group.add_argument("--layer-split", metavar="N,N,...", help=meaning("--layer-split"))
    group.add_argument("--replica-per", choices=REPLICA_UNITS, help=meaning("--replica-per"))


LAYOUT_BOUNDS = {"--tensor-parallel": count(1024, "GPUs of a tensor-parallel group inside a host"),
                 "--pipeline-parallel": count(MODEL_RANGES["n_layer"][1], "pipeline stages: at most one per layer"),
                 "--data-parallel": count(MAX_GPUS, "replicas of a stage: at most a cluster's GPUs"),
                 "--virtual-stages": count(MODEL_RANGES["n_layer"][1], "chunks of layers per stage: at most one "
                                                                      "layer each"),
                 "--expert-parallel": count(SHAPE_RANGES["n_expert"][1], "GPUs a mixture of experts' experts are split "
                                                                        "over: at most its experts")}


def layout_arguments(args) -> dict | None:
    """The layout flags given (None: none), --layer-split as whole numbers."""
    layout = {key: getattr(args, flag[2:].replace("-", "_"), None) for key, flag in LAYOUT_FLAGS.items()}
    if all(v is None for v in layout.values()):
        return None
    if layout["layer_split"] is not None:
        try:
            layout["layer_split"] = tuple(int(x) for x in layout["layer_split"].split(","))
        except ValueError:
            raise GeosimError(f"layers per stage, comma-separated whole numbers (e.g. 12,12), got "
                              f"{layout['layer_split']!r}", source="--layer-split") from None
    return layout


def check_layout_techniques(techniques, layout: dict | None) -> None:
    """A layout flag with a technique that takes none of it is a mistake: one line, before any work."""
    from geosim.techniques import takes_layout, technique_names

    for key, value in (layout or {}).items():
        if value is None:
            continue
        others = [t for t in techniques if not takes_layout(t, key)]
        if others:
            takers = [t for t in technique_names() if takes_layout(t, key)]
            raise GeosimError(f"{', '.join(others)} take(s) no layout (give --technique {','.join(takers)} with it)",
                              source=LAYOUT_FLAGS[key])


def technique_options(technique: str, case, hosts, layout: dict | None) -> dict | None:
    """The per-run options of a layout on the hosts asked (None: the technique's own layout)."""
    from geosim.techniques import layout_options

    return layout_options(technique, case, hosts, **layout) if layout else None


def check_layout_plannable(case, techniques, layout: dict | None, max_gpus: int | None = None) -> None:
    """plan and select under a layout: the planner tries it on each set of hosts it fits; one that fits
    none of the planner's sets is the layout's mistake on all the hosts, one line naming its flag."""
    from geosim.studies.plan import shapes
    from geosim.techniques import layout_options

    names = tuple(h.name for h in case.cluster.hosts)
    for technique in techniques if layout else ():
        try:
            layout_options(technique, case, names, **layout)
            continue
        except GeosimError as exc:
            on_all = exc
        for _, hosts in shapes(case, max_gpus, (technique,)):
            try:
                layout_options(technique, case, hosts, **layout)
                break
            except GeosimError:
                pass
        else:
            raise GeosimError(f"{on_all.problem} (nor does it fit a smaller set of hosts the planner tries)",
                              source=on_all.source)


def layout_choices(args, layout: dict | None) -> dict:
    """The planner's choices for a layout asked (predict, plan and select alike): the layout, and where
    --microbatches is given with it, that count too (the configuration asked, Megatron-LM's t, p, d and
    its microbatches); without --microbatches the planner picks the count."""
    if not layout:
        return {}
    return {"layout": layout, "fixed_microbatches": bool(getattr(args, "microbatches", None))}


def refuse_layout(args, why: str) -> None:
    """A command (or a mode of one) that cannot honour a layout flag given: one line saying why."""
    layout = layout_arguments(args)
    if layout:
        flag = next(LAYOUT_FLAGS[k] for k, v in layout.items() if v is not None)
        raise GeosimError(why, source=flag)


def add_progress_arguments(parser: argparse.ArgumentParser) -> None:
    """The question's measure, the same flags in predict, plan, select and sweep: --target-tokens and
    the token efficiencies it is counted at (--token-efficiency, --loss-curves)."""
    parser.add_argument("--target-tokens", metavar="N|chinchilla", help=meaning("--target-tokens"))
    parser.add_argument("--token-efficiency", action="append", metavar="TECHNIQUE=VALUE",
                        help=meaning("--token-efficiency"))
    parser.add_argument("--loss-curves", metavar="FILE", help=meaning("--loss-curves"))


def check_progress_arguments(args) -> None:
    """--target-tokens and --token-efficiency checked before any work, also when no row uses them."""
    from geosim.studies import convergence

    if args.target_tokens and args.target_tokens.strip().lower() != "chinchilla":
        convergence.target_tokens(args.target_tokens, None)
    convergence.parse_overrides(args.token_efficiency)


def same_progress(args, params, model):
    """What every command ranks on (geosim.studies.ranking.SameProgress): --target-tokens (default: the
    workload's own tokens) at each technique's token efficiency (--token-efficiency, --loss-curves, then
    the parameters file)."""
    from geosim.studies import convergence
    from geosim.studies.ranking import SameProgress

    return SameProgress(params, convergence.parse_overrides(args.token_efficiency),
                        convergence.measured_efficiencies(convergence.read_loss_curves(args.loss_curves))
                        if args.loss_curves else None,
                        convergence.target_tokens(args.target_tokens, model) if args.target_tokens else None)


def refuse_progress(args, why: str) -> None:
    """A mode that ranks nothing predicted (measured or live probes): a progress flag given is one line."""
    for flag in ("--target-tokens", "--token-efficiency", "--loss-curves"):
        if getattr(args, flag[2:].replace("-", "_"), None):
            raise GeosimError(why, source=flag)


def add_time_limit_argument(parser: argparse.ArgumentParser) -> None:
    """--time-limit, the same on every question (predict, select, plan, trace): geosim.cli._process.time_limit."""
    from geosim.cli._process import DEFAULT_TIME_LIMIT

    parser.add_argument("--time-limit", metavar="TIME", default=DEFAULT_TIME_LIMIT,
                        help="stop with one line (exit 2) once the command has run this long: 90s, 10min, 2h, or "
                             "none (default: %(default)s; a question that needs longer says what it was doing)")


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help=meaning("--json"))


def add_sweep_rtt_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--sweep-rtt", nargs="?", const=DEFAULT_SWEEP_MS, metavar="MS",
                        help=f"{what} at these RTTs: {RANGE_SYNTAX} (without a value: %(const)s)")


def workload_overrides(args) -> dict:
    return {"epochs": args.epochs, "global_batch": args.global_batch, "microbatches": args.microbatches,
            "tokens_per_epoch": args.tokens_per_epoch, "seq_len": args.seq_len, "precision": args.precision,
            "runtime": getattr(args, "runtime", None),
            "checkpointing": True if getattr(args, "remat", False) else None}


def resolve_cluster(scenario: Scenario, args) -> Cluster:

    cluster = scenario.cluster
    for flag in ("rtt_ms", "bandwidth_gbps"):  # argparse's float() takes 'nan' and 'inf'
        if getattr(args, flag) is not None:
            check_number(getattr(args, flag), f"--{flag.replace('_', '-')}", None, *LINK_RANGES[flag])
            plausibility.check(getattr(args, flag), f"--{flag.replace('_', '-')}", f"--{flag.replace('_', '-')}", flag)
    if args.rtt_ms is not None:
        cluster = with_rtt(cluster, ms_to_s(args.rtt_ms))
    if args.bandwidth_gbps is not None:
        cluster = with_bandwidth(cluster, gbps_to_bps(args.bandwidth_gbps))
    return cluster


def scaled_workload(scenario: Scenario, model: Model, args) -> bool:
    """Whether the workload is the default that scales with the model (geosim.studies.asked.scales_workload)."""
    from geosim.studies.asked import scales_workload

    return scales_workload(scenario, model, workload_overrides(args))


def workload_note(scenario: Scenario, model: Model, args) -> str | None:
    """What the answer says of a workload nobody gave (None where it was given or is the study's)."""
    if not scaled_workload(scenario, model, args):
        return None
    from geosim.studies.asked import scaled_workload_note

    return scaled_workload_note(model)


def load_case(name_or_path: str, args) -> tuple[Scenario, Cluster, Model, Workload]:
    scenario = load_any_scenario(name_or_path)
    overrides = workload_overrides(args)
    for key, value in overrides.items():
        if value is not None and not isinstance(value, (str, bool)) and value <= 0:
            raise GeosimError(f"must be > 0, got {value}", source=f"--{key.replace('_', '-')}")
    model = model_of(args, scenario)
    if scaled_workload(scenario, model, args):
        from geosim.studies.asked import scaled_tokens_per_epoch

        overrides = {**overrides, "tokens_per_epoch": scaled_tokens_per_epoch(model)}
    try:
        workload = scenario.workload(**overrides)
    except GeosimError as exc:  # a command-line value out of range or at odds with the file's: name the flag
        flag = (exc.key or "").removeprefix("workload.")
        given = [k for k, v in workload_overrides(args).items() if v is not None]
        blamed = flag if flag in given else next((k for k in given if k in exc.problem), None)
        if blamed is None:
            raise
        others = [k for k in workload_overrides(args) if k in exc.problem and k not in given]
        hint = "".join(f"; {k} is the scenario's workload.{k} (give --{k.replace('_', '-')} to change it)"
                       for k in others)
        raise GeosimError(exc.problem + hint, source=f"--{blamed.replace('_', '-')}") from None
    return scenario, resolve_cluster(scenario, args), model, workload


def add_memory_parts_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--memory-parts", action="store_true", help=meaning("--memory-parts"))


def memory_by_part_line(prediction, asked: bool = True) -> str | None:
    """The fullest GPU's memory by part (weights, master copy, gradients, optimizer, activations, the
    backward's transient, workspace): what a model's shape puts where under the technique; a sharded
    layout (FSDP) adds the same bytes as it holds them (its shards, the units gathered, activations,
    workspace). The one memory-by-part line of every command: under every row with --memory-parts
    (`asked`), and under a sharded layout's rows always (their memory is the point of them)."""
    if not prediction.memory:
        return None
    m = max(prediction.memory, key=lambda g: g.need_gib)
    if not asked and m.groups_gib is None:
        return None
    parts = ", ".join(f"{k} {v:.1f}" for k, v in m.parts_gib.items() if v >= 0.05)
    held = ""
    if m.groups_gib is not None:
        held = "; as held: " + ", ".join(f"{k} {v:.1f}" for k, v in m.groups_gib.items())
    return f"memory of {m.host} GPU {m.rank} by part, GiB: {parts}{held} (needs {m.need_gib:.1f} of {m.has_gib:.0f})"


def model_of(args, scenario: Scenario | None = None) -> Model:
    """The model a command runs: --model-config's config.json (named for its file), else --model."""
    path = getattr(args, "model_config", None)
    if path:
        from geosim.inputs.model_config import model_from_config_file

        return model_from_config_file(path)
    return get_model(args.model, scenario.models if scenario else None)


def load_params_arg(args) -> Params:
    return load_params(args.params)


def scenario_names(args) -> list[str]:
    return args.scenario or list(BUILTIN_SCENARIOS)


def print_json(doc) -> None:
    try:  # never NaN or Infinity: they are not JSON
        text = json.dumps(doc, indent=2, default=str, allow_nan=False)
    except ValueError as exc:
        raise GeosimError(f"a result is not a finite number ({exc}); please report this") from None
    sys.stdout.write(text)
    sys.stdout.write("\n")


fmt_duration = fmt_time  # one way to write a duration everywhere


class Progress:
    """Planning's progress on stderr once it has taken more than two seconds: one line rewritten in
    place on a terminal, else (a file, a pipe, a script) a plain line every few seconds. A thread
    writes the lines, so one option that simulates for minutes still shows the clock moving."""

    def __init__(self, label: str):
        import threading

        from geosim.cli._progress import INTERVAL_S

        self.label, self.started, self.shown = label, time.monotonic(), False
        self.interval_s, self.text = INTERVAL_S, "weighing options"
        note_activity(f"{label}: {self.text}")
        self.tty = _isatty(sys.stderr)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="progress", daemon=True)
        self._thread.start()

    def __call__(self, done: int, total: int | None, what: str = "simulated") -> None:
        of = f" of at most {total:,}" if total is not None else ""  # None: still weighing options
        self.text = f"{what} {done:,}{of} options"
        note_activity(f"{self.label}: {self.text}")
        if self.tty and time.monotonic() - self.started > 2:
            self._print(end="")

    def _beat(self) -> None:
        wait = min(2.0, self.interval_s) if self.tty else self.interval_s
        while not self._stop.wait(wait):
            self._print(end="" if self.tty else "\n")

    def _print(self, end: str) -> None:
        text = f"  {self.label}: {self.text} ({time.monotonic() - self.started:.0f} s)"
        try:
            if end == "":
                print("\r" + text + " " * 10, end="", file=sys.stderr, flush=True)
                self.shown = True
            else:
                print(text, file=sys.stderr, flush=True)
        except (OSError, ValueError):  # stderr closed: progress is not worth failing for
            pass

    def close(self):
        self._stop.set()
        self._thread.join(1)
        if self.shown:
            try:
                print("\r" + " " * 70 + "\r", end="", file=sys.stderr)
            except (OSError, ValueError):
                pass


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError, AttributeError):
        return False


ANSWER_SCHEMA = "geosim.answer/1"
ESTIMATE_NOTE = "times are simulator estimates"
MEASURED_NOTE = "times are measured runs' (scaled to the workload's epochs)"


def answer_envelope(command: str, params, slices: list[dict], note: str = ESTIMATE_NOTE) -> dict:
    """The one JSON shape of predict, select and plan --json (docs/reference/cli.md, 'JSON answers'):
    {"schema", "command", "params", "note", ["params_warnings"], "slices": [one object per slice,
    each with "scenario", "model" and "verdict"]}."""
    doc = {"schema": ANSWER_SCHEMA, "command": command, "params": params.source if params is not None else None,
           "note": note}
    if params is not None and params.fit_warnings:
        doc["params_warnings"] = list(params.fit_warnings)
    doc["slices"] = slices
    return doc
