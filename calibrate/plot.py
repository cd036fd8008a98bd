"""Predicted vs measured, log-log, one colour per technique and one marker per slice: the crossval picture.

Each panel also shows the answer: on every slice, the technique predicted fastest is ringed, and the
one measured fastest is boxed; where ring and box sit on one point, the held-out prediction picked
the right technique for that slice. No per-point text: the markers say which slice a point is, so
labels cannot pile up on each other (tests/test_plots.py checks every figure's text on the renderer).
"""

from __future__ import annotations

from pathlib import Path

from geosim.base.errors import require
from geosim.report.figures import save_png

COLOURS = {"data": "tab:blue", "zero2": "tab:orange", "shard": "tab:red", "pipeshard": "tab:green"}
SLICE_MARKERS = ("o", "^", "s", "D", "v", "P", "X", "h")
TITLES = {"loto": "leave one technique out", "loso": "leave one slice out", "fit": "in-sample fit",
          "single-vm": "single-VM runs from Table II alone"}


def plot_predicted_vs_measured(series: dict[str, list[tuple[str, str, float, float]]], path: str | Path,
                               title: str = "geosim: predicted vs measured time (20 epochs)") -> None:
    """series: kind -> [(slice, technique, measured_s, predicted_s)]; one panel per kind. Written atomically
    (geosim.report.figures.save_png: at least 1200 px wide)."""
    matplotlib = require("matplotlib", "calibrate", "geosim calibrate")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    kinds = [k for k in series if series[k]]
    slices = list(dict.fromkeys(s for k in kinds for s, _, _, _ in series[k]))
    marker = {s: SLICE_MARKERS[i % len(SLICE_MARKERS)] for i, s in enumerate(slices)}
    fig, axes = plt.subplots(1, len(kinds), figsize=(max(8.5, 5.4 * len(kinds)), 5.6), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        points = series[kind]
        values = [v / 60 for _, _, m, p in points for v in (m, p)]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        ax.plot([lo, hi], [lo, hi], color="black", lw=1)
        ax.fill_between([lo, hi], [lo / 1.15, hi / 1.15], [lo * 1.15, hi * 1.15], color="grey", alpha=0.2)
        for s, t, m, p in points:
            ax.scatter([m / 60], [p / 60], color=COLOURS.get(t, "tab:gray"), marker=marker[s], s=36, zorder=3)
        for s in slices:  # the answer per slice: fastest predicted (ring) and fastest measured (box)
            mine = [(m, p) for sl, _, m, p in points if sl == s]
            if len(mine) < 2:
                continue
            m, p = min(mine, key=lambda x: x[1])
            ax.scatter([m / 60], [p / 60], s=170, facecolors="none", edgecolors="black", lw=1.3, zorder=4)
            m, p = min(mine, key=lambda x: x[0])
            ax.scatter([m / 60], [p / 60], s=170, marker="s", facecolors="none", edgecolors="black", lw=1.0,
                       linestyle="--", zorder=4)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured (minutes)")
        ax.set_ylabel("predicted (minutes)")
        ax.set_title(TITLES.get(kind, kind), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    used = {t for k in kinds for _, t, _, _ in series[k]}
    handles = [Line2D([], [], color="black", lw=1, label="predicted = measured"),
               Line2D([], [], color="grey", alpha=0.4, lw=6, label="within 15%")]
    handles += [Line2D([], [], ls="", marker="o", color=c, label=t) for t, c in COLOURS.items() if t in used]
    handles += [Line2D([], [], ls="", marker=marker[s], color="black", mfc="none", label=s) for s in slices]
    handles += [Line2D([], [], ls="", marker="o", ms=11, mfc="none", mec="black", label="fastest predicted on its slice"),
                Line2D([], [], ls="", marker="s", ms=11, mfc="none", mec="black", label="fastest measured on its slice")]
    fig.suptitle(title)
    fig.tight_layout()
    legend = fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.92), fontsize=8, frameon=False)
    try:
        save_png(fig, path, extra=[legend])
    finally:
        plt.close(fig)
