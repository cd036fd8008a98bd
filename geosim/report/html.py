"""`geosim report --sweep-dir DIR`: a sweep's plots and a one-page, self-contained HTML report.

The page embeds its PNGs as data URIs, so it can be mailed or attached as one file;
the SVGs sit beside it in DIR/plots/ for papers.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from geosim.studies.crossover import describe
from geosim.base.errors import GeosimError
from geosim.base.fileio import write_atomic
from geosim.report.plots import EFFECTIVE, breakdown_rows, panel_key, panel_title, plot_breakdown, plot_time_vs_axis
from geosim.studies.sweep.grid import NATIVE
from geosim.studies.sweep.store import count_lines, read_best, read_crossovers, read_manifest, read_rows, fingerprint
from geosim.base.units import s_to_ms
from geosim.inputs.params import load_params
from geosim.inputs.records import read_records
from geosim.studies.reference import STUDY_EPOCHS, measured_for, slice_rtt_ms
from geosim.studies.sweep.run import SweepContext, evaluate_row, resolve_scenario
from geosim.studies.whatif import wan_links
from geosim.techniques import STUDY_ORDER


def study_points(rows: list[dict], axis: str, metric: str) -> list[dict]:
    """The study's Table II times, where a panel is one of its slices as measured (gpt2m, 4 GPUs, 20 epochs)."""

    if axis != "rtt_ms":
        return []
    out, done = [], set()
    for r in rows:
        p = r["point"]
        if (not r.get("reference_slice") or p["gpu"] != NATIVE or p["bandwidth_gbps"] != NATIVE or p["hosts"] != "all"
                or r.get("epochs") != STUDY_EPOCHS):
            continue
        m = measured_for(r["reference_slice"], r["technique"], r["model"], r.get("num_gpus", 0))
        key = (panel_key(r, axis), r["technique"])
        if m is None or m.total_time_s is None or key in done:
            continue
        done.add(key)
        y = m.total_time_s if metric == "total_time_s" else m.total_time_s / STUDY_EPOCHS
        out.append({"panel": key[0], "technique": r["technique"], "x": slice_rtt_ms()[r["reference_slice"]], "y": y,
                    "source": "study Table II"})
    return out


def record_points(rows: list[dict], records_path: str, axis: str, metric: str) -> list[dict]:
    """Measured run records (geosim.inputs.records) that match a panel's scenario, technique, model and hosts."""

    if axis != "rtt_ms":
        return []
    out = []
    for rec in read_records(records_path):
        time_s = rec.measured.get("total_time_s")
        if rec.status != "ok" or time_s is None or rec.scenario is None:
            continue
        hosts = "+".join(rec.hosts) if rec.hosts else "all"
        match = next((r for r in rows if r["scenario"] in (rec.scenario, Path(rec.scenario).stem)
                      and r["technique"] == rec.technique and r["model"] == rec.model and r["point"]["hosts"] == hosts
                      and r["point"]["gpu"] == NATIVE and r["point"]["bandwidth_gbps"] == NATIVE), None)
        if match is None:
            continue
        epochs = rec.workload.get("epochs")
        if metric == "time_per_epoch_s":
            if not epochs:
                continue
            y = time_s / epochs
        else:
            y = time_s * match["epochs"] / epochs if epochs else time_s
        x = s_to_ms(max(link.rtt_s for link in wan_links(resolve_scenario(rec.scenario).cluster)))
        out.append({"panel": panel_key(match, axis), "technique": rec.technique, "x": x, "y": y, "source": rec.run_id})
    return out


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(path.stem)}">'


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt_time(seconds) -> str:
    if seconds is None:
        return ""
    return f"{seconds / 60:,.1f} min" if seconds < 36000 else f"{seconds / 3600:,.1f} h"


STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}table{border-collapse:collapse;font-size:.85em;margin:.5em 0 1.5em}
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}th{background:#f4f4f4}h1{font-size:1.5em}
h2{font-size:1.15em;margin-top:1.5em}.note{color:#666;font-size:.85em}"""


# the report holds every row to plot it, ~6 KB each in memory (measured: 120 MB at 1,000 rows, 180 MB
# at 10,000): past this it would pass a gigabyte, and its plots would be a blur of points anyway
MAX_REPORT_ROWS = 100_000


def build_report(out_dir: str | Path, records: str | None = None) -> dict:
    out_dir = Path(out_dir)
    manifest = read_manifest(out_dir)
    lines = count_lines(out_dir)  # before reading any: a million rows would be gigabytes
    if lines > MAX_REPORT_ROWS:
        raise GeosimError(f"{lines:,} rows, more than a report plots ({MAX_REPORT_ROWS:,}, ~6 KB each in memory); "
                          f"sweep the points to report into a directory of their own", source=str(out_dir))
    rows = read_rows(out_dir)
    if manifest is None or not rows:
        raise GeosimError("no sweep results here (run geosim sweep --sweep-dir DIR first)", source=str(out_dir))
    rows = _in_grid_order(rows, manifest["grid"])
    crossovers = read_crossovers(out_dir)
    axis = next((c["axis"] for c in crossovers), None) or _swept_axis(manifest["grid"])
    metric = manifest.get("metric", "total_time_s")
    measured = study_points(rows, axis, metric) + (record_points(rows, records, axis, metric) if records else [])
    plots = out_dir / "plots"
    plots.mkdir(exist_ok=True)
    files = []
    if axis:
        files += plot_time_vs_axis(rows, plots / f"time-vs-{axis.split('_')[0]}", axis=axis, metric=metric,
                                   crossovers=crossovers, measured=measured, best=read_best(out_dir))
    files += plot_breakdown(rows, plots / "breakdown", axis=axis or "rtt_ms",
                            measured=measured if metric == "total_time_s" else ())  # bars are whole runs
    beside = predicted_at_measured(rows, measured, manifest, axis, metric)
    page = _html(out_dir, manifest, rows, crossovers, measured, axis, metric, [f for f in files if f.suffix == ".png"],
                 beside, read_best(out_dir))
    write_atomic(out_dir / "report.html", page)
    return {"report": str(out_dir / "report.html"), "plots": [str(f) for f in files], "rows": len(rows),
            "crossovers": sum(1 for c in crossovers if c.get("at") is not None), "measured_points": len(measured)}


SAME_RTT = 1e-3  # relative: a grid point this close to a measurement's RTT is at it


def predicted_at_measured(rows: list[dict], measured: list[dict], manifest: dict, axis: str | None,
                          metric: str) -> list[dict]:
    """Each measurement beside the prediction at the same RTT: a grid row at it, else a prediction made
    now for the same point at the measured RTT (with the sweep's parameters when they are at hand)."""
    out = []
    ctx = None
    for m in measured:
        candidates = [r for r in rows if panel_key(r, axis) == m["panel"] and r["technique"] == m["technique"]]
        if not candidates:
            continue
        at = [r for r in candidates if abs(r[EFFECTIVE[axis]] - m["x"]) <= SAME_RTT * max(m["x"], 1e-9)]
        row, how = (at[0], "grid point") if at else (None, "")
        if row is None:
            ctx = ctx or _context(manifest, rows)
            if ctx is None:
                continue  # the sweep's parameters are not at hand: no like-for-like figure to show

            row = evaluate_row({**candidates[0]["point"], axis: float(f"{m['x']:.6g}")}, ctx)
            how = "predicted now at the measured RTT"
        out.append({"row": row, "measured": m, "how": how, "predicted": row.get(metric)})
    return out


def _context(manifest: dict, rows: list[dict]):
    """The sweep's context again (its parameters and scenarios), or None if its parameters are not
    the ones this install would load: a prediction must not silently use other parameters."""

    source = manifest.get("params_source")
    try:
        params = load_params(source if source and Path(source).exists() else None)
    except GeosimError:
        return None
    if fingerprint(params) != manifest.get("params"):
        return None
    scenarios = {name: resolve_scenario(name) for name in dict.fromkeys(r["point"]["scenario"] for r in rows)}
    return SweepContext(params, scenarios, manifest.get("metric", "total_time_s"))


def _in_grid_order(rows: list[dict], grid: dict) -> list[dict]:
    """Rows land in completion order; panels and legends read better in the order the grid was given."""

    rank = {axis: {repr(v): i for i, v in enumerate(values)} for axis, values in grid.items()}
    rank["technique"] = {repr(t): i for i, t in enumerate(STUDY_ORDER)} | {
        repr(t): len(STUDY_ORDER) + i for i, t in enumerate(grid.get("technique", []))}

    def key(row):
        p = row["point"]
        return [rank.get(a, {}).get(repr(p.get(a, p["workload"].get(a))), 1 << 20) for a in
                ("scenario", "model", "gpu", "hosts", "bandwidth_gbps", *p["workload"], "technique", "rtt_ms")]

    return sorted(rows, key=key)


def _swept_axis(grid: dict) -> str | None:
    for axis in EFFECTIVE:
        if len([v for v in grid.get(axis, []) if v != NATIVE]) > 1:
            return axis
    return None


def _html(out_dir, manifest, rows, crossovers, measured, axis, metric, pngs, beside, best) -> str:
    unit = {"rtt_ms": "ms", "bandwidth_gbps": "Gbit/s"}.get(axis, "")
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    axes = "; ".join(f"{k}: {', '.join(map(str, v)) if len(v) <= 8 else f'{len(v)} values, {v[0]} .. {v[-1]}'}"
                     for k, v in manifest["grid"].items())
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>geosim sweep: {html.escape(str(out_dir))}</title>",
             f"<style>{STYLE}</style></head><body>",
             f"<h1>geosim sweep: {html.escape(str(out_dir))}</h1>",
             f"<p>{len(rows)} points ({', '.join(f'{n} {k}' for k, n in sorted(statuses.items()))}). "
             f"Compared: <code>{metric}</code>. Parameters: <code>{html.escape(str(manifest.get('params_source')))}</code>.</p>",
             f"<p class='note'>Grid: {html.escape(axes)}</p>"]
    for png in pngs:
        title = "Predicted time vs " + AXIS_TITLES.get(axis, "") if png.stem.startswith("time-vs") else "Where the time goes"
        parts += [f"<h2>{html.escape(title)}</h2>", _img(png)]
        if png.stem.startswith("time-vs"):
            parts.append("<p class='note'>Lines: predictions. Diamonds: measured. x on the axis: out of memory; "
                         "bar on the axis: infeasible. Dotted verticals: crossovers.</p>")
    flips = [c for c in crossovers if c.get("at") is not None]
    if axis:
        parts.append(f"<h2>Crossovers on {html.escape(axis)}</h2>")
        parts.append(_table(["where", "pair", f"flips at ({unit})", "faster below", "faster above", "bisection steps"],
                            [[describe(c["point"], axis), f"{c['a']} / {c['b']}", f"{c['at']:.4g}", c["faster_below"],
                              c["faster_above"], c["steps"]] for c in flips])
                     if flips else "<p>No technique pair changes order inside the grid's range.</p>")
    if best:
        parts.append("<h2 id='best'>Best option against RTT</h2>")
        parts.append("<p class='note'>The planner's ranking over the swept techniques (single VMs and Pipeshard's "
                     "layer splits and microbatches included): what <code>geosim plan --sweep-rtt</code> says.</p>")
        table = []
        for doc in best:
            for row in doc.get("rows", []):
                table.append([describe({**doc["point"], "technique": "", "rtt_ms": ""}, "rtt_ms"), f"{row['rtt_ms']:g}",
                              row["best_option"] or "none", _fmt_time(row["total_time_s"]), row["algorithm1"] or ""])
        parts.append(_table(["where", "RTT (ms)", "best option", "predicted", "Algorithm 1 picks"], table))
    if beside:
        parts.append("<h2 id='measured'>Predicted beside measured, at the measured RTT</h2>")
        parts.append(_table(["panel", f"at ({unit})", "technique", "predicted", "measured", "predicted / measured",
                             "prediction from", "measurement"],
                            [[panel_title(b["row"], axis), f"{b['measured']['x']:.3g}", b["row"]["technique"],
                              _fmt_time(b["predicted"]), _fmt_time(b["measured"]["y"]),
                              f"{b['predicted'] / b['measured']['y']:.2f}" if b["predicted"] else "",
                              b["how"], b["measured"]["source"]] for b in beside]))
    parts.append("<h2>Per technique at each panel's native (or middle) point</h2>")
    table = []
    for key, picks in breakdown_rows(rows, axis or "rtt_ms").items():
        for r in picks:
            table.append([panel_title(r, axis or "rtt_ms"), f"{r[EFFECTIVE.get(axis or 'rtt_ms')]:.3g}", r["technique"],
                          r["status"], _fmt_time(r.get(metric)),
                          f"{r['tflops_per_gpu']:.2f}" if r.get("tflops_per_gpu") else "",
                          f"{r['peak_memory_gib']:.1f}" if r.get("peak_memory_gib") else "", r.get("reason") or ""])
    parts.append(_table(["panel", unit or "x", "technique", "status", "predicted", "TFLOP/s per GPU",
                         "peak GiB", "why not"], table))
    parts.append("<p class='note'>Rows: results.jsonl / results.csv in this directory. Plots as SVG: plots/.</p></body></html>")
    return "\n".join(parts)


AXIS_TITLES = {"rtt_ms": "WAN round-trip time", "bandwidth_gbps": "WAN bandwidth"}
