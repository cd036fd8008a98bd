"""Every number a user gives geosim, checked in one place.

Numbers arrive from flags (argparse's int() and float() accept a 400-digit integer, 'nan' and
'inf'), scenario and parameters files (TOML integers are unbounded), and run records (JSON).
`check_number` is the one check all of them go through: a finite number in an explicit range,
whatever its type and size; a mistake is one line (GeosimError, exit 2), never OverflowError
from a float conversion or NaN carried into a prediction.

Flags: FLAG_BOUNDS holds the range of every numeric flag of every subcommand, and
`check_flags` (called by geosim.cli.main after parsing, before a subcommand starts) applies it.
A numeric flag without an entry is still refused when it is not finite or beyond FALLBACK;
tests/test_bad_inputs.py checks that every numeric flag has an entry. The bounds and their
reasons are listed in docs/reference/cli.md ("Bounds on numbers"). Counts that multiply work
(hosts, draws, devices, steps, GPUs per VM) are bounded here or in geosim/scenario.py
(MAX_HOSTS, MAX_GPUS_PER_HOST) and the sweep grid (MAX_GRID_POINTS).
"""

from __future__ import annotations

import argparse
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from geosim.errors import GeosimError


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:28]}...{text[-12:]} ({len(text)} characters)"


def is_finite(value) -> bool:
    """A number that is neither NaN nor infinite; an int of any size is finite (math.isfinite
    raises OverflowError on an int beyond float range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return True if isinstance(value, int) else math.isfinite(value)


def check_number(value, source: str | None, key: str | None, low: float, high: float, *, integer: bool = False,
                 exclusive_low: bool = False, line: int | None = None):
    """A finite number in [low, high] (or (low, high]); whole if `integer`. Never NaN, never inf,
    never an integer too large for a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GeosimError(f"must be a number, got {_short(value)}", source=source, key=key, line=line)
    if not is_finite(value):
        raise GeosimError(f"must be a finite number, got {value!r}", source=source, key=key, line=line)
    # compared before any float(): Python compares an int of any size with a float exactly
    if value < low or (exclusive_low and value == low):
        raise GeosimError(f"must be {'>' if exclusive_low else '>='} {low:g}, got {_short(value)}", source=source,
                          key=key, line=line)
    if value > high:
        raise GeosimError(f"must be <= {high:g}, got {_short(value)}", source=source, key=key, line=line)
    if integer and value != int(value):
        raise GeosimError(f"must be a whole number, got {value!r}", source=source, key=key, line=line)
    return int(value) if integer else float(value)


@dataclass(frozen=True)
class Bound:
    low: float
    high: float
    integer: bool = False
    exclusive_low: bool = False
    why: str = ""

    def check(self, value, flag: str):
        return check_number(value, flag, None, self.low, self.high, integer=self.integer,
                            exclusive_low=self.exclusive_low)


def count(high: int, why: str, low: int = 1) -> Bound:
    return Bound(low, high, integer=True, why=why)


def positive(high: float, why: str) -> Bound:
    return Bound(0.0, high, exclusive_low=True, why=why)


# A numeric flag with no entry below: finite, and no larger than this
FALLBACK = Bound(-1e15, 1e15, why="no flag may be NaN, infinite or beyond 1e15")

MAX_DRAWS = 10_000
MAX_CPU_DEVICES = 512
MAX_GPUS_PER_VM = 16
MAX_STEPS = 10_000_000
DAY_S = 86_400.0

_WORKLOAD = {  # as a scenario's [workload] (geosim/scenario.py WORKLOAD_RANGES)
    "--epochs": count(1_000_000, "a scenario's workload.epochs range"),
    "--global-batch": count(10_000_000, "a scenario's workload.global_batch range"),
    "--microbatches": count(4096, "a scenario's workload.microbatches range"),
    "--tokens-per-epoch": count(10**13, "a scenario's workload.tokens_per_epoch range"),
    "--seq-len": count(1_000_000, "a scenario's workload.seq_len range"),
    "--rtt-ms": Bound(0.0, 1e5, why="a scenario link's rtt_ms range"),
    "--bandwidth-gbps": Bound(1e-6, 1e5, why="a scenario link's bandwidth_gbps range"),
}
_LAYOUT = {"--tensor-parallel": count(1024, "GPUs of a tensor-parallel group inside a host"),
           "--pipeline-parallel": count(4096, "pipeline stages: at most one per layer"),
           "--data-parallel": count(65_536, "replicas of a stage: at most a cluster's GPUs"),
           "--virtual-stages": count(4096, "chunks of layers per stage: at most one layer each"),
           "--expert-parallel": count(4096, "GPUs a mixture of experts' experts are split over: at most its experts")}
_DRAWS = {"--draws": count(MAX_DRAWS, "each draw repeats every prediction: 10,000 gives percentiles to 0.1%")}
_DELTA = {"--delta": Bound(0.0, 10.0, why="a relative TFLOP/s gap; 10 = 1,000%")}

