"""`geosim live validate`'s fit (issue 24): which figure of a run it predicts, what it says about the
machine's load, and what runs far apart in RTT are allowed to fit (round trips only; the jax runtime's
fixed costs and Shard's collectives come shipped and measured)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from geosim.live.experiments import validate as live_validate
from geosim.inputs.records import validate

from test_live_wan_runs import fake_slice, local_record_doc
from geosim.live.experiments import wan_runs


def record(rtt: float, technique: str, measured: dict, runtime: str = "jax"):
    doc = wan_runs.to_wan_record(local_record_doc(), fake_slice(rtt=rtt, bandwidth=1000))
    doc = live_validate.with_measured_rtt(doc, rtt, rtt)
    doc["technique"] = technique
    doc["workload"]["runtime"] = runtime
    doc["measured"] = {"total_time_s": 99.0, "steps": 12, **measured}
    return validate(doc, "t")


def test_the_fastest_step_is_the_figure_predicted_and_old_records_give_their_median():
    new = record(0.1, "data", {"time_per_iteration_s": 0.084, "fastest_iteration_s": 0.067, "load_before": 1.3,
                               "load_after": 2.5, "cores": 2, "cpu_per_iteration_s": 0.11})
    old = record(0.1, "data", {"time_per_iteration_s": 0.130})
    assert live_validate.run_time_s(new) == 0.067 and live_validate.run_time_s(old) == 0.130
    case = live_validate.per_iteration_cases([new], "t")[0]
    assert case.record.measured["time_per_iteration_s"] == 0.067


def test_a_run_on_a_machine_loaded_beyond_its_cores_is_named_in_one_line():
    quiet = record(0.1, "data", {"time_per_iteration_s": 0.08, "load_before": 1.2, "load_after": 1.9, "cores": 2})
    busy = record(25, "shard", {"time_per_iteration_s": 4.5, "load_before": 1.5, "load_after": 11.4, "cores": 2})
    assert live_validate.load_warning([quiet]) is None
    line = live_validate.load_warning([quiet, busy])
    assert "\n" not in line and "above the 2 cores during 1 of 2 runs" in line and "25 ms shard (load 11.4)" in line


def test_the_fit_moves_only_round_trips_within_the_tcp_models_declared_ranges():
    from geosim.inputs.params import fittable, load_params

    records = [record(rtt, t, {"time_per_iteration_s": 0.1 * (1 + rtt)}) for rtt in (25, 70)
               for t in ("data", "zero2", "shard", "pipeshard")]
    free = live_validate.free_params(live_validate.per_iteration_cases(records, "t"), load_params(None))
    assert {p.name for p in free} == {"transport.p2p_handshake_rtts", "runtime.jax.collective_step_rtts"}
    declared = fittable()
    for p in free:
        key = "transport.collective_step_rtts" if p.name.startswith("runtime.") else p.name
        assert (p.lower, p.upper) == declared[key].fit  # declared once, in geosim/sim/network/tcp.py
    # Shard's collectives are the compiled program's under jax: nothing to profile
    assert live_validate.profiled_settings(live_validate.per_iteration_cases(records, "t")) == {}
    alpa = [replace(r, workload={**r.workload, "runtime": "alpa"}) for r in records]
    assert set(live_validate.profiled_settings(live_validate.per_iteration_cases(alpa, "t"))) == {
        "shard.collectives_per_layer"}


@pytest.mark.slow
def test_validate_recovers_a_held_out_rtt_of_simulated_jax_runs():
    """Runs the simulator itself timed with the jax runtime's shipped costs and known round trips: a fit on
    25 and 70 ms predicts 0.1 ms, where only the shipped costs and compute remain."""
    from geosim.inputs.case import Case
    from geosim.calibrate.cases import cases_from_records
    from geosim.inputs.params import load_params
    from geosim.predict import predict
    from geosim.inputs.runtime import shipped_runtimes, with_runtime

    truth = with_runtime(load_params(None), replace(shipped_runtimes()["jax"], collective_step_rtts=0.6))
    # live's fp32 ZeRO-2 gathers 4 bytes a parameter (what validate sets: live_settings)
    truth = truth.with_network("tcp", p2p_handshake_rtts=3.0).with_settings("zero2", gather_bytes_per_param=4.0)
    records = []
    for rtt in (0.1, 25, 70):
        for t in ("data", "zero2", "shard", "pipeshard"):
            case = cases_from_records([record(rtt, t, {"time_per_iteration_s": 1.0})], "s")[0]
            seconds = predict(Case(case.cluster, case.model, case.workload, truth), t).iteration_time_s
            records.append(record(rtt, t, {"time_per_iteration_s": round(seconds, 6),
                                           "fastest_iteration_s": round(seconds, 6)}))
    rep, _ = live_validate.validate_records(records, 0.1, max_nfev=40)
    held = [r for r in rep.rows if r.role == "held out"]
    assert len(held) == 4 and max(abs(r.error) for r in held) < 0.02, [(r.technique, r.error) for r in held]
    fitted = {k: v["value"] for k, v in rep.fitted.items()}
    assert fitted["runtime.jax.collective_step_rtts"] == pytest.approx(0.6, rel=0.1)
    assert fitted["transport.p2p_handshake_rtts"] == pytest.approx(3.0, rel=0.1)


@pytest.mark.slow
def test_the_validate_runs_of_nov_26_regenerate_the_pages_table():
    """docs/results/2026-11-26-cpu-compute.md: runs-10 (XLA:CPU's measured constants, the RTT by ICMP echo,
    each run's own window) held out at every RTT in turn, from a fit of round trips alone on the other two:
    within 15% for every technique, 0.1 ms included, with the page's figures."""
    from pathlib import Path

    from geosim.inputs.records import read_records

    data = Path(__file__).resolve().parents[1] / "docs" / "results" / "data"
    records = read_records(data / "2026-11-26-validate-runs-10.jsonl")
    assert all({"fastest_iteration_s", "load_before", "load_after", "cores", "tcp_window_kib"} <= set(r.measured)
               for r in records)
    assert all("(ICMP echo)" in r.note for r in records)
    page = {0.1: {"data": -0.030, "zero2": -0.071, "shard": 0.040, "pipeshard": -0.022},
            25.0: {"data": 0.004, "zero2": -0.017, "shard": -0.024, "pipeshard": -0.069},
            70.0: {"data": 0.055, "zero2": -0.015, "shard": -0.009, "pipeshard": 0.145}}
    for rtt, errors in page.items():
        rep, _ = live_validate.validate_records(records, rtt, max_nfev=40)
        held = {r.technique: r.error for r in rep.rows if r.role == "held out"}
        assert {k: round(v, 3) for k, v in held.items()} == pytest.approx(errors, abs=0.0015), rtt
        assert rep.within_target
    # a run on a loaded machine is named in one line (the evening runs of 2026-11-25, load above 2 cores)
    loaded = read_records(data / "2026-11-25-validate-runs-2.jsonl")
    rep, _ = live_validate.validate_records(loaded, 25.0, max_nfev=40)
    assert any("above the 2 cores" in w for w in rep.warnings)
