"""What a sweep keeps in memory of its rows: a status code and the compared figure per grid point.

Whole rows go to results.jsonl and results.csv as they come and are never held: a sweep's
memory does not grow with its rows. What the summary needs (status counts, crossover brackets,
the orders at the ends of the axis, the best option's panels) is read from two arrays indexed by
the point's position in the grid: one byte (a status code, 0 = not done) and one double (the
metric, NaN where the point does not run) per point, 9 MB at the grid's million-point bound.
Panels (the points that differ only in technique and the crossover axis) are built one at a time
from them, so no per-row dict is ever made for the summary either.
"""

from __future__ import annotations

import bisect
import itertools
import math
from array import array
from dataclasses import dataclass

from geosim.studies.sweep.grid import NATIVE, Grid, make_point, point_key

WHATIF = ("scenario", "technique", "model", "rtt_ms", "bandwidth_gbps", "gpu", "hosts")
MAX_STATUSES = 255  # a status code is one byte; 0 means "not done"


@dataclass
class Panel:
    """The points of one group: every technique at every non-native value of the axis, other axes fixed.
    Per technique, compact arrays over `xs` (a byte and a double a point, not a dict a row)."""

    template: dict  # the group's first done point in grid order (what the crossover files have always named)
    xs: list  # the axis's non-native values, in grid order
    techniques: list[str]  # the technique axis's values, in grid order
    codes: dict[str, array]  # technique -> status code at each x (0: not done)
    value: dict[str, array]  # technique -> metric at each x (NaN: not done or not ok)
    status_names: list[str]  # code - 1 -> status
    by_x: array  # positions in xs, smallest value first (one array for every panel of the axis)

    def status(self, technique: str, i: int) -> str | None:
        code = self.codes[technique][i]
        return self.status_names[code - 1] if code else None

    def ran(self, technique: str) -> bool:
        """Whether any point of `technique` is done (in this panel)."""
        return self.codes[technique].count(0) < len(self.xs)


