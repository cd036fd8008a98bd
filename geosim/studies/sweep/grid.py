"""What a sweep covers: value specs ("0.1:150:x2", "0:100:10", "1,10,25"), axes, and the points of their grid.

A point is a small plain dict (picklable, JSON-able) naming a scenario, technique,
model, what-if settings and workload overrides. Its key is its canonical JSON, so
the same point always has the same key: that is what lets a rerun skip finished
points. Values are rounded to 6 significant digits so keys do not depend on
floating-point noise in how a range was generated.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import fields

from geosim.base.errors import GeosimError
from geosim.inputs.scenario import PRECISIONS
from geosim.inputs.specs import Workload
from geosim.base.units import parse_range, range_count

NATIVE = "native"  # the scenario as its file says: no what-if edit on this axis
ALL_HOSTS = "all"

# Axes the sweep understands besides the workload fields; their value kinds.
WHATIF_AXES = {"scenario": "str", "technique": "str", "model": "str", "rtt_ms": "float",
               "bandwidth_gbps": "float", "gpu": "str", "hosts": "str"}
WORKLOAD_KINDS = {f.name: ("str" if f.name in ("precision", "runtime") else "bool" if f.name == "checkpointing" else "int")
                  for f in fields(Workload)}
NATIVE_ALLOWED = {"rtt_ms", "bandwidth_gbps", "gpu"}
MAX_RANGE_POINTS = 100_000
# every point is predicted (1-70 ms each: a million is hours on a few cores) and costs 9 bytes of the
# sweep's table (studies/sweep/table.py): past this, a grid is a mistake or belongs in several runs
MAX_GRID_POINTS = 1_000_000


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def _number(text: str, kind: str, source: str):
    try:
        value = float(text)
    except ValueError:
        raise GeosimError(f"{text!r} is not a number", source=source) from None
    if not math.isfinite(value):
        raise GeosimError(f"{text!r} is not a finite number", source=source)
    if kind == "int":
        if value != int(value):
            raise GeosimError(f"{text!r} is not a whole number", source=source)
        return int(value)
    return _round(value)


def _range(item: str, kind: str, source: str) -> list:
    """START:STOP:STEP or START:STOP:xFACTOR (geosim.base.units, the one range syntax of every command)."""
    values = parse_range(item, source)  # ascending, already at _round's 6 significant digits
    if kind == "int":
        values = [int(round(v)) for v in values]
    # rounding may merge neighbours; ascending, so a repeat is next to its twin (no set of 100,000 values)
    return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]


def count_values(spec: str | list | tuple | None, kind: str, source: str) -> int:
    """How many values parse_values gives `spec` at most (repeats counted), without making them: each
    range counted from its ends and step (geosim.base.units.range_count), each other item one. A grid is
    counted from these before any axis is built."""
    if spec is None:
        return 1
    if isinstance(spec, (list, tuple)):
        return sum(count_values(s, kind, source) for s in spec) or 1
    if not isinstance(spec, str):
        return 1
    return sum(range_count(item.strip(), source) if kind in ("int", "float") and ":" in item else 1
               for item in spec.split(",")) or 1


def refuse_grid(points: int, sizes: dict[str, int], counted: bool = False) -> None:
    """A grid of more than MAX_GRID_POINTS points: one line saying how many and of which axes."""
    if points <= MAX_GRID_POINTS:
        return
    shown = " x ".join(f"{n:,} {k}" for k, n in sizes.items() if n > 1)
    raise GeosimError(f"{'up to ' if counted else ''}{points:,} points ({shown}) is more than {MAX_GRID_POINTS:,}: "
                      "sweep fewer values, or split the grid over several sweeps (each its own --sweep-dir); "
                      "nothing was built", key="grid")


def parse_values(spec: str | list | tuple, kind: str, source: str, *, allow_native: bool = False) -> list:
    """A comma-separated list of values and ranges -> the values, in order, without repeats."""
    if isinstance(spec, (list, tuple)):
        return list(dict.fromkeys(v for s in spec for v in parse_values(s, kind, source, allow_native=allow_native)))
    if not isinstance(spec, str) or not spec.strip():
        raise GeosimError("empty value list", source=source)
    values: list = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            raise GeosimError(f"empty item in {spec!r}", source=source)
        if item.lower() == NATIVE:
            if not allow_native:
                raise GeosimError(f"{NATIVE!r} is not a value of this axis", source=source)
            values.append(NATIVE)
        elif kind == "str":
            values.append(item)
        elif kind == "bool":
            if item.lower() not in ("true", "false", "yes", "no", "1", "0"):
                raise GeosimError(f"{item!r} is not true or false", source=source)
            values.append(item.lower() in ("true", "yes", "1"))
        elif ":" in item:
            values.extend(_range(item, kind, source))
        else:
            values.append(_number(item, kind, source))
    for v in values:
        if kind in ("int", "float") and v != NATIVE and v < 0:
            raise GeosimError(f"values must be >= 0, got {v:g}", source=source)
    return values if len(values) < 2 or _unique_ascending(values) else list(dict.fromkeys(values))


def _unique_ascending(values: list) -> bool:
    """A single range's values (the long lists): already without repeats, and checked without a set."""
    try:
        return all(values[i] < values[i + 1] for i in range(len(values) - 1))
    except TypeError:  # 'native' among numbers, or names: the general way
        return False


