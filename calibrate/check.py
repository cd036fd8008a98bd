"""`geosim calibrate check`: how well given parameters predict measured runs, with no fitting.

Every record is predicted from what it carries (its slice, its model's dimensions, its
workload, remat, its technique's options) with the parameters as they are; per record and
in summary it sets the prediction beside the measurement: time per iteration, TFLOP/s per
GPU, peak memory per GPU, and whether it fits (a record that ran out of memory against
the memory model's verdict).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

from geosim.calibrate.cases import RunCase
from geosim.inputs.case import Case
from geosim.predict import Prediction, predict
from geosim.inputs.specs import Params

METRICS = ("time_per_iteration_s", "tflops_per_gpu", "peak_memory_gib")
LABELS = {"time_per_iteration_s": "time/iter", "tflops_per_gpu": "TFLOP/s", "peak_memory_gib": "peak mem"}


@dataclass
class Checked:
    where: str
    label: str
    model: str
    gpus: int
    measured_status: str  # ok | out-of-memory | failed ...
    predicted_status: str  # ok | out-of-memory | infeasible
    memory_verdict: str  # fits | may not fit | out-of-memory (the memory model's band)
    measured: dict  # metric -> value (what the record has)
    predicted: dict  # metric -> value
    note: str = ""

    def error(self, metric: str) -> float | None:
        """predicted / measured - 1, or None when either side lacks the metric."""
        m, p = self.measured.get(metric), self.predicted.get(metric)
        if m is None or p is None or m <= 0:
            return None
        return p / m - 1.0

    @property
    def memory_agrees(self) -> bool:
        """Out of memory measured and predicted, or ran and predicted to fit (or maybe)."""
        ran_out = self.measured_status == "out-of-memory"
        return ran_out == (self.memory_verdict == "out-of-memory") or self.memory_verdict == "may not fit"

    def to_dict(self) -> dict:
        return asdict(self) | {"errors": {m: self.error(m) for m in METRICS if self.error(m) is not None},
                               "memory_agrees": self.memory_agrees}


def _measured(case: RunCase) -> dict:
    """The record's figures as time per iteration, TFLOP/s and peak memory (a wall-clock total turned
    into time per iteration over the record's iterations)."""
    m = case.record.measured or {}
    out = {k: float(m[k]) for k in METRICS if isinstance(m.get(k), (int, float)) and m[k] > 0}
    if "time_per_iteration_s" not in out and isinstance(m.get("total_time_s"), (int, float)) and m["total_time_s"] > 0:
        iterations = case.workload.iterations_per_epoch * case.workload.epochs
        out["time_per_iteration_s"] = float(m["total_time_s"]) / iterations
    return out


def _verdict(result: Prediction) -> str:
    if result.status == "out-of-memory":
        return "out-of-memory"
    if result.memory_note:
        return "may not fit"
    return "fits" if result.status == "ok" else result.status


def interrupted(case: RunCase) -> bool:
    """A run that measured nothing to compare: 0 timed steps, or a status other than ok or
    out-of-memory (fit leaves these out too: their metric is None)."""
    return case.status not in ("ok", "out-of-memory") or case.record.measured.get("steps") == 0


def check(cases: list[RunCase], params: Params, progress=None) -> list[Checked]:
    rows = []
    for i, case in enumerate(cases):
        if progress:
            progress(f"  [{i + 1}/{len(cases)}] {case.label}")
        cluster = case.cluster.subset(case.hosts) if case.hosts else case.cluster
        result = predict(Case(case.cluster, case.model, case.workload, params), case.technique, hosts=case.hosts,
                         options=case.options)
        predicted = {}
        if result.ok:
            predicted = {"time_per_iteration_s": result.iteration_time_s, "tflops_per_gpu": result.tflops_per_gpu}
        if result.peak_memory_gib is not None:
            predicted["peak_memory_gib"] = result.peak_memory_gib
        rows.append(Checked(
            where=case.where, label=case.label, model=case.model.name, gpus=cluster.num_gpus,
            measured_status=case.record.status, predicted_status=result.status, memory_verdict=_verdict(result),
            measured=_measured(case), predicted={k: v for k, v in predicted.items() if v is not None},
            note=result.reason or result.memory_note or ""))
    return rows


def summary(rows: list[Checked]) -> dict:
    """Per metric: how many records have both figures, the median and worst |error| and the mean signed error;
    memory verdicts against what happened."""
    out: dict = {"records": len(rows)}
    for metric in METRICS:
        errors = [e for r in rows if (e := r.error(metric)) is not None and math.isfinite(e)]
        out[metric] = None  # no record with both figures (alpa-log's records measure tokens/s, not time)
        if errors:
            worst = max(errors, key=abs)
            out[metric] = {"n": len(errors), "median_abs_error": statistics.median(abs(e) for e in errors),
                           "worst_error": worst, "mean_error": statistics.fmean(errors)}
    ran_out = [r for r in rows if r.measured_status == "out-of-memory"]
    out["memory"] = {
        "measured_out_of_memory": len(ran_out),
        "of_them_predicted_out_of_memory": sum(r.memory_verdict == "out-of-memory" for r in ran_out),
        "of_them_predicted_may_not_fit": sum(r.memory_verdict == "may not fit" for r in ran_out),
        "ran_but_predicted_out_of_memory": sum(r.measured_status == "ok" and r.memory_verdict == "out-of-memory"
                                               for r in rows),
    }
    return out


def _cell(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    if metric == "time_per_iteration_s":
        return f"{value:.3g} s"
    if metric == "tflops_per_gpu":
        return f"{value:.3g}"
    return f"{value:.1f} GiB"


def print_table(rows: list[Checked], params_label: str) -> None:
    print(f"predicted with {params_label} (no fitting); error = predicted / measured - 1")
    head = f"  {'record':<24} {'technique':<22} {'GPUs':>4}"
    for metric in METRICS:
        head += f" {LABELS[metric] + ' meas':>14} {'pred':>10} {'err':>7}"
    print(head + "  memory (measured -> predicted)")
    for r in rows:
        line = f"  {r.where[-24:]:<24} {r.label[-22:]:<22} {r.gpus:>4}"
        for metric in METRICS:
            e = r.error(metric)
            line += (f" {_cell(r.measured.get(metric), metric):>14} {_cell(r.predicted.get(metric), metric):>10} "
                     f"{'' if e is None else f'{e:+.0%}':>7}")
        status = "ran" if r.measured_status == "ok" else r.measured_status
        print(line + f"  {status} -> {r.memory_verdict}{'' if r.memory_agrees else '  (DISAGREES)'}")
    s = summary(rows)
    print(f"\nsummary over {s['records']} record(s):")
    for metric in METRICS:
        if s.get(metric):
            m = s[metric]
            print(f"  {LABELS[metric]:<10} {m['n']:>3} compared: median |error| {m['median_abs_error']:.1%}, "
                  f"worst {m['worst_error']:+.1%}, mean {m['mean_error']:+.1%}")
    mem = s["memory"]
    print(f"  memory     {mem['measured_out_of_memory']} ran out of memory: {mem['of_them_predicted_out_of_memory']} "
          f"predicted out of memory, {mem['of_them_predicted_may_not_fit']} 'may not fit'; "
          f"{mem['ran_but_predicted_out_of_memory']} that ran were predicted out of memory")