# command path (the subcommand names, space-separated) -> flag -> bound
FLAG_BOUNDS: dict[str, dict[str, Bound]] = {
    "predict": {**_WORKLOAD, **_DRAWS, **_LAYOUT},
    "select": {**_WORKLOAD, **_DRAWS, **_DELTA, **_LAYOUT,
               "--probe-epochs": count(1_000_000, "as --epochs"),
               "--steps": count(MAX_STEPS, "as live run --steps"),
               "--gpus-per-host": count(MAX_CPU_DEVICES, "CPU devices standing for a host's GPUs, as live run "
                                                         "--gpus-per-host")},
    "plan": {**_WORKLOAD, **_DRAWS, **_DELTA, **_LAYOUT,
             "--max-gpus": count(1_000_000, "a filter: any bound above the slice's GPUs is the same"),
             "--top": count(1_000_000, "options to print"),
             "--host-count": count(64, "with --sites: slices are ranked over site pairs; 64 VMs is past any FABRIC slice"),
             "--gpus-per-host": count(MAX_GPUS_PER_VM, "no cloud VM or FABRIC node has more than 8-16 GPUs")},
    "trace": {**_WORKLOAD, **_LAYOUT, "--iterations": count(100, "each iteration adds every op as a trace event")},
    "sweep": {"--workers": count(1024, "worker processes on one machine"), **_LAYOUT},
    "calibrate import": {"--global-batch": _WORKLOAD["--global-batch"], "--microbatches": _WORKLOAD["--microbatches"],
                         **_LAYOUT},
    "calibrate fit": {"--max-evaluations": count(10_000, "least-squares iterations; 25-40 converge")},
    "calibrate crossval": {"--workers": count(1024, "parallel fits"),
                           "--max-evaluations": count(10_000, "least-squares iterations; 25-40 converge")},
    "live run": {
        "--steps": count(MAX_STEPS, "training steps; 10 million steps is weeks of a real run"),
        "--epochs": count(100_000, "passes over the data set"),
        "--global-batch": count(1_000_000, "sequences per step"),
        "--microbatches": count(4096, "as a scenario's workload.microbatches"),
        "--pipeline-parallel": count(1024, "pipeline stages: at most one per layer"),
        "--seq-len": count(1_000_000, "as a scenario's workload.seq_len"),
        "--seed": Bound(0, 2**32 - 1, integer=True, why="JAX and numpy seeds are 32-bit"),
        "--lr": positive(10.0, "an AdamW learning rate; above 10 diverges at once"),
        "--warmup": Bound(0, MAX_STEPS, integer=True, why="steps excluded from timing; fewer than --steps"),
        "--log-every": count(MAX_STEPS, "a progress line every N steps"),
        "--memory-limit-gib": positive(1e5, "per-device memory, as a GPU's memory_gib"),
        "--gpus-per-host": count(MAX_CPU_DEVICES, "virtual CPU devices share this machine's cores; 512 is past "
                                                  "any real CPU"),
        "--host-count": count(4096, "Ray nodes to use"),
        "--replicas": count(1024, "low-communication replicas"),
        "--inner-steps": count(MAX_STEPS, "as --steps"),
        "--outer-lr": positive(100.0, "the outer SGD learning rate (0.7-1 in the papers)"),
        "--outer-momentum": Bound(0.0, 0.999, why="Nesterov momentum must stay below 1"),
        "--topk": positive(1.0, "a fraction of each chunk's values"),
        "--bits": Bound(1, 32, integer=True, why="bits per value sent (1, 2, 4, 8 or 32; checked by the technique)"),
        "--loss-curve-window": count(MAX_STEPS, "steps between loss-curve points"),
        "--num-processes": count(4096, "JAX processes in a hand-started run"),
        "--process-id": Bound(0, 4095, integer=True, why="this process's index, below --num-processes"),
        "--timeout": positive(7 * DAY_S, "seconds to wait for a Ray run; a week"),
    },
    "live probe": {"--seconds": positive(3600.0, "seconds per throughput test"),
                   "--streams": count(256, "parallel TCP streams"),
                   "--pings": count(100_000, "round trips for the RTT")},
    "live validate": {"--hold-out": Bound(0.0, 1e5, why="an RTT in ms, as --rtt-ms"),
                      "--steps": count(100_000, "steps per run; a validate runs several techniques at several RTTs"),
                      "--warmup": Bound(0, 100_000, integer=True, why="fewer than --steps"),
                      "--global-batch": count(1_000_000, "as live run"),
                      "--microbatches": count(4096, "as live run"),
                      "--gpus-per-host": count(64, "per emulated host; every host shares this machine's cores"),
                      "--bandwidth-gbps": Bound(0.0, 1e3, why="an emulated host's egress cap (0 = none)"),
                      "--tcp-window-kib": Bound(0.0, 1e7, why="a TCP buffer cap (0 = none)"),
                      "--seq-len": count(1_000_000, "as live run"),
                      "--timeout": positive(7 * DAY_S, "seconds per run"),
                      "--max-evaluations": count(10_000, "least-squares iterations")},
    "live wan up": {"--rtt-ms": Bound(0.0, 10_000.0, why="a one-way delay the forwarder holds in memory"),
                    "--bandwidth-gbps": positive(100.0, "the forwarder is user space: ~1 Gbit/s at most"),
                    "--jitter-ms": Bound(0.0, 10_000.0, why="as --rtt-ms"),
                    "--loss": Bound(0.0, 0.999, why="a probability below 1"),
                    "--host-count": count(64, "network namespaces on this machine"),
                    "--ttl-s": positive(30 * DAY_S, "the slice tears itself down after this"),
                    "--mtu": Bound(576, 65535, integer=True, why="IPv4's least MTU .. the largest frame"),
                    "--tcp-window-kib": positive(1e7, "a TCP buffer cap")},
    "live wan measure": {"--src": Bound(0, 63, integer=True, why="a host of the slice"),
                         "--dst": Bound(0, 63, integer=True, why="a host of the slice"),
                         "--count": count(100_000, "RTT samples"),
                         "--seconds": Bound(0.0, 3600.0, why="length of the TCP transfer (0 skips it)")},
    "fabric calibrate": {"--steps": count(MAX_STEPS, "as live run --steps"),
                         "--global-batch": count(1_000_000, "as live run"),
                         "--gpus-per-host": count(MAX_CPU_DEVICES, "as live run"),
                         "--probe-seconds": positive(3600.0, "as live probe --seconds")},
}