def parse_assignment(text: str, source: str = "--set") -> tuple[str, list]:
    """'global_batch=8,16,32' -> ('global_batch', [8, 16, 32]) for any workload field."""
    if "=" not in text:
        raise GeosimError(f"expected FIELD=VALUES, got {text!r}", source=source)
    name, spec = (part.strip() for part in text.split("=", 1))
    if name not in WORKLOAD_KINDS:
        raise GeosimError(f"unknown workload field {name!r} (known: {', '.join(WORKLOAD_KINDS)})", source=source)
    values = parse_values(spec, WORKLOAD_KINDS[name], f"{source} {name}")
    if name == "precision":  # the one workload field whose strings are a fixed set
        wrong = [v for v in values if v not in PRECISIONS]
        if wrong:
            raise GeosimError(f"unknown precision {', '.join(map(repr, wrong))} (known: {', '.join(PRECISIONS)})",
                              source=f"{source} {name}")
    return name, values


class Grid:
    """Named axes, each a list of values; the points are their product, in axis order."""

    def __init__(self, axes: dict[str, list], layout: dict | None = None):
        self.layout = {k: v for k, v in (layout or {}).items() if v is not None} or None  # every point's, asked
        for name, values in axes.items():
            if name not in WHATIF_AXES and name not in WORKLOAD_KINDS:
                raise GeosimError(f"unknown sweep axis {name!r}", key=name)
            if not values:
                raise GeosimError("no values", key=name)
        self.axes = {name: list(values) for name, values in axes.items()}
        refuse_grid(len(self), {k: len(v) for k, v in self.axes.items()})

    def __len__(self) -> int:
        return math.prod(len(v) for v in self.axes.values())

    def points(self) -> list[dict]:
        """Every point, in a list (a library caller's small grid; the sweep makes them one chunk at a time)."""
        names = list(self.axes)
        return [make_point(**dict(zip(names, combo)), layout=self.layout)
                for combo in itertools.product(*self.axes.values())]

    def varying(self) -> list[str]:
        return [name for name, values in self.axes.items() if len(values) > 1]

    def to_dict(self) -> dict:
        return dict(self.axes)


def make_point(scenario: str, technique: str, model: str, rtt_ms=NATIVE, bandwidth_gbps=NATIVE, gpu=NATIVE,
               hosts: str = ALL_HOSTS, layout: dict | None = None, **workload) -> dict:
    """A point; a layout asked (--tensor-parallel and its kin) is part of it, and so of its key, only
    when given: a sweep without one keeps the keys (and resumes the rows) it always had."""
    for name in workload:
        if name not in WORKLOAD_KINDS:
            raise GeosimError(f"unknown workload field {name!r}", key=name)
    point = {"scenario": scenario, "technique": technique, "model": model, "rtt_ms": rtt_ms,
             "bandwidth_gbps": bandwidth_gbps, "gpu": gpu, "hosts": hosts, "workload": dict(sorted(workload.items()))}
    if layout:
        point["layout"] = {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(layout.items())}
    return point


def point_key(point: dict) -> str:
    return json.dumps(point, sort_keys=True, separators=(",", ":"))


def host_subset(hosts: str) -> tuple[str, ...] | None:
    """'all' -> None (every host); 'vm1+vm2' -> ('vm1', 'vm2')."""
    return None if hosts == ALL_HOSTS else tuple(h.strip() for h in hosts.split("+"))
