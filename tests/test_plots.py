"""Plots that show the answer: every PNG geosim writes is at least 1200 px wide (read from the file),
no two of its texts overlap (checked on matplotlib's renderer when it was saved:
geosim.report.figures.LAYOUT), the recommended option is drawn and named, and the legend lists
only what is drawn."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from geosim.cli import main  # noqa: E402
from geosim.report import figures  # noqa: E402
from geosim.report.figures import MIN_WIDTH_PX, png_width  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def check(path: Path) -> dict:
    assert png_width(path) >= MIN_WIDTH_PX, path
    layout = figures.LAYOUT[str(path)]
    assert layout["overlaps"] == [], (path, layout["overlaps"])
    return layout


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    # the study's four: the best option flips between Pipeshard and Data on UTAH-MASS (with the
    # low-communication techniques, sweep's default since issue 34, SparseLoCo wins throughout)
    assert main(["sweep", "--scenario", "utah-mass,gat-amst", "--rtt-ms", "native,0.1,1,10,100", "--sweep-dir",
                 str(out), "--workers", "1", "--quiet", "--technique", "data,zero2,shard,pipeshard"]) == 0
    assert main(["report", "--sweep-dir", str(out)]) == 0
    return out


# slow: the module's sweep (ten points simulated and plotted, ~3 s of CPU); the other plots stay quick
@pytest.mark.slow
def test_sweep_plots_draw_and_name_the_best_option(sweep_dir):
    layout = check(sweep_dir / "plots" / "time-vs-rtt.png")
    named = [" ".join(t.split()) for t in layout["texts"] if "best" in t]
    assert any("Pipeshard vm1>vm2" in t and "Data on vm1" in t for t in named)  # UTAH-MASS flips between them
    assert any(t.startswith("best option") for t in layout["texts"])  # and the legend says what the band is


# slow: the module's sweep (ten points simulated and plotted, ~3 s of CPU); the other plots stay quick
@pytest.mark.slow
def test_breakdown_marks_the_fastest_and_lists_measured_only_when_drawn(sweep_dir):
    layout = check(sweep_dir / "plots" / "breakdown.png")
    assert layout["texts"].count("fastest") == 2  # one per panel
    assert "measured" in layout["texts"]  # the study's Table II at the slices' own RTTs


def test_no_measured_legend_entry_without_a_measurement(tmp_path):
    # no grid point at the slice's own RTT: the bars (at 1 ms here) have no measurement to mark, while
    # the time-vs-RTT panel still shows the study's point at 57.4 ms
    assert main(["sweep", "--scenario", "utah-mass", "--rtt-ms", "1,10", "--sweep-dir", str(tmp_path), "--workers", "1",
                 "--quiet", "--no-best"]) == 0
    assert main(["report", "--sweep-dir", str(tmp_path)]) == 0
    assert "measured" not in check(tmp_path / "plots" / "breakdown.png")["texts"]
    assert "measured" in check(tmp_path / "plots" / "time-vs-rtt.png")["texts"]


def test_crossval_plot_rings_the_fastest_per_slice_without_labels_piling_up(tmp_path):
    from geosim.calibrate.plot import plot_predicted_vs_measured
    from geosim.inputs.case import Case
    from geosim.inputs.params import load_params
    from geosim.inputs.scenario import BUILTIN_SCENARIOS, get_model, load_scenario
    from geosim.predict import predict
    from geosim.studies.reference import attach_measurement

    params, series = load_params(None), []
    for name in BUILTIN_SCENARIOS:  # the shipped defaults against the study's Table II: the in-sample picture
        scenario = load_scenario(name)
        case = Case(scenario.cluster, get_model("gpt2m"), scenario.workload(), params)
        for technique in ("data", "zero2", "shard", "pipeshard"):
            p = predict(case, technique)
            attach_measurement(p, scenario.cluster)
            series.append((scenario.cluster.name, technique, p.measured["total_time_s_20_epochs"], p.total_time_s))
    png = tmp_path / "crossval.png"
    plot_predicted_vs_measured({"fit": series, "loto": series}, png)
    layout = check(png)
    assert "fastest predicted on its slice" in layout["texts"] and "fastest measured on its slice" in layout["texts"]


def test_validate_plot_names_the_fastest_at_each_rtt(tmp_path):
    from geosim.live.experiments.validate_report import Report, Row, plot

    # the 2026-11-22 validation's rows (docs/results/2026-11-22-live-validate.md: ms per step)
    table = {0.1: (18.0, 18.1, 12.5, 12.5, 224.5, 224.5, 39.3, 39.3), 10: (48.2, 56.5, 51.1, 50.9, 1257.1, 1405.5,
                                                                            182.0, 176.7),
             40: (190.5, 184.9, 175.8, 179.3, 5023.3, 5073.4, 720.9, 720.5)}
    rows = [Row(rtt, t, v[2 * i] / 1e3, v[2 * i + 1] / 1e3, "held out" if rtt == 10 else "fit")
            for rtt, v in table.items() for i, t in enumerate(("data", "zero2", "shard", "pipeshard"))]
    png = tmp_path / "validate.png"
    plot(Report(rows, 10, {}, [], {}, None, None), png)
    layout = check(png)
    assert [t for t in layout["texts"] if t.startswith("fastest:")] == ["fastest: zero2", "fastest: data",
                                                                         "fastest: zero2"]


def test_the_shipped_images_are_wide_enough():
    for path in sorted((ROOT / "docs" / "img").glob("*.png")):
        assert png_width(path) >= MIN_WIDTH_PX, path
