"""Sweep plots (matplotlib, PNG and SVG): time vs RTT per technique, and the stacked breakdown.

Rows are the dicts of a sweep's results.jsonl. Each technique keeps one colour in
every figure. Points that do not run are marked on the x axis in their technique's colour: an x for out of
memory, a bar for infeasible (a plan that cannot be built, e.g. more pipeline
stages than layers). Measured times (the study's Table II, run records) are drawn
as black-edged diamonds at the RTT they were measured at.
"""

from __future__ import annotations

from pathlib import Path

from geosim.base.errors import require
from geosim.base.fileio import save_figure
from geosim.report.figures import save_png
from geosim.studies.sweep.grid import NATIVE
from geosim.techniques import get_technique, is_low_communication, label, technique_names

COLORS = {"data": "#1f77b4", "zero2": "#ff7f0e", "shard": "#2ca02c", "pipeshard": "#d62728"}
PARTS = (("run_compute_s", "compute", "#4c72b0"), ("run_exposed_comm_s", "exposed communication", "#dd8452"),
         ("run_bubble_s", "pipeline bubble", "#8c8c8c"), ("run_overhead_s", "overhead", "#c7c7c7"))
AXIS_LABELS = {"rtt_ms": "WAN round-trip time (ms)", "bandwidth_gbps": "WAN bandwidth (Gbit/s)"}
EFFECTIVE = {"rtt_ms": "wan_rtt_ms", "bandwidth_gbps": "wan_bandwidth_gbps"}
MAX_PANELS = 12
DPI = 150  # with panels >= 4.6 in wide and at least two columns' width, figures are >= 1200 px wide
MIN_WIDTH_IN = 8.5  # 1275 px at DPI
# series that lie on top of each other (the hybrid is SparseLoCo where every VM holds a replica)
# stay distinguishable by line style and marker as well as colour
STYLES = (("-", "o"), ("--", "s"), ("-.", "^"), (":", "D"), ((0, (5, 1, 1, 1)), "v"), ((0, (3, 2)), "P"),
          ((0, (1, 1)), "X"))


def _pyplot():
    matplotlib = require("matplotlib", extra="sweep", command="geosim report")
    matplotlib.use("Agg")  # files only: no display on servers
    import matplotlib.pyplot as plt

    return plt


