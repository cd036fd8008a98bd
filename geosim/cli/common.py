"""Options and loading shared by the subcommands that predict (predict, trace, select, plan, sweep)."""

from __future__ import annotations

import argparse
import json
import sys

from geosim.errors import GeosimError
from geosim.params import load_params
from geosim.scenario import BUILTIN_SCENARIOS, Scenario, get_model, load_scenario
from geosim.specs import Cluster, Model, Params, Workload
from geosim.studies.whatif import with_bandwidth, with_rtt


def add_workload_arguments(parser: argparse.ArgumentParser, *, many_scenarios: bool = True) -> None:
    if many_scenarios:
        parser.add_argument("--scenario", action="append", metavar="FILE_OR_NAME",
                            help=f"scenario file or built-in name (repeatable; default: the study's five slices: "
                                 f"{', '.join(BUILTIN_SCENARIOS)})")
    else:
        parser.add_argument("--scenario", default="utah-gpn", metavar="FILE_OR_NAME",
                            help="scenario file or built-in name (default: utah-gpn)")
    parser.add_argument("--model", default="gpt2m", help="model name from the catalog or the scenario (default: gpt2m)")
    parser.add_argument("--params", metavar="FILE", help="parameters file (default: the shipped defaults)")
    parser.add_argument("--rtt-ms", type=float, help="override the RTT of the links between sites (ms)")
    parser.add_argument("--bandwidth-gbps", type=float, help="override the bandwidth of the links between sites")
    parser.add_argument("--epochs", type=int, help="epochs to train (default 20, as in the study)")
    parser.add_argument("--global-batch", type=int, help="sequences per iteration (default 8)")
    parser.add_argument("--microbatches", type=int, help="pipeline microbatches (default 4)")
    parser.add_argument("--tokens-per-epoch", type=int, help="dataset size in tokens (default 650000)")
    parser.add_argument("--seq-len", type=int, help="sequence length (default 1024)")
    parser.add_argument("--precision", choices=("fp16", "bf16", "fp32"), help="default fp16 (mixed precision)")


def workload_overrides(args) -> dict:
    return {"epochs": args.epochs, "global_batch": args.global_batch, "microbatches": args.microbatches,
            "tokens_per_epoch": args.tokens_per_epoch, "seq_len": args.seq_len, "precision": args.precision}


def resolve_cluster(scenario: Scenario, args) -> Cluster:
    from geosim.scenario import LINK_RANGES, check_number

    cluster = scenario.cluster
    for flag in ("rtt_ms", "bandwidth_gbps"):  # argparse's float() takes 'nan' and 'inf'
        if getattr(args, flag) is not None:
            check_number(getattr(args, flag), f"--{flag.replace('_', '-')}", None, *LINK_RANGES[flag])
    if args.rtt_ms is not None:
        cluster = with_rtt(cluster, args.rtt_ms / 1e3)
    if args.bandwidth_gbps is not None:
        cluster = with_bandwidth(cluster, args.bandwidth_gbps * 1e9)
    return cluster


def load_case(name_or_path: str, args) -> tuple[Scenario, Cluster, Model, Workload]:
    scenario = load_scenario(name_or_path)
    for key, value in workload_overrides(args).items():
        if value is not None and not isinstance(value, str) and value <= 0:
            raise GeosimError(f"must be > 0, got {value}", source=f"--{key.replace('_', '-')}")
    try:
        workload = scenario.workload(**workload_overrides(args))
    except GeosimError as exc:  # a command-line value out of range: name the flag
        flag = (exc.key or "").removeprefix("workload.")
        if workload_overrides(args).get(flag) is None:
            raise
        raise GeosimError(exc.problem, source=f"--{flag.replace('_', '-')}") from None
    model = get_model(args.model, scenario.models)
    return scenario, resolve_cluster(scenario, args), model, workload


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


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
