"""The kernel timer against published training steps (bench/compute_anchors.py,
docs/results/2026-11-28-compute-anchors.md): the fast subset, one or two anchors per runtime and generation,
within issue 41's bounds (median |error| <= 15%, worst <= 40%) on at least two runtimes and two generations.
The full table is the bench script's: `python bench/compute_anchors.py`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("compute_anchors", ROOT / "bench" / "compute_anchors.py")
anchors = sys.modules.setdefault("compute_anchors", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(anchors)  # a bench script, not a package module: loaded from its file


def test_the_fast_anchors_are_within_the_bounds():
    rows = [anchors.predict_anchor(a) for a in anchors.ANCHORS if a.fast]
    assert all(r["status"] == "ok" and not r["fitted_to"] for r in rows)
    s = anchors.summary(rows)
    assert s["median_abs_error"] <= 0.15 and s["worst_abs_error"] <= 0.40, rows
    shipped = set(s["runtimes"]) & {"pytorch", "megatron", "jax", "alpa"}
    assert len(shipped) >= 2 and len(s["generations"]) >= 2


def test_an_anchor_on_a_generation_nobody_measured_says_its_estimate():
    v100 = next(a for a in anchors.ANCHORS if a.gpu.startswith("V100"))
    row = anchors.predict_anchor(v100)
    assert row["estimated"] and row["estimated"][0].startswith("megatron-2020 on volta")
