"""A row expected to take long (its work count, geosim.cost) says so before it starts, with the time it
expects and what to ask instead, and runs after the others (issue 47 item 2): the rows already done
are printed as they are done (text mode), the answers are those of the rows asked in order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import geosim.cost as cost
from geosim.inputs.case import Case
from geosim.inputs.params import default_params
from geosim.predict import LongPrediction, deferring_long, predict, shared_predictions
from geosim.inputs.scenario import get_model, load_scenario
from geosim.studies.asked import asked_rows

from conftest import run_cli as run

THREE_VMS = Path(__file__).parent / "data" / "three-vms.toml"
ARGS = ["predict", "--scenario", str(THREE_VMS), "--technique", "data,shard,pipeshard", "--hosts", "vm1+vm2+vm3"]


def three_vms() -> Case:
    scenario = load_scenario(THREE_VMS)
    return Case(scenario.cluster, get_model("gpt2m"), scenario.workload(), default_params())


def test_the_estimate_follows_the_work_count():
    from geosim.techniques import get_technique, simulation_rate, technique_names

    rates = [getattr(get_technique(name), "SIMULATED_UNITS_PER_CPU_S", None) for name in technique_names()]
    rates = [rate for rate in rates if rate]
    shard = get_technique("shard").SIMULATED_UNITS_PER_CPU_S
    assert cost.expected_seconds(6_000_000, "shard") == pytest.approx(6_000_000 / shard)
    assert simulation_rate("a technique not listed") == min(rates)
    assert cost.long_prediction(1, "data") is None
    assert cost.long_prediction(10 ** 12, "data") > cost.LONG_PREDICTION_S


def test_predict_defers_a_long_question_only_when_asked_to(monkeypatch):
    case = three_vms()
    monkeypatch.setattr(cost, "LONG_PREDICTION_S", 0.0)  # every question is long
    with deferring_long(), pytest.raises(LongPrediction) as long:
        predict(case, "shard")
    assert long.value.seconds > 0 and long.value.work > 0
    assert predict(case, "shard").ok  # outside the block it simulates


def test_long_rows_run_last_and_the_rows_come_back_in_the_order_asked(monkeypatch):
    case = three_vms()
    hosts = [tuple(h.name for h in case.cluster.hosts)]
    with shared_predictions():
        plain = asked_rows(case, ("data", "shard", "pipeshard"), hosts)
    real = cost.long_prediction
    monkeypatch.setattr(cost, "LONG_PREDICTION_S", 0.0)

    def spy(work, technique):  # Shard's row alone is long
        return real(work, technique) if technique == "shard" else None

    monkeypatch.setattr("geosim.predict.long_prediction", spy)
    import geosim.predict

    builds, build = [], geosim.predict.build_schedule
    monkeypatch.setattr(geosim.predict, "build_schedule", lambda t, *a, **k: builds.append(t) or build(t, *a, **k))
    order, announced = [], []
    with shared_predictions():
        rows = asked_rows(case, ("data", "shard", "pipeshard"), hosts,
                          on_row=lambda p: order.append(p.technique),
                          on_long=lambda t, h, long: announced.append((t, h, long.seconds, len(order))))
    assert order == ["data", "pipeshard", "shard"]  # the long one last
    assert builds.count("shard") == 1  # its schedule built once: kept from when it was deferred
    assert [(t, h, at) for t, h, _, at in announced] == [("shard", hosts[0], 2)]  # before it started
    assert [r.technique for r in rows] == ["data", "shard", "pipeshard"]  # as asked
    assert [r.to_dict() | {"wall_s": 0} for r in rows] == [r.to_dict() | {"wall_s": 0} for r in plain]


def test_the_cli_announces_a_long_row_and_answers_the_same(monkeypatch):
    code, quiet, _ = run(ARGS + ["--json"])
    assert code == 0
    # every row that runs is long (Data fails before it is counted): each announced
    monkeypatch.setattr(cost, "LONG_PREDICTION_S", 0.0)
    code, out, err = run(ARGS + ["--json"])
    assert code == 0
    strip = lambda doc: [{k: v for k, v in p.items() if k != "wall_s"} for s in json.loads(doc)["slices"]
                         for p in s["predictions"]]
    assert strip(out) == strip(quiet)
    announcements = [line for line in err.splitlines() if "will take about" in line]
    assert len(announcements) == 2 and all("ask fewer --hosts" in line for line in announcements)
    assert "(row done)" not in err  # --json: the rows come when all are done
    code, text, err = run(ARGS)
    assert code == 0
    assert err.count("(row done)") == 3 and "will take about" in err