class SweepTable:
    """Status and metric of every point of `grid`, indexed by the point's position in the grid."""

    def __init__(self, grid: Grid, metric: str):
        self.grid, self.metric = grid, metric
        self.names = list(grid.axes)
        self.sizes = [len(v) for v in grid.axes.values()]
        self._position = [_Positions(v) for v in grid.axes.values()]
        self.status_names: list[str] = []
        self.codes = array("B", bytes(len(grid)))
        self.values = array("d", [math.nan]) * len(grid)
        self.estimated: dict[str, int] = {}  # rows resting on estimated efficiency entries, by those entries

    # --- points and their positions ---------------------------------------------------------------

    def point_at(self, index: int) -> dict:
        combo, rest = [], index
        for values, size in zip(reversed(list(self.grid.axes.values())), reversed(self.sizes)):
            rest, i = divmod(rest, size)
            combo.append(values[i])
        return make_point(**dict(zip(self.names, reversed(combo))), layout=self.grid.layout)

    def index_of(self, row: dict) -> int | None:
        """The grid position of a row's point, None when the point is not in this grid (rows of another
        grid run into the same directory). Checked on the key, so a lookalike value never matches."""
        point = row.get("point")
        if not isinstance(point, dict) or not isinstance(point.get("workload"), dict):
            return None
        index = 0
        for name, size, positions in zip(self.names, self.sizes, self._position):
            value = point.get(name) if name in WHATIF else point["workload"].get(name)
            i = positions.get(value)
            if i is None:
                return None
            index = index * size + i
        return index if point_key(self.point_at(index)) == row.get("key") else None

    # --- recording --------------------------------------------------------------------------------

    def done(self, index: int) -> bool:
        return bool(self.codes[index])

    def record(self, index: int, status: str, value, estimated: str = "") -> None:
        if estimated:
            self.estimated[estimated] = self.estimated.get(estimated, 0) + 1
        if status not in self.status_names:
            if len(self.status_names) >= MAX_STATUSES:
                raise ValueError(f"more than {MAX_STATUSES} distinct statuses")
            self.status_names.append(status)
        self.codes[index] = self.status_names.index(status) + 1
        ok = status == "ok" and isinstance(value, (int, float)) and math.isfinite(value)
        self.values[index] = float(value) if ok else math.nan

    def count_done(self) -> int:
        return len(self.codes) - self.codes.count(0)

    def statuses(self) -> dict[str, int]:
        counts = [self.codes.count(i) for i in range(len(self.status_names) + 1)]
        return {name: int(counts[i + 1]) for i, name in enumerate(self.status_names) if counts[i + 1]}

    # --- panels -----------------------------------------------------------------------------------

    def panels(self, axis: str):
        """One Panel per combination of the axes other than technique and `axis`, in grid order, for the
        groups with at least one done point at a non-native value of `axis`; made one at a time."""
        if axis not in self.names or "technique" not in self.names:
            return
        strides = [math.prod(self.sizes[k + 1:]) for k in range(len(self.sizes))]
        a, t = self.names.index(axis), self.names.index("technique")
        axis_values = self.grid.axes[axis]
        native = [i for i, v in enumerate(axis_values) if v == NATIVE]
        keep = array("q", (i for i in range(len(axis_values)) if i not in native)) if native else range(len(axis_values))
        xs = [axis_values[i] for i in keep]
        ascending = all(xs[i] < xs[i + 1] for i in range(len(xs) - 1))  # a range's values: no sort to hold
        by_x = array("q", range(len(xs)) if ascending else sorted(range(len(xs)), key=xs.__getitem__))
        techniques = self.grid.axes["technique"]
        others = [range(n) if k not in (a, t) else [0] for k, n in enumerate(self.sizes)]
        for combo in itertools.product(*others):
            base = sum(i * s for i, s in zip(combo, strides))
            codes, values, first = {}, {}, None
            for ti, tech in enumerate(techniques):
                start = base + ti * strides[t]
                whole = slice(start, start + len(axis_values) * strides[a], strides[a])  # every x of the axis
                c, v = self.codes[whole], self.values[whole]
                if len(keep) < len(axis_values):  # leave out the native point
                    c, v = array("B", (c[i] for i in keep)), array("d", (v[i] for i in keep))
                codes[tech], values[tech] = c, v
                raw = c.tobytes()
                if raw.count(0) < len(raw):  # the technique's first done point, in grid order
                    flat = start + keep[len(raw) - len(raw.lstrip(b"\0"))] * strides[a]
                    first = flat if first is None else min(first, flat)
            if first is not None:
                yield Panel(self.point_at(first), xs, list(techniques), codes, values, list(self.status_names), by_x)

    @classmethod
    def from_rows(cls, rows, metric: str) -> "SweepTable":
        """A table of rows given as a list (a library caller's, a test's): the grid is the product of the
        values their points take, in first-seen order."""
        rows = list(rows)
        axes: dict[str, list] = {name: [] for name in WHATIF}
        for row in rows:
            p = row["point"]
            for name in WHATIF:
                if p[name] not in axes[name]:
                    axes[name].append(p[name])
            for name, v in p["workload"].items():
                axes.setdefault(name, [])
                if v not in axes[name]:
                    axes[name].append(v)
        layout = rows[0]["point"].get("layout") if rows else None  # a grid's layout is every point's
        table = cls(Grid({k: v for k, v in axes.items() if v}, layout), metric)
        for row in rows:
            index = table.index_of({**row, "key": row.get("key") or point_key(row["point"])})
            if index is not None and not table.done(index):
                table.record(index, row["status"], row.get(metric), row.get("estimated") or "")
        return table


def as_table(source, metric: str) -> SweepTable:
    return source if isinstance(source, SweepTable) else SweepTable.from_rows(source, metric)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _hashable(value):
    return ("bool", value) if isinstance(value, bool) else value


class _Positions:
    """value -> its position in an axis. A long numeric axis (100,000 RTTs) is two sorted arrays
    searched by bisection, 16 bytes a value; other values (names, 'native', booleans, kept apart from
    0 and 1) a dict."""

    def __init__(self, values: list):
        numeric = [i for i, v in enumerate(values) if _is_number(v)]
        self.other = {_hashable(values[i]): i for i in range(len(values) - 1, -1, -1) if not _is_number(values[i])}
        numeric.sort(key=values.__getitem__)
        self.sorted = array("d", (values[i] for i in numeric))
        self.at = array("q", numeric)

    def get(self, value):
        if _is_number(value):
            i = bisect.bisect_left(self.sorted, value)
            return self.at[i] if i < len(self.sorted) and self.sorted[i] == value else None
        try:
            return self.other.get(_hashable(value))
        except TypeError:  # an unhashable value (a list where a name was): not in the grid
            return None
