"""What `geosim live validate` reports: the rows of measured against predicted times, what
latency costs each technique (and whether the study's finding holds), the printed table and
the plot. live/experiments/validate.py runs the runs and the fits."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from geosim.live.registry import synchronous
from geosim.techniques import is_pipelined
from geosim.base.errors import require
from geosim.base.fileio import write_atomic

TECHNIQUES = synchronous()  # the live techniques that compute the same step (the one registry's)
TARGET = 0.15  # issue 24's bar: held-out predictions within 15% (issue 2's was 20%)


@dataclass
class Row:
    rtt_ms: float
    technique: str
    measured_s: float | None
    predicted_s: float | None = None
    role: str = ""  # fit | held out
    status: str = "ok"
    measured_rtt_ms: float | None = None

    @property
    def error(self) -> float | None:
        if self.measured_s and self.predicted_s:
            return self.predicted_s / self.measured_s - 1.0
        return None


@dataclass
class Report:
    rows: list[Row]
    held_out: float
    fitted: dict
    warnings: list[str]
    slowdown: dict  # technique -> time at the largest RTT / time at the smallest
    qualitative: bool | None
    within_target: bool | None
    other_holdouts: dict = field(default_factory=dict)  # rtt -> {technique: error}
    round_trips: dict = field(default_factory=dict)  # technique -> added step time per unit of RTT
    runs_path: str = ""
    params_path: str = ""
    plot_path: str = ""
    run_seconds: float = 0.0
    fit_seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"held_out_rtt_ms": self.held_out, "target": TARGET, "within_target": self.within_target,
                "qualitative_reproduced": self.qualitative, "slowdown": self.slowdown,
                "round_trips_per_step": self.round_trips,
                "rows": [dict(r.__dict__, error=r.error) for r in self.rows], "fitted": self.fitted,
                "other_holdouts": self.other_holdouts, "warnings": self.warnings, "runs": self.runs_path,
                "params": self.params_path, "plot": self.plot_path, "run_seconds": round(self.run_seconds, 1),
                "fit_seconds": round(self.fit_seconds, 1)}


def latency_costs(rows) -> tuple[dict, dict, bool | None]:
    """What latency costs each technique, measured between the smallest and the largest RTT:
    (slowdown = time ratio, round trips per step = added seconds per second of RTT, and whether
    the study's finding holds: every other technique pays more than the pipeline; None when
    there is not exactly one pipelined technique to compare with)."""
    measured = {(x.rtt_ms, x.technique): x.measured_s for x in rows if x.measured_s}
    rtts = sorted({k[0] for k in measured})
    if not rtts:
        return {}, {}, None
    both = [t for t in TECHNIQUES if (rtts[0], t) in measured and (rtts[-1], t) in measured]
    slowdown = {t: measured[(rtts[-1], t)] / measured[(rtts[0], t)] for t in both}
    rtt_of = {x.rtt_ms: x.measured_rtt_ms for x in rows if x.measured_rtt_ms is not None}
    round_trips = {}
    if rtts[0] in rtt_of and rtts[-1] in rtt_of and rtt_of[rtts[-1]] > rtt_of[rtts[0]]:
        added_rtt_s = (rtt_of[rtts[-1]] - rtt_of[rtts[0]]) / 1e3
        round_trips = {t: (measured[(rtts[-1], t)] - measured[(rtts[0], t)]) / added_rtt_s for t in both}
    # Judged on round trips per step (added seconds), not on the slowdown ratio: its denominator
    # is a LAN step of tens of ms that two busy cores move by 30%, so a faster LAN step alone
    # made Pipeshard's ratio look like Data's (CI, 2026-11-24: x29.6 against x36.3; reruns of the
    # same loop: ratios 1.25x and 1.31x apart, while Data paid 2.42x and 2.31x Pipeshard's added seconds).
    cost = round_trips or slowdown
    pipelined = [t for t in cost if is_pipelined(t)]
    if len(pipelined) != 1 or len(cost) < 2:
        return slowdown, round_trips, None
    return slowdown, round_trips, all(cost[t] > cost[pipelined[0]] for t in cost if t != pipelined[0])


def print_report(rep: Report, file=sys.stdout) -> None:
    w = lambda s="": print(s, file=file)  # noqa: E731
    w(f"{'RTT ms':>7}  {'(measured)':>10}  {'technique':<10} {'measured ms':>11} {'predicted ms':>12} {'error':>8}  role")
    for x in rep.rows:
        if x.measured_s is None:
            w(f"{x.rtt_ms:>7g}  {'':>10}  {x.technique:<10} {x.status:>11}")
            continue
        err = f"{x.error * 100:+7.1f}%" if x.error is not None else ""
        w(f"{x.rtt_ms:>7g}  {x.measured_rtt_ms:>10.3f}  {x.technique:<10} {x.measured_s * 1e3:>11.1f} "
          f"{x.predicted_s * 1e3:>12.1f} {err:>8}  {x.role}")
    held = [x for x in rep.rows if x.role == "held out"]
    if held:
        worst = max(held, key=lambda x: abs(x.error))
        w(f"held out RTT {rep.held_out:g} ms: worst error {worst.error * 100:+.1f}% ({worst.technique}); "
          f"within {TARGET * 100:.0f}% for every technique: {'yes' if rep.within_target else 'NO'}")
    for rtt, errors in rep.other_holdouts.items():
        if "error" in errors:
            w(f"held out RTT {rtt} ms instead: {errors['error']}")
        else:
            worst = max(errors.items(), key=lambda kv: abs(kv[1]))
            w(f"held out RTT {rtt} ms instead: " + ", ".join(f"{t} {e * 100:+.1f}%" for t, e in errors.items())
              + f" (worst {worst[0]} {worst[1] * 100:+.1f}%)")
    if rep.slowdown:
        rtts = sorted({x.rtt_ms for x in rep.rows if x.measured_s})
        w(f"slowdown from RTT {rtts[0]:g} to {rtts[-1]:g} ms (measured): "
          + ", ".join(f"{t} x{s:.2f}" for t, s in rep.slowdown.items()))
        if rep.round_trips:
            w("round trips per step (added time / added RTT, measured): "
              + ", ".join(f"{t} {n:.1f}" for t, n in rep.round_trips.items()))
        if rep.qualitative is not None:
            w("the study's result (each added ms of RTT costs Data, ZeRO2 and Shard more than Pipeshard): "
              + ("reproduced" if rep.qualitative else "NOT reproduced"))
    w("fitted: " + ", ".join(f"{k} = {v['value']:.4g}{' ' + v['unit'] if v['unit'] else ''}"
                             + (f" ({v['note']})" if v['note'] else "") for k, v in rep.fitted.items()))
    w(f"time: runs {rep.run_seconds:.0f} s, fits {rep.fit_seconds:.1f} s")
    for path, label in ((rep.runs_path, "records"), (rep.params_path, "fitted parameters"), (rep.plot_path, "plot")):
        if path:
            w(f"{label}: {path}")


def plot(rep: Report, path: Path) -> None:
    """Measured and predicted time per iteration against RTT, one colour per technique; the answer
    drawn: at each RTT the fastest measured technique is ringed and named under the axis."""

    matplotlib = require("matplotlib", "calibrate", "geosim live validate")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    from geosim.report.figures import save_png

    colours = {"data": "tab:blue", "zero2": "tab:orange", "shard": "tab:red", "pipeshard": "tab:green"}
    fig, ax = plt.subplots(figsize=(9, 5.2))
    for t in TECHNIQUES:
        mine = sorted((x for x in rep.rows if x.technique == t and x.measured_s), key=lambda x: x.rtt_ms)
        if not mine:
            continue
        c = colours[t]
        ax.plot([x.rtt_ms for x in mine], [x.measured_s * 1e3 for x in mine], "o-", color=c, label=f"{t} measured")
        ax.plot([x.rtt_ms for x in mine], [x.predicted_s * 1e3 for x in mine], "--", color=c, alpha=0.7)
        for x in mine:
            marker = "*" if x.role == "held out" else "x"
            ax.plot([x.rtt_ms], [x.predicted_s * 1e3], marker, color=c, markersize=11 if marker == "*" else 7)
            if x.role == "held out":  # each technique's label on its own side of the star: no pile-up
                offset = {"data": (6, 4), "zero2": (6, -11), "shard": (-30, 4), "pipeshard": (-30, -11)}[t]
                ax.annotate(f"{x.error * 100:+.0f}%", (x.rtt_ms, x.predicted_s * 1e3), fontsize=8,
                            xytext=offset, textcoords="offset points", color=c)
    below = blended_transform_factory(ax.transData, ax.transAxes)
    for rtt in sorted({x.rtt_ms for x in rep.rows if x.measured_s}):
        at = [x for x in rep.rows if x.rtt_ms == rtt and x.measured_s]
        best = min(at, key=lambda x: x.measured_s)
        ax.plot([rtt], [best.measured_s * 1e3], "o", ms=15, mfc="none", mec="black", mew=1.4, zorder=5)
        ax.text(rtt, 0.03, f"fastest: {best.technique}", transform=below, ha="center", fontsize=8)
    ax.plot([], [], "x--", color="grey", label="predicted (fit)")
    ax.plot([], [], "*", color="grey", markersize=11, label=f"predicted (held out: {rep.held_out:g} ms)")
    ax.plot([], [], "o", ms=12, mfc="none", mec="black", label="fastest measured at its RTT")
    ax.set_xlabel("RTT of the emulated WAN (ms)")
    ax.set_ylabel("time per iteration (ms)")
    ax.set_yscale("log")
    low, high = ax.get_ylim()
    ax.set_ylim(low / 1.6, high)  # room under the curves for the 'fastest' names
    ax.set_title("geosim live validate: 2 emulated hosts, gloo over TCP")
    ax.grid(True, which="both", alpha=0.3)
    legend = ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    try:
        save_png(fig, path, extra=[legend])  # atomically: a unique temporary file beside it, then renamed
    finally:
        plt.close(fig)