EXTRA_COLORS = ("#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


def _color(technique: str) -> str:
    """The study's four keep fixed colours; other techniques take the rest in name order."""
    if technique in COLORS:
        return COLORS[technique]

    others = [t for t in technique_names() if t not in COLORS]
    index = others.index(technique) if technique in others else len(others)
    return EXTRA_COLORS[index % len(EXTRA_COLORS)]


def _style(technique: str) -> tuple:
    """(line style, marker) per technique, fixed across figures like its colour."""

    names = technique_names()
    index = names.index(technique) if technique in names else len(names)
    return STYLES[index % len(STYLES)]


def _label(technique: str) -> str:

    try:
        get_technique(technique)
    except Exception:  # a sweep directory from a technique this install does not have
        return technique
    return label(technique)


def _low_communication(technique: str) -> bool:

    try:
        get_technique(technique)
    except Exception:
        return False
    return is_low_communication(technique)


def panel_key(row: dict, axis: str) -> tuple:
    """What one panel holds: every point field but technique and the swept axis."""
    p = row["point"]
    return tuple((k, repr(v)) for k, v in p.items() if k not in ("technique", axis))


def panel_title(row: dict, axis: str) -> str:
    p = row["point"]
    extra = [f"{k}={v}" for k, v in p.items() if k not in ("scenario", "technique", "model", axis, "workload")
             and v not in (NATIVE, "all")]
    extra += [f"{k}={v}" for k, v in p["workload"].items()]
    return " ".join([row["cluster"], row["model"], f"{row.get('num_gpus', '?')} GPUs"] + extra)


def _save(fig, base: Path, legend=None) -> list[Path]:
    """PNG (geosim.report.figures: >= 1200 px wide, its text overlaps recorded) and SVG;
    bbox_inches="tight" with the legend as an extra artist grows the canvas to hold the legend
    outside the axes instead of clipping it."""
    paths = [base.with_suffix(".png"), base.with_suffix(".svg")]
    extra = [legend] if legend is not None else []
    save_png(fig, paths[0], dpi=DPI, extra=extra)
    save_figure(fig, paths[1], bbox_inches="tight", bbox_extra_artists=extra, pad_inches=0.15)
    return paths


BEST_STYLE = {"color": "black", "lw": 5, "alpha": 0.25, "solid_capstyle": "round", "zorder": 1}


def ranked_value(row: dict, metric: str) -> float:
    """A line's point on the ranking's measure where the metric is the whole run: its time to Data's
    progress (the sweep row's time_to_progress_s, the run's own time for the synchronous techniques; a
    low-communication technique's training stretched by 1 / its token efficiency), so the best option and
    the lines it ranks are drawn on one measure; per epoch, the metric as it is."""
    if metric == "total_time_s" and row.get("time_to_progress_s") is not None:
        return row["time_to_progress_s"]
    return row[metric]


def lower_envelope(lines: dict[str, list[tuple[float, float]]], planned: list[tuple[float, float, str]]
                   ) -> list[tuple[float, float, str]]:
    """The best option at each x: the least of the lines' points there and the planner's best (which also
    ranks single VMs and Pipeshard's splits), with its name. lines: technique -> [(x, y)]; planned:
    [(x, y, option)]. Never above a line at an x the line has."""
    at: dict[float, tuple[float, str]] = {}
    for x, y, name in planned:
        at[x] = min(at.get(x, (float("inf"), "")), (y, name))
    for technique, pts in lines.items():
        for x, y in pts:
            if y < at.get(x, (float("inf"), ""))[0] * (1 - 1e-9):
                at[x] = (y, f"{_label(technique)} on all VMs")
    return sorted((x, y, name) for x, (y, name) in at.items())


def _draw_best(ax, best_rows: list[dict], scale: float, lines: dict[str, list[tuple[float, float]]]
               ) -> str | None:
    """The best option at each RTT as a broad grey band under the technique lines: the lower envelope of
    the lines drawn and the planner's best (the sweep's best.json, on the same measure). Returns what it
    is, for the panel's title ("best: Pipeshard vm1>vm2 to 5 ms, then Data on vm1"), or None if there is
    nothing to draw."""
    planned = [(r["rtt_ms"], r["total_time_s"] / scale, r.get("best") or r["best_option"]) for r in best_rows
               if r.get("total_time_s") and r.get("best_option") and isinstance(r.get("rtt_ms"), (int, float))]
    pts = lower_envelope(lines, planned)
    if not pts:
        return None
    ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], **BEST_STYLE)
    stretches: list[list] = []  # [first x, last x, kind] of each run of one best option
    for x, _, kind in pts:
        if stretches and stretches[-1][2] == kind:
            stretches[-1][1] = x
        else:
            stretches.append([x, x, kind])
    if len(stretches) == 1:
        return f"best: {stretches[0][2]} (grey band)"
    parts = [f"{kind} to {last:g} ms" for _, last, kind in stretches[:-1]] + [f"then {stretches[-1][2]}"]
    return "best (grey band): " + ", ".join(parts)


