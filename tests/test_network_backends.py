"""Network backends are backends found by name, with their own settings; the engine has no default."""

from __future__ import annotations

import inspect

import pytest

from geosim.inputs.case import Case
from geosim.base.errors import GeosimError
from geosim.inputs.params import load_params
from geosim.inputs.scenario import get_model, load_scenario
from geosim.sim.engine import run_schedule
from geosim.sim.network import least_delay, network_backend, network_names
from geosim.sim.network.tcp import Settings, TCPNetwork
from geosim.predict import predict
from geosim.techniques import plan_floor_s, plan_variants


def case(network: str = "tcp") -> Case:
    scenario = load_scenario("utah-gpn")
    return Case(scenario.cluster, get_model("gpt2m"), scenario.workload(epochs=1), load_params(), network=network)


def test_four_backends_by_name_and_no_engine_default():
    assert network_names() == ["alpha-beta", "fabric", "ideal", "tcp"]
    assert network_backend("tcp") is TCPNetwork
    assert inspect.signature(run_schedule).parameters["network"].default is inspect.Parameter.empty
    with pytest.raises(GeosimError, match="unknown network backend 'nccl'"):
        network_backend("nccl")


def test_the_tcp_model_reads_its_own_settings_from_the_parameters_it_declares(tmp_path):
    from geosim.sim.network import tcp

    assert tcp.TABLE == "transport"
    assert {p.field for p in tcp.PARAMETERS} == set(Settings.__dataclass_fields__)
    params = load_params()
    assert Settings.from_params(params) is params.network("tcp")
    assert params.network("tcp").window_bytes == pytest.approx(1.43 * 2**20)
    # a file's [transport] table sets them, in the declared unit, checked against the declared range
    path = tmp_path / "p.toml"
    path.write_text("[transport]\nwindow_mib = 4\nidle_restart_ms = 300\n")
    mine = load_params(path).network("tcp")
    assert (mine.window_bytes, mine.idle_restart_s) == (4 * 2**20, pytest.approx(0.3))
    path.write_text("[transport]\nwindow_mib = 0\n")
    with pytest.raises(GeosimError, match="window_mib"):
        load_params(path)


def test_the_case_chooses_the_model():
    """Over a 20 ms WAN the window-bound TCP model is slower than plain latency + bandwidth, and
    both are slower than free communication."""
    tcp, alpha_beta, ideal = (predict(case(n), "data").iteration_time_s for n in ("tcp", "alpha-beta", "ideal"))
    assert ideal < alpha_beta < tcp


@pytest.mark.parametrize("network", ["tcp", "fabric", "alpha-beta", "ideal"])
def test_the_pipeline_floor_uses_the_cases_model_and_stays_under_its_prediction(network):
    from dataclasses import replace

    base, hosts, checked = case(network), ("vm1", "vm2"), 0
    for workload_changes, options in list(plan_variants("pipeshard", base, hosts))[::10]:
        c = base.with_(workload=replace(base.workload, **workload_changes))
        predicted = predict(c, "pipeshard", hosts=hosts, options=options)
        if predicted.status != "ok":
            continue
        checked += 1
        assert 0 < plan_floor_s("pipeshard", c, hosts, c.workload, options) <= predicted.total_time_s
    assert checked


def test_least_delay_is_zero_on_the_ideal_network():
    c = case("ideal")
    from geosim.techniques._base import devices_of

    devices = devices_of(c.cluster)
    assert least_delay("ideal", c.cluster, c.params, devices)(0, len(devices) - 1, 1e6, True) == 0.0
    assert least_delay("tcp", c.cluster, c.params, devices)(0, len(devices) - 1, 1e6, True) > 0.0


def test_every_predicting_command_takes_network_and_a_sweep_directory_keeps_its_model(tmp_path, capsys):
    from geosim.cli import main

    for command in (["predict", "--hosts", "all"], ["plan", "--top", "1"], ["select"]):
        assert main([*command, "--scenario", "utah-gpn", "--network", "alpha-beta", "--json"]) == 0
    out = str(tmp_path / "sweep")
    sweep = ["sweep", "--scenario", "utah-gpn", "--rtt-ms", "native", "--technique", "data", "--sweep-dir", out, "--quiet"]
    assert main(sweep) == 0
    capsys.readouterr()
    assert main([*sweep, "--network", "alpha-beta"]) == 2  # its rows were predicted on fabric (the default)
    assert "predicted on the fabric network backend, not alpha-beta" in capsys.readouterr().err


def test_a_fit_moves_the_tcp_models_settings_through_their_declaration_and_writes_them_back(tmp_path):
    from geosim.calibrate.free import FreeParam, apply_params
    from geosim.inputs.params import write_params

    base = load_params()
    window = FreeParam("scalar", "transport.window_mib", 1.43, 1 / 16, 512.0, "MiB")
    fitted = apply_params(base, [window], [4.0])
    assert fitted.network("tcp").window_bytes == 4 * 2**20 and base.network("tcp").window_bytes != 4 * 2**20
    write_params(fitted, tmp_path / "fitted.toml")
    assert "[transport]" in (tmp_path / "fitted.toml").read_text()
    assert load_params(tmp_path / "fitted.toml").network("tcp") == fitted.network("tcp")