def command_path(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, list]:
    """The subcommand names a parse went through ('live run') and the parsers on the way, outermost first."""
    names, parsers = [], [parser]
    while True:
        sub = next((a for a in parsers[-1]._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None:
            break
        chosen = getattr(args, sub.dest, None)
        if chosen is None or chosen not in sub.choices:
            break
        names.append(chosen)
        parsers.append(sub.choices[chosen])
    return " ".join(names), parsers


def whole_number(text: str) -> int:
    """An integer flag's value as a user writes it: 1000000, 1_000_000 or 1e9 (float notation, whole)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r} (e.g. 1000000, 1_000_000 or 1e6)") from None
    if not is_finite(value) or value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(value)


def whole_numbers(parser: argparse.ArgumentParser) -> None:
    """Every integer option of `parser` and its subcommands takes whole_number's notations (--tokens-per-epoch
    1e9): argparse's int() refuses them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                whole_numbers(sub)
        elif action.type is int:
            action.type = whole_number


INTEGER_TYPES = (int, whole_number)


def numeric_actions(parser: argparse.ArgumentParser):
    """The options of `parser` whose values are numbers: (flag, action)."""
    for action in parser._actions:
        # an old name kept for a renamed flag (hidden from the help) stores into the new flag's place,
        # whose bound checks the value
        if action.option_strings and action.type in (int, whole_number, float) and action.help is not argparse.SUPPRESS:
            yield max(action.option_strings, key=len), action


def check_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every numeric flag of the parsed subcommand within its bound (FLAG_BOUNDS), the rest finite."""
    path, parsers = command_path(parser, args)
    bounds = FLAG_BOUNDS.get(path, {})
    for leaf in parsers[1:]:
        for flag, action in numeric_actions(leaf):
            value = getattr(args, action.dest, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                bounds.get(flag, FALLBACK).check(value, flag)


def host_names(text: str, known, flag: str = "--hosts") -> tuple[str, ...]:
    """A comma-separated list of VM names (trace --hosts, calibrate import --hosts): each known,
    none empty, none twice (a repeated VM would be counted twice: twice the GPUs, a link to itself)."""
    names = tuple(h.strip() for h in text.split(","))
    if not all(names):
        raise GeosimError(f"empty host name in {text!r} (comma-separated VM names)", source=flag)
    unknown = [n for n in names if n not in set(known)]
    if unknown:
        raise GeosimError(f"unknown host(s) {', '.join(unknown)} (known: {', '.join(known)})", source=flag)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise GeosimError(f"host(s) named twice: {', '.join(repeated)}", source=flag)
    return names


# --- files ------------------------------------------------------------------------------


def regular_input(path: str | Path, source: str | None = None, *, stdin: bool = False) -> Path:
    """An input path that is a regular file (or '-' for stdin where `stdin`): a FIFO, a device or a
    socket would block a read or never end, a directory is not a file. Checked without opening it."""
    path = Path(path)
    if stdin and str(path) == "-":
        return path
    where = source or str(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise GeosimError("no such file", source=where) from None
    except OSError as exc:
        raise GeosimError(f"cannot read ({exc.strerror})", source=where) from None
    if stat.S_ISDIR(mode):
        raise GeosimError("is a directory, not a file", source=where)
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise GeosimError(f"is {kind}, not a regular file", source=where)
    return path


def inside(directory: str | Path, name: str, what: str, source: str | None = None) -> Path:
    """directory/name, refused unless it stays inside `directory` (a name with '..' or '/' that
    becomes a path must not write elsewhere)."""
    bad = not name or name in (".", "..") or any(c in name for c in "/\\\0")
    if not bad:
        base = Path(directory).resolve()
        bad = (base / name).resolve().parent != base
    if bad:
        raise GeosimError(f"{what} {name!r} cannot name a file: it must not hold '/', '..' or be empty",
                          source=source)
    return Path(directory) / name
