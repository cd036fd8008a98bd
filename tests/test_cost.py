"""A prediction's cost known before it is simulated (geosim/cost.py), and progress while one runs long."""

import sys
import time

from geosim import cost
from geosim.inputs.case import Case
from geosim.inputs.params import load_params
from geosim.predict import predict
from geosim.inputs.scenario import BUILTIN_SCENARIOS, get_model, load_scenario
from geosim.sim.engine import SIMULATED_REPETITIONS
from geosim.sim.schedule import Collective, Compute, Repeat, Schedule


def test_work_counts_ops_collective_steps_and_the_repetitions_the_engine_runs():
    layer = (Compute(1.0, "f"), Collective("allreduce", (0, 1, 2, 3), 8.0, "ring", ("ar",)))
    block = Repeat(layer, 100, (0, 1, 2, 3), ("layers",))
    schedule = Schedule("t", [], {r: [Compute(1.0, "head"), block] for r in range(4)}, {})
    per_layer = 1 + (1 + 2 * 2 * 3)  # a compute; a collective's arrival and 2(p-1) sends and receives
    assert cost.schedule_work(schedule) == 4 * (1 + SIMULATED_REPETITIONS * per_layer)
    assert cost.schedule_work(schedule, iterations=3, exact=True) == 3 * 4 * (1 + 100 * per_layer)


def test_a_prediction_past_the_bound_is_infeasible_with_why_and_not_simulated(monkeypatch):
    sc = load_scenario(BUILTIN_SCENARIOS[0])
    case = Case(sc.cluster, get_model("gpt2m"), sc.workload(), load_params())
    ok = predict(case, "data")
    assert ok.status == "ok" and ok.simulated_events > 0
    monkeypatch.setattr(cost, "MAX_PREDICTION_WORK", 10)
    refused = predict(case, "data")
    assert refused.status == "infeasible" and refused.simulated_events == 0
    assert "too large to simulate" in refused.reason and "fewer microbatches" in refused.reason


def test_planning_progress_moves_while_one_option_runs_long(monkeypatch, capsys):
    """The lines come from a thread: an option that simulates for minutes still shows the clock."""
    from geosim.cli import _progress
    from geosim.cli.common import Progress

    monkeypatch.setattr(_progress, "INTERVAL_S", 0.05)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    bar = Progress("slice: planning")
    bar(3, 10)
    time.sleep(0.3)  # no callback meanwhile: one long option
    bar.close()
    lines = capsys.readouterr().err.rstrip().splitlines()
    assert len(lines) >= 2 and all(line.startswith("  slice: planning: simulated 3 of at most 10 options (")
                                   for line in lines)


def test_quick_work_prints_no_progress(capsys):
    from geosim.cli.common import Progress

    bar = Progress("slice: planning")
    bar(1, 2)
    bar.close()
    assert capsys.readouterr().err == ""


def test_the_reason_names_the_size_and_what_shrinks_it():
    assert cost.too_costly(cost.MAX_PREDICTION_WORK) is None
    text = cost.too_costly(3 * cost.MAX_PREDICTION_WORK)
    assert f"{3 * cost.MAX_PREDICTION_WORK / 1e9:,.0f} billion" in text and "hosts" in text
