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

import itertools
import math
from array import array
from dataclasses import dataclass

from geosim.studies.sweep.grid import NATIVE, Grid, make_point, point_key

WHATIF = ("scenario", "technique", "model", "rtt_ms", "bandwidth_gbps", "gpu", "hosts")
MAX_STATUSES = 255  # a status code is one byte; 0 means "not done"


@dataclass
class Panel:
    """The points of one group: every technique at every non-native value of the axis, other axes fixed."""

    template: dict  # the group's first done point in grid order (what the crossover files have always named)
    xs: list  # the axis's non-native values, in grid order
    techniques: list[str]  # the technique axis's values, in grid order
    status: dict[str, list[str | None]]  # technique -> status at each x (None: not done)
    value: dict[str, list[float | None]]  # technique -> metric at each x (None: not done or not ok)


class SweepTable:
    """Status and metric of every point of `grid`, indexed by the point's position in the grid."""

    def __init__(self, grid: Grid, metric: str):
        self.grid, self.metric = grid, metric
        self.names = list(grid.axes)
        self.sizes = [len(v) for v in grid.axes.values()]
        self._position = [_positions(v) for v in grid.axes.values()]
        self.status_names: list[str] = []
        self.codes = array("B", bytes(len(grid)))
        self.values = array("d", [math.nan]) * len(grid)

    # --- points and their positions ---------------------------------------------------------------

    def point_at(self, index: int) -> dict:
        combo, rest = [], index
        for values, size in zip(reversed(list(self.grid.axes.values())), reversed(self.sizes)):
            rest, i = divmod(rest, size)
            combo.append(values[i])
        return make_point(**dict(zip(self.names, reversed(combo))))

    def index_of(self, row: dict) -> int | None:
        """The grid position of a row's point, None when the point is not in this grid (rows of another
        grid run into the same directory). Checked on the key, so a lookalike value never matches."""
        point = row.get("point")
        if not isinstance(point, dict) or not isinstance(point.get("workload"), dict):
            return None
        index = 0
        for name, size, positions in zip(self.names, self.sizes, self._position):
            value = point[name] if name in WHATIF else point["workload"].get(name)
            i = positions.get(_hashable(value))
            if i is None:
                return None
            index = index * size + i
        return index if point_key(self.point_at(index)) == row.get("key") else None

    # --- recording --------------------------------------------------------------------------------

    def done(self, index: int) -> bool:
        return bool(self.codes[index])

    def record(self, index: int, status: str, value) -> None:
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
        groups with at least one done point at a non-native value of `axis`."""
        if axis not in self.names or "technique" not in self.names:
            return
        strides = [math.prod(self.sizes[k + 1:]) for k in range(len(self.sizes))]
        a, t = self.names.index(axis), self.names.index("technique")
        axis_values = self.grid.axes[axis]
        keep = [i for i, v in enumerate(axis_values) if v != NATIVE]
        techniques = self.grid.axes["technique"]
        names = [None] + self.status_names
        others = [range(n) if k not in (a, t) else [0] for k, n in enumerate(self.sizes)]
        for combo in itertools.product(*others):
            base = sum(i * s for i, s in zip(combo, strides))
            at = {tech: [base + ti * strides[t] + xi * strides[a] for xi in keep] for ti, tech in enumerate(techniques)}
            done = [i for flat in at.values() for i in flat if self.codes[i]]
            if not done:
                continue
            status = {tech: [names[self.codes[i]] for i in flat] for tech, flat in at.items()}
            value = {tech: [None if math.isnan(self.values[i]) else self.values[i] for i in flat]
                     for tech, flat in at.items()}
            yield Panel(self.point_at(min(done)), [axis_values[i] for i in keep], list(techniques), status, value)

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
        table = cls(Grid({k: v for k, v in axes.items() if v}), metric)
        for row in rows:
            index = table.index_of({**row, "key": row.get("key") or point_key(row["point"])})
            if index is not None and not table.done(index):
                table.record(index, row["status"], row.get(metric))
        return table


def as_table(source, metric: str) -> SweepTable:
    return source if isinstance(source, SweepTable) else SweepTable.from_rows(source, metric)


def _hashable(value):
    return ("bool", value) if isinstance(value, bool) else value


def _positions(values: list) -> dict:
    """value -> position in its axis; booleans kept apart from 0 and 1 (True == 1 in a dict)."""
    return {_hashable(v): i for i, v in reversed(list(enumerate(values)))}
