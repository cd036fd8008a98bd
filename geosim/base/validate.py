"""Every number a user gives geosim, checked in one place.

Numbers arrive from flags (argparse's int() and float() accept a 400-digit integer, 'nan' and
'inf'), scenario and parameters files (TOML integers are unbounded), and run records (JSON).
`check_number` is the one check all of them go through: a finite number in an explicit range,
whatever its type and size; a mistake is one line (GeosimError, exit 2), never OverflowError
from a float conversion or NaN carried into a prediction.

Flags: each command module declares the range of each of its numeric flags beside them, in its
FLAG_BOUNDS (command path -> flag -> Bound; the workload's and layout's shared flags in
geosim/cli/common.py, from the scenario's own ranges), and `check_flags` (called by geosim.cli.main
after parsing, before a subcommand starts) applies the running command's. A numeric flag without an
entry is still refused when it is not finite or beyond FALLBACK; tests/test_bad_inputs.py checks that
every numeric flag has an entry. The bounds and their reasons are listed in docs/reference/cli.md
("Bounds on numbers"). This module holds the mechanism only.
"""

from __future__ import annotations

import argparse
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from geosim.base.errors import GeosimError


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


def check_flags(parser: argparse.ArgumentParser, args: argparse.Namespace,
                flag_bounds: dict[str, dict[str, Bound]]) -> None:
    """Every numeric flag of the parsed subcommand within its bound (the command module's FLAG_BOUNDS,
    command path -> flag -> Bound), the rest finite."""
    path, parsers = command_path(parser, args)
    bounds = flag_bounds.get(path, {})
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
