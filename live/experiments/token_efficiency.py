"""Loss against tokens from live runs -> the measured token-efficiency factors.

`geosim live run ... --loss-curve-out curves.jsonl` appends one JSON object per run:

    {"technique": "diloco", "run_id": "...", "loss_curve": [[tokens, loss], ...], ...}

which is the format `geosim predict --loss-curves curves.jsonl` reads
(geosim/convergence.py: read_loss_curves, measured_efficiencies). A step's loss is the
loss on its global batch before the step's update (the same rows for every technique
with the same seed and batch), so it is the loss of the model that step starts from on
data that model has not trained on (within the first epoch). The curve samples the first
step of every block of `window` steps: with window a multiple of H, that is DiLoCo's or
SparseLoCo's *synchronized* model, right after an outer step (the steps in between
report the replicas' mid-round losses, which are not the model the run delivers). Each
point is the trailing mean of the last `smooth` samples (default 5), at the tokens
trained on before the sampled step; use the same window for the runs you compare (Data
sampled at the same steps sees the same batches: a paired comparison). The raw per-step
losses are kept beside the curve ("losses").

    python -m geosim.live.experiments.token_efficiency curves.jsonl [--target-loss L] [--baseline data]

prints the factors `geosim predict --loss-curves` will use (tokens the baseline needs to
reach the target loss / tokens the technique needs; the default target is the lowest loss
every curve reaches).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from geosim.base.errors import GeosimError
from geosim.base.fileio import append_lines

# ------------------------------------------------------------------ curves
def loss_curve(losses: list[float], tokens_per_step: int, window: int = 10, smooth: int = 5) -> list[list[float]]:
    """[tokens, loss] at steps 0, window, 2 window, ...: the loss of step k x window (the
    synchronized model when window is a multiple of H) averaged with the up to smooth - 1
    samples before it, at the k x window x tokens_per_step tokens trained on before it."""
    window, smooth = max(1, int(window)), max(1, int(smooth))
    samples = [(k * tokens_per_step, losses[k]) for k in range(0, len(losses), window)]
    points = []
    for i, (tokens, _) in enumerate(samples):
        recent = [loss for _, loss in samples[max(0, i - smooth + 1):i + 1]]
        points.append([tokens, round(statistics.fmean(recent), 6)])
    return points


def mean_step_time(step_times: list[float], inner_steps: int | None, warmup: int = 2) -> float | None:
    """Mean time per step over whole rounds (every H steps a sync: the mean counts it; the
    median the run record reports would not). The first round (compilation) is left out."""
    h = inner_steps or 1
    skip = max(h, 1 + warmup) if inner_steps else 1 + warmup
    skip = -(-skip // h) * h  # start at a round boundary
    usable = (len(step_times) - skip) // h * h
    if usable <= 0:
        return None
    return statistics.fmean(step_times[skip:skip + usable])


def curve_doc(record, losses: list[float], step_times: list[float], window: int | None = None,
              options: dict | None = None) -> dict:
    """One sidecar object for a run (record: geosim.inputs.records.RunRecord; options: the
    low-communication options it ran with). window None: H for diloco / sparseloco, else 10."""
    w = record.workload or {}
    tokens_per_step = int(w.get("global_batch", 0)) * int(w.get("seq_len", 0))
    from geosim.live.train import lowcomm

    options = lowcomm.effective(record.technique, options) if lowcomm.takes_options(record.technique) else None
    window = window or (options["inner_steps"] if options else 10)
    doc = {"technique": record.technique, "run_id": record.run_id, "model": record.model, "status": record.status,
           "loss": f"loss of every {window}th step on its (unseen) batch, trailing mean of 5",
           "tokens_per_step": tokens_per_step,
           "loss_curve": loss_curve(losses, tokens_per_step, window) if losses and tokens_per_step else [],
           "losses": [round(x, 6) for x in losses], "step_times_s": [round(t, 6) for t in step_times],
           "mean_step_time_s": mean_step_time(step_times, options["inner_steps"] if options else None)}
    if options:
        doc["options"] = options
    if record.note:
        doc["note"] = record.note
    return doc


def append_curve(path: str, doc: dict) -> None:
    """One whole line, one O_APPEND write: concurrent runs never interleave."""

    append_lines(path, [json.dumps(doc, allow_nan=False)])


# ------------------------------------------------------------------ factors
def factors(path: str, target_loss: float | None = None, baseline: str = "data") -> tuple[dict, float]:
    """convergence.py's measured factors for a curves file, and the target loss used."""
    from geosim.studies import convergence

    curves = convergence.read_loss_curves(path)
    if target_loss is None:
        target_loss = max(min(loss for _, loss in c) for c in curves.values())
    return convergence.measured_efficiencies(curves, target_loss, baseline), target_loss


def main(argv=None) -> int:

    parser = argparse.ArgumentParser(prog="python -m geosim.live.experiments.token_efficiency", description=__doc__.split("\n\n")[0])
    parser.add_argument("curves", help="JSON lines with technique and loss_curve (--loss-curve-out)")
    parser.add_argument("--target-loss", type=float, help="default: the lowest loss every curve reaches")
    parser.add_argument("--baseline", default="data")
    args = parser.parse_args(argv)
    try:
        eff, target = factors(args.curves, args.target_loss, args.baseline)
    except GeosimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"target loss {target:.4f} (tokens {args.baseline} needs / tokens the technique needs)")
    for technique, value in sorted(eff.items()):
        print(f"  {technique:<12} {value:.3f}")
    print(f"use: geosim predict ... --loss-curves {args.curves}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