def _grid(plt, n: int, width=4.6, height=3.4):
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig_width = max(MIN_WIDTH_IN, width * cols)
    fig, axes = plt.subplots(rows, cols, figsize=(fig_width, max(height, fig_width / cols * 0.75) * rows),
                             squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def plot_time_vs_axis(rows: list[dict], base: Path, *, axis: str = "rtt_ms", metric: str = "total_time_s",
                      crossovers: list[dict] = (), measured: list[dict] = (), best: list[dict] = ()) -> list[Path]:
    """One panel per scenario (and per model, batch, ...): a line per technique on log-log axes, and
    the recommended option (the planner's best at each RTT, `best`: the sweep's best.json) as a band."""
    plt = _pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    from matplotlib.transforms import blended_transform_factory

    panels: dict[tuple, list[dict]] = {}
    for row in rows:
        panels.setdefault(panel_key(row, axis), []).append(row)
    keys = list(panels)[:MAX_PANELS]
    fig, axes = _grid(plt, len(keys))
    # hours for whole runs, minutes per epoch: numbers a person reads without converting
    scale, ylabel = {"total_time_s": (3600, "whole run (hours)"), "time_per_epoch_s": (60, "per epoch (minutes)")}[metric]
    seen_marks = set()
    for ax, key in zip(axes, keys):
        group = panels[key]
        bottom = blended_transform_factory(ax.transData, ax.transAxes)
        drawn: dict[str, list[tuple[float, float]]] = {}  # technique -> its line's points (the best's envelope)
        for tech in dict.fromkeys(r["technique"] for r in group):
            pts = sorted(((r[EFFECTIVE[axis]], r) for r in group if r["technique"] == tech), key=lambda p: p[0])
            # the scenario as given is a marker, not part of the line: its other links may differ from the what-if's
            ok = [(x, ranked_value(r, metric) / scale) for x, r in pts
                  if r["status"] == "ok" and r["point"][axis] != NATIVE]
            if axis == "rtt_ms":
                drawn[tech] = [(r["point"][axis], ranked_value(r, metric) / scale) for x, r in pts
                               if r["status"] == "ok" and r["point"][axis] != NATIVE]
            if ok:
                ls, marker = _style(tech)
                ax.plot(*zip(*ok), ls=ls, marker=marker, ms=4, lw=1.6, color=_color(tech), label=_label(tech),
                        mfc="none" if ls != "-" else _color(tech))
            for x, r in pts:
                if r["status"] == "ok" and r["point"][axis] == NATIVE:
                    ax.plot([x], [ranked_value(r, metric) / scale], "o", mfc="none", mec=_color(tech), ms=8, mew=1.5)
                    seen_marks.add("native")
                if r["status"] != "ok":
                    mark = "x" if r["status"] == "out-of-memory" else "|"
                    ax.plot([x], [0.04], mark, color=_color(tech), ms=8, mew=2, transform=bottom, clip_on=False)
                    seen_marks.add(r["status"])
        flips: list[list] = []  # [x, labels]: flips within 3% of each other share one line
        for c in sorted((c for c in crossovers if c.get("at") is not None
                         and panel_key({"point": c["point"]}, axis) == key), key=lambda c: c["at"]):
            label = f"{_label(c['a'])} / {_label(c['b'])}"
            if flips and c["at"] < flips[-1][0] * 1.03:
                flips[-1][1].append(label)
            else:
                flips.append([c["at"], [label]])
        for x, labels in flips:
            ax.axvline(x, color="grey", lw=0.8, ls=":")
            ax.text(x, 0.97, " " + "; ".join(labels), transform=bottom, fontsize=7, va="top", rotation=90)
        for m in measured:
            if m["panel"] == key:
                ax.plot([m["x"]], [m["y"] / scale], "D", color=_color(m["technique"]), mec="black", ms=6, zorder=5)
                seen_marks.add("measured")
        best_line = None
        if axis == "rtt_ms":
            # the planner's best is on the whole run (time to the same progress); per epoch, the lines alone
            planned = [doc.get("rows", []) for doc in best if metric == "total_time_s"
                       and panel_key({"point": doc["point"]}, axis) == key]
            best_line = _draw_best(ax, planned[0] if planned else [], scale, drawn)
        if best_line:
            seen_marks.add("best")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())  # minor labels on short log ranges: clutter, and slow
        if not any(r["status"] == "ok" for r in group):
            ax.set_ylim(0.1, 10)
            ax.text(0.5, 0.5, "no point runs here", transform=ax.transAxes, ha="center", color="grey")
        low, high = ax.get_ylim()
        if high < 4 * low:  # a flat curve should look flat, not fill the panel with tick labels
            mid = (low * high) ** 0.5
            ax.set_ylim(mid / 2, mid * 2)
        title = panel_title(group[0], axis)
        if best_line:  # the answer, in words, under the panel's name
            import textwrap

            title += "\n" + "\n".join(textwrap.wrap(best_line, 58))
        ax.set_title(title, fontsize=8)
        ax.set_xlabel(AXIS_LABELS.get(axis, axis), fontsize=8)
        ax.set_ylabel(f"predicted time, {ylabel}", fontsize=8)
        ax.grid(True, which="both", alpha=0.25)
        ax.tick_params(labelsize=7)
    handles = [Line2D([], [], color=_color(t), ls=_style(t)[0], marker=_style(t)[1], ms=4,
                      mfc="none" if _style(t)[0] != "-" else _color(t),
                      label=_label(t) + ((" (to Data's progress)" if metric == "total_time_s" else " (needs more tokens)")
                                         if _low_communication(t) else ""))
               for t in dict.fromkeys(r["technique"] for r in rows)]
    extra = {"native": Line2D([], [], ls="", marker="o", mfc="none", mec="black", label="scenario as given"),
             "out-of-memory": Line2D([], [], ls="", marker="x", color="black", mew=2, label="out of memory"),
             "infeasible": Line2D([], [], ls="", marker="|", color="black", mew=2, label="infeasible"),
             "measured": Line2D([], [], ls="", marker="D", color="white", mec="black", label="measured"),
             "best": Line2D([], [], label=("best option: the lowest line\nor the planner's option, to the\nsame "
                                           "training progress" if metric == "total_time_s"
                                           else "best option per epoch:\nthe lowest line"),
                            **{k: v for k, v in BEST_STYLE.items() if k != "zorder"})}
    handles += [h for k, h in extra.items() if k in seen_marks]
    fig.tight_layout()
    legend = fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.98), fontsize=8, frameon=False,
                        title="predicted")
    paths = _save(fig, base, legend)
    plt.close(fig)
    return paths


