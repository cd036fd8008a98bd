"""Units and number syntax at the edge: what a person types becomes the simulator's units here, once.

Inside geosim times are seconds and bandwidths bit/s; people type RTTs in milliseconds and
bandwidths in Gbit/s. Ranges have one syntax everywhere (select, plan, sweep):

    0.1,1,10          a list
    0:100:10          START:STOP:STEP  -> 0, 10, 20, ..., 100 (STOP included when a step lands on it)
    0.1:150:x2        START:STOP:xFACTOR -> 0.1, 0.2, 0.4, ... (each value FACTOR times the last)

and a list may mix values and ranges ("native,0.1:100:x10"). One bisection routine finds where
something changes between two values (plan and select: where the choice flips; sweep: where
two techniques' times cross).
"""

from __future__ import annotations

import math
import re
from typing import Callable

from geosim.base.errors import GeosimError
from geosim.base.validate import check_number

# binary sizes: a file's MiB, KiB and GiB become bytes with these, once, at the boundary
KIB = 1024
MIB = 1024**2
GIB = 1024**3
MAX_RANGE_POINTS = 100_000
RANGE_SYNTAX = "a list (0.1,1,10), START:STOP:STEP (0:100:10) or START:STOP:xFACTOR (0.1:150:x2)"


def ms_to_s(ms: float) -> float:
    return ms / 1e3


def s_to_ms(seconds: float) -> float:
    return seconds * 1e3


def gbps_to_bps(gbps: float) -> float:
    return gbps * 1e9


def bps_to_gbps(bps: float) -> float:
    return bps / 1e9


def _float(text: str, source: str, whole: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise GeosimError(f"{text.strip()!r} is not a number in {whole!r} (expected {RANGE_SYNTAX})",
                          source=source) from None
    if not math.isfinite(value):
        raise GeosimError(f"{text.strip()!r} is not a finite number", source=source)
    return value


_DURATION_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, source: str, *, bare: str, low: float, high: float, exclusive_low: bool = False) -> float:
    """'36h', '90min', '5400s', '1.5d' in seconds, within [low, high]; a bare number is in the unit `bare`
    (the flag's own: hours for a training deadline, seconds for a command's time limit)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|sec|m|min|h|d)?\s*", text)
    if not match:
        raise GeosimError(f"not a duration (try 36h, 90min, 5400s), got {text[:40]!r}", source=source)
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2) or bare]
    return check_number(seconds, source, None, low, high, exclusive_low=exclusive_low)


def parse_range(item: str, source: str, count_only: bool = False):
    """One START:STOP:STEP or START:STOP:xFACTOR item -> its values, in order."""
    parts = [p.strip() for p in item.split(":")]
    if len(parts) != 3:
        raise GeosimError(f"range {item!r} must be START:STOP:STEP or START:STOP:xFACTOR", source=source)
    start, stop = (_float(p, source, item) for p in parts[:2])
    step_text = parts[2].lower()
    if step_text.endswith("log"):  # the sweep's old START:STOP:COUNTlog: say what replaced it
        raise GeosimError(f"range {item!r}: COUNTlog ranges are gone; use START:STOP:xFACTOR, e.g. "
                          f"{parts[0]}:{parts[1]}:x2", source=source)
    if stop < start:
        raise GeosimError(f"range {item!r}: START must not exceed STOP", source=source)
    if step_text.startswith("x"):
        factor = _float(step_text[1:], source, item)
        if factor <= 1 or start <= 0:
            raise GeosimError(f"range {item!r}: a xFACTOR range needs FACTOR > 1 and START > 0", source=source)
        count = int(math.log(stop / start) / math.log(factor) + 1e-9) + 1
        make = lambda i: start * factor ** i  # noqa: E731
    else:
        step = _float(step_text, source, item)
        if step <= 0:
            raise GeosimError(f"range {item!r}: STEP must be > 0", source=source)
        count = int(min((stop - start) / step, 1e18) + 1e-9) + 1
        make = lambda i: start + i * step  # noqa: E731
    if count > MAX_RANGE_POINTS:
        raise GeosimError(f"range {item!r}: {count:,} points is more than {MAX_RANGE_POINTS:,}", source=source)
    if count_only:
        return count
    return [float(f"{make(i):.6g}") for i in range(count)]  # keys of sweep points must not carry float noise


def range_count(item: str, source: str) -> int:
    """How many values parse_range gives `item` (before rounding merges any), without making them."""
    return parse_range(item, source, count_only=True)


def parse_numbers(text: str, source: str, *, minimum: float | None = 0.0) -> list[float]:
    """A list of numbers and ranges -> the values, sorted, without repeats."""
    values: list[float] = []
    for item in (part.strip() for part in str(text).split(",")):
        if not item:
            raise GeosimError(f"empty item in {text!r} (expected {RANGE_SYNTAX})", source=source)
        values += parse_range(item, source) if ":" in item else [_float(item, source, text)]
    if minimum is not None and values and min(values) < minimum:
        raise GeosimError(f"values must be >= {minimum:g}, got {min(values):g}", source=source)
    if not values:
        raise GeosimError(f"no values in {text!r}", source=source)
    return sorted(set(values))


def bisect(same_as_low: Callable[[float], bool], lo: float, hi: float, *, rel_tol: float = 1e-3,
           log: bool = True, max_steps: int = 100) -> tuple[float, float, int]:
    """Narrow [lo, hi], where same_as_low(lo) holds and same_as_low(hi) does not, until its width
    is at most rel_tol of its middle. Halves on the log of the value when log and lo > 0 (times
    vary over decades along RTT and bandwidth). Returns (lo, hi, steps) of the last bracket."""
    log = log and lo > 0
    steps = 0
    while hi - lo > rel_tol * (lo + hi) / 2 and steps < max_steps:
        mid = math.sqrt(lo * hi) if log else (lo + hi) / 2
        steps += 1
        if same_as_low(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi, steps


def middle(lo: float, hi: float, log: bool = True) -> float:
    return math.sqrt(lo * hi) if log and lo > 0 else (lo + hi) / 2
