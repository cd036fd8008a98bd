"""Parameter draws from a fit's covariance, and the parameters file that carries it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from geosim.base.errors import GeosimError
from geosim.inputs.params import default_params, load_params
from geosim.studies.uncertainty import parameter_draws, robustness, spread

COVARIANCE = """
[fitted]
on = ["x"]

[fitted.covariance]
names = ["compute.gemm_fraction", "transport.window_mib", "overhead.iteration_s.shared"]
matrix = [[0.04, 0.0, 0.0], [0.0, 0.09, 0.0], [0.0, 0.0, 0.01]]
"""


def write(tmp_path, text):
    path = tmp_path / "params.toml"
    path.write_text(text)
    return path


def test_draws_follow_the_covariance_of_the_logs(tmp_path):
    params = load_params(write(tmp_path, "[compute]\ngemm_fraction = 0.3\n" + COVARIANCE))
    draws = parameter_draws(params, 400, seed=1)
    gemm = np.log([d.gemm_fraction / 0.3 for d in draws])
    window = np.log([d.network("tcp").window_bytes / params.network("tcp").window_bytes for d in draws])
    overhead = np.log([d.iteration_overhead_s["data"] / params.iteration_overhead_s["data"] for d in draws])
    assert abs(gemm.mean()) < 0.03 and gemm.std() == pytest.approx(0.2, rel=0.15)
    assert window.std() == pytest.approx(0.3, rel=0.15)
    assert overhead.std() == pytest.approx(0.1, rel=0.15)
    # the shared overhead moves every technique's together
    assert all(d.iteration_overhead_s["data"] == d.iteration_overhead_s["zero2"] for d in draws)
    # parameters the covariance does not name stay as fitted
    assert {d.memory_fraction for d in draws} == {params.memory_fraction}


def test_a_fraction_of_peak_is_clipped_at_one(tmp_path):
    params = load_params(write(tmp_path, "[compute]\ngemm_fraction = 0.95\n" + COVARIANCE))
    draws = parameter_draws(params, 200, seed=2)
    assert max(d.gemm_fraction for d in draws) == 1.0
    assert min(d.gemm_fraction for d in draws) < 0.95


def test_draws_need_a_fitted_covariance():
    with pytest.raises(GeosimError) as info:
        parameter_draws(default_params().with_values(fitted_covariance=()), 4)
    assert info.value.key == "fitted.covariance"


@pytest.mark.parametrize("text,problem", [
    ('[fitted.covariance]\nnames = ["compute.gemm_fraction"]\nmatrix = [[0.1, 0.0]]\n', "1 x 1"),
    ('[fitted.covariance]\nnames = ["no.such"]\nmatrix = [[0.1]]\n', "unknown parameter"),
    ('[fitted.covariance]\nnames = "x"\n', "names = [...]"),
])
def test_bad_covariance_names_the_key(tmp_path, text, problem):
    with pytest.raises(GeosimError) as info:
        load_params(write(tmp_path, "[fitted]\non = []\n" + text))
    assert info.value.key.startswith("fitted.covariance") and problem in info.value.problem


def test_spread_and_robustness():
    r = spread([float(v) for v in range(1, 101)])
    assert r.low == pytest.approx(5.95) and r.high == pytest.approx(95.05) and r.median == 50.5 and r.draws == 100
    assert robustness(["a", "a", "b", "a"], "a") == 0.75
    assert math.isclose(robustness([], "a"), 0.0)


def test_predict_select_and_plan_draws_on_the_shipped_defaults(capsys):
    import json

    from geosim.cli import main

    assert main(["predict", "--scenario", "tacc-tacc", "--technique", "data", "--hosts", "all", "--draws", "4",
                 "--json"]) == 0
    (prediction,) = json.loads(capsys.readouterr().out)["slices"][0]["predictions"]
    spread_ = prediction["total_time_range_s"]
    assert spread_["draws"] == 4 and spread_["low"] <= spread_["median"] <= spread_["high"]
    assert spread_["low"] < prediction["total_time_s"] * 1.5 and spread_["high"] > prediction["total_time_s"] / 1.5
    assert main(["select", "--scenario", "utah-gpn", "--draws", "4", "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["slices"]
    assert doc["robustness"]["draws"] == 4 and 0.0 <= doc["robustness"]["share"] <= 1.0
    assert doc["robustness"]["share"] + sum(doc["robustness"]["others"].values()) == pytest.approx(1.0)
    assert main(["select", "--scenario", "utah-gpn", "--records", "study", "--draws", "2"]) == 2
    assert "--draws" in capsys.readouterr().err