def breakdown_rows(rows: list[dict], axis: str = "rtt_ms") -> dict[tuple, list[dict]]:
    """Per panel, one row per technique: the native point if the grid has it, else the middle value."""
    panels: dict[tuple, dict[str, list[dict]]] = {}
    for row in rows:
        panels.setdefault(panel_key(row, axis), {}).setdefault(row["technique"], []).append(row)
    chosen = {}
    for key, by_tech in panels.items():
        picks = []
        for tech, group in by_tech.items():
            native = [r for r in group if r["point"].get(axis) == NATIVE]
            group = sorted(group, key=lambda r: r[EFFECTIVE.get(axis, "wan_rtt_ms")])
            picks.append(native[0] if native else group[len(group) // 2])
        chosen[key] = picks
    return chosen


def plot_breakdown(rows: list[dict], base: Path, *, axis: str = "rtt_ms", measured: list[dict] = ()) -> list[Path]:
    """Per scenario, a stacked bar per technique: compute / exposed communication / bubble / overhead.
    A measured time for the same case is a black dash across its bar."""
    plt = _pyplot()
    from matplotlib.lines import Line2D

    panels = breakdown_rows(rows, axis)
    keys = list(panels)[:MAX_PANELS]
    fig, axes = _grid(plt, len(keys), width=4.0, height=3.2)
    drawn_measured = False  # the legend lists "measured" only if a dash was drawn
    for ax, key in zip(axes, keys):
        picks = panels[key]
        names = [_label(r["technique"]) for r in picks]
        bottoms = [0.0] * len(picks)
        for field, label, color in PARTS:
            heights = [(r.get(field) or 0.0) / 3600 for r in picks]
            ax.bar(names, heights, bottom=bottoms, color=color, label=label, width=0.6)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        ok = [(r["total_time_s"], i) for i, r in enumerate(picks) if r["status"] == "ok" and r.get("total_time_s")]
        if ok:  # the fastest bar of the panel: outlined and labelled
            fastest = min(ok)[1]
            ax.bar([names[fastest]], [bottoms[fastest]], fill=False, edgecolor="black", lw=1.8, width=0.6, zorder=4)
            ax.annotate("fastest", (fastest, bottoms[fastest]), xytext=(0, 3), textcoords="offset points",
                        ha="center", fontsize=7, fontweight="bold")
        for i, r in enumerate(picks):
            m = next((m for m in measured if m["panel"] == key and m["technique"] == r["technique"]
                      and r["point"].get(axis) == NATIVE), None)
            if m is not None:
                ax.plot([i], [m["y"] / 3600], "_", color="black", ms=28, mew=2.5, zorder=5)
                drawn_measured = True
            if r["status"] != "ok":
                ax.text(i, 0, "OOM" if r["status"] == "out-of-memory" else "n/a", ha="center", va="bottom",
                        color="red", fontsize=8, fontweight="bold")
        x = picks[0][EFFECTIVE.get(axis, "wan_rtt_ms")]
        unit = "ms" if axis == "rtt_ms" else "Gbit/s"
        ax.set_title(f"{panel_title(picks[0], axis)} @ {x:.3g} {unit}", fontsize=8)
        ax.set_ylabel("hours, whole run", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.tick_params(axis="x", labelrotation=30)
        ax.grid(True, axis="y", alpha=0.25)
    handles, labels = axes[0].get_legend_handles_labels()
    if drawn_measured:
        handles.append(Line2D([], [], ls="", marker="_", color="black", ms=14, mew=2.5, label="measured"))
    fig.tight_layout()
    legend = fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.98), fontsize=8, frameon=False)
    paths = _save(fig, base, legend)
    plt.close(fig)
    return paths
