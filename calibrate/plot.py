"""Predicted vs measured, log-log, one colour per technique: the crossval picture."""

from __future__ import annotations

from pathlib import Path

from geosim.errors import require
from geosim.fileio import save_figure

COLOURS = {"data": "tab:blue", "zero2": "tab:orange", "shard": "tab:red", "pipeshard": "tab:green"}
MARKERS = {"loto": "o", "loso": "^", "fit": "s"}
TITLES = {"loto": "leave one technique out", "loso": "leave one slice out", "fit": "in-sample fit",
          "single-vm": "single-VM runs from Table II alone"}


def plot_predicted_vs_measured(series: dict[str, list[tuple[str, str, float, float]]], path: str | Path,
                               title: str = "geosim: predicted vs measured time (20 epochs)") -> None:
    """series: kind -> [(slice, technique, measured_s, predicted_s)]; one panel per kind. Written atomically."""
    matplotlib = require("matplotlib", "calibrate", "geosim calibrate")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in series if series[k]]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 5), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        points = series[kind]
        values = [v / 60 for _, _, m, p in points for v in (m, p)]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="predicted = measured")
        ax.fill_between([lo, hi], [lo / 1.15, hi / 1.15], [lo * 1.15, hi * 1.15], color="grey", alpha=0.2,
                        label="within 15%")
        for technique, colour in COLOURS.items():
            mine = [(m / 60, p / 60, s) for s, t, m, p in points if t == technique]
            if not mine:
                continue
            ax.scatter([m for m, _, _ in mine], [p for _, p, _ in mine], color=colour, marker=MARKERS.get(kind, "o"),
                       label=technique, zorder=3)
            for m, p, s in mine:
                ax.annotate(s, (m, p), fontsize=6, xytext=(3, -8), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured (minutes)")
        ax.set_ylabel("predicted (minutes)")
        ax.set_title(TITLES.get(kind, kind))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=120, format="png")
    finally:
        plt.close(fig)
