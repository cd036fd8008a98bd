"""Multi-host live runs over the emulated WAN and `geosim live validate` (issue 7, parts 2-3).

The tests that run processes in namespaces need root, /dev/net/tun and iproute2 and are
skipped cleanly otherwise; each uses its own state file under tmp_path and tears its
slice down in a finally. The others (record building, the fit on records the simulator
itself produced) run anywhere.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from conftest import default_sigint
from geosim.inputs.case import Case
from geosim.base.errors import GeosimError
from geosim.inputs.records import RunRecord, validate
from geosim.live.experiments import wan_runs
from geosim.live.experiments import validate as live_validate
from geosim.live.experiments import validate_report
from geosim.live.wan.emulator import Host, WanSlice

ENV = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
can_netns = (os.geteuid() == 0 and os.path.exists("/dev/net/tun")
             and subprocess.run(["which", "ip"], capture_output=True).returncode == 0)


def needs_root(test):
    """Marked root and slow; skipped cleanly without root, /dev/net/tun or iproute2."""
    for mark in (pytest.mark.root, pytest.mark.slow,
                 pytest.mark.skipif(not can_netns, reason="needs root, /dev/net/tun and iproute2")):
        test = mark(test)
    return test


def fake_slice(rtt=20.0, bandwidth=500.0, hosts=2) -> WanSlice:
    return WanSlice(id="abc123", hosts=[Host(f"geosim-wan-abc123-h{i}", f"10.213.0.{i + 1}", "wan0", f"wan-host{i}")
                                        for i in range(hosts)],
                    rtt_ms=[[0.0 if i == j else rtt for j in range(hosts)] for i in range(hosts)],
                    bandwidth_mbit=bandwidth, jitter_ms=0.0, loss=0.0, mtu=1500, ttl_s=60, started_at=0, expires_at=60,
                    state_path="/nonexistent", log_path="/nonexistent.log")


def local_record_doc(per_host=(1, 1)) -> dict:
    """What process 0 of a 2-process run prints (live/record.py's inline cluster)."""
    from geosim.live.train.record import inline_cluster

    devices = {"platform": "cpu", "kind": "cpu", "count": sum(per_host), "processes": len(per_host),
               "per_host": list(per_host)}
    rec = RunRecord(technique="data", model="tiny", status="ok", cluster=inline_cluster(devices),
                    model_dims={"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab": 257, "n_ctx": 64},
                    workload={"global_batch": 8, "microbatches": 1, "seq_len": 64, "precision": "fp32",
                              "tokens_per_epoch": 8 * 64 * 100},
                    measured={"time_per_iteration_s": 0.05, "total_time_s": 9.0, "steps": 6},
                    collective_impl="gloo", note="data: generated")
    return json.loads(rec.to_json())


# ----------------------------------------------------------------------------- anywhere

def test_record_on_the_slice_is_a_two_site_scenario_calibrate_can_simulate():
    from geosim.calibrate.cases import cases_from_records
    from geosim.inputs.params import load_params
    from geosim.predict import predict

    doc = wan_runs.to_wan_record(local_record_doc((2, 2)), fake_slice(rtt=20, bandwidth=500))
    cluster = doc["cluster"]
    assert [h["name"] for h in cluster["hosts"]] == ["wan-host0", "wan-host1"]
    assert len({h["site"] for h in cluster["hosts"]}) == 2 and cluster["hosts"][0]["gpus"] == ["CPU", "CPU"]
    # the cap is the emulator's tbf: a token bucket whose burst the slice's MTU and offload decide
    shaper = wan_runs.shaper_table(fake_slice(rtt=20, bandwidth=500))
    # and its sockets' buffers (4 x the bandwidth-delay product, 6-64 MB) give the window
    window = round(wan_runs.uncapped_window_bytes(fake_slice(rtt=20, bandwidth=500)) / 2**20, 4)
    assert cluster["links"] == [{"between": ["wan-host0", "wan-host1"], "rtt_ms": 20.0, "bandwidth_gbps": 0.5,
                                 "window_mib": window, "shaper": shaper}]
    assert window == pytest.approx(6 * 0.73, rel=0.01)
    assert shaper["queue_ms"] == 50.0 and shaper["burst_kib"] > 0 and shaper["at_sender"] is True
    assert "CPU" in cluster["gpus"] and "RTT 20 ms" in doc["note"]
    case = cases_from_records([validate(doc, "t")], "t")[0]
    assert case.networked and case.gpus == {"CPU"}
    p = predict(Case(case.cluster, case.model, case.workload, load_params()), "data")
    assert p.ok and p.iteration_time_s > 0.02  # at least one 20 ms round trip per step


def test_window_cap_of_the_slice_is_the_links_window_and_slows_the_simulated_run():
    from geosim.calibrate.cases import cases_from_records
    from geosim.inputs.params import load_params
    from geosim.predict import predict

    capped = fake_slice(rtt=20, bandwidth=1000)
    capped.extra = {"tcp_window_kib": 128.0}
    doc = wan_runs.to_wan_record(local_record_doc(), capped)
    assert doc["cluster"]["links"][0]["window_mib"] == 0.125 and "TCP window 128 KiB" in doc["note"]
    times = []
    for d in (wan_runs.to_wan_record(local_record_doc(), fake_slice(rtt=20, bandwidth=1000)), doc):
        d["model_dims"] = dict(d["model_dims"], n_embd=256)  # ~6 MB of gradients: more than a 128 KiB window
        case = cases_from_records([validate(d, "t")], "t")[0]
        times.append(predict(Case(case.cluster, case.model, case.workload, load_params()), "data").iteration_time_s)
    # window-bound: ~6.6 MB / 128 KiB ~ 50 round trips of 20 ms more per step than with BDP-sized buffers
    assert times[1] - times[0] > 25 * 0.020, times


def test_record_host_count_must_match_the_slice():
    with pytest.raises(GeosimError, match="3 host"):
        wan_runs.to_wan_record(local_record_doc((1, 1, 1)), fake_slice(hosts=2))


def test_child_argv_binds_gloo_to_the_namespace_interface():
    from geosim.live.train.loop import Options

    argv = wan_runs.child_argv(Options(technique="pipeshard", steps=5, microbatches=2), coordinator="10.213.0.1:7000",
                               num_processes=2, process_id=1, cpu_devices=2, interface="wan0")
    text = " ".join(argv)
    for part in ("--technique pipeshard", "--steps 5", "--microbatches 2", "--coordinator 10.213.0.1:7000",
                 "--num-processes 2", "--process-id 1", "--gloo-interface wan0", "--gpus-per-host 2", "--json"):
        assert part in text
    assert "--epochs" not in text  # None options are left out
    # the low-communication options travel as arguments, the same on every process
    argv = wan_runs.child_argv(Options(technique="sparseloco", steps=5, lowcomm={"inner_steps": 4, "topk_fraction": 0.05}),
                               coordinator="10.213.0.1:7000", num_processes=2, process_id=0, cpu_devices=1,
                               interface="wan0")
    assert "--inner-steps 4" in " ".join(argv) and "--topk 0.05" in " ".join(argv)


def test_hosts_wan_without_a_slice_is_a_one_line_error(tmp_path):
    env = dict(ENV, GEOSIM_WAN_STATE=str(tmp_path / "none.json"))
    proc = subprocess.run([sys.executable, "-m", "geosim", "live", "run", "--hosts", "wan", "--steps", "2"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "no WAN slice is up" in proc.stderr
    bad = subprocess.run([sys.executable, "-m", "geosim", "live", "run", "--hosts", "lan"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "'wan'" in bad.stderr


def simulated_records(rtts, per_step_extra=None):
    """Records whose 'measured' times the simulator itself produced with known parameters."""
    from geosim.calibrate.cases import cases_from_records
    from geosim.inputs.params import load_params
    from geosim.predict import predict

    truth = load_params()
    truth = replace(truth, flat_fraction={**truth.flat_fraction, "CPU": 0.05},
                    iteration_overhead_s={**truth.iteration_overhead_s, "data": 0.01,
                                          "zero2": 0.012, "shard": 0.05, "pipeshard": 0.02}
                    ).with_settings("shard", collectives_per_layer=30).with_network(
                        "tcp", collective_step_rtts=1.5, p2p_handshake_rtts=3.0)
    records = []
    for rtt in rtts:
        for technique in ("data", "zero2", "shard", "pipeshard"):
            doc = wan_runs.to_wan_record(local_record_doc(), fake_slice(rtt=rtt, bandwidth=1000))
            doc = live_validate.with_measured_rtt(doc, rtt, rtt)
            doc["technique"] = technique
            case = cases_from_records([validate(doc, "s")], "s")[0]
            t = predict(Case(case.cluster, case.model, case.workload, truth), technique).iteration_time_s
            doc["measured"] = {"time_per_iteration_s": round(t, 6), "total_time_s": 99.0, "steps": 6}
            records.append(validate(doc, "s"))
    return records


@pytest.mark.slow
def test_validate_recovers_a_held_out_rtt_of_simulated_runs():
    records = simulated_records([0.1, 10, 40])
    rep, result = live_validate.validate_records(records, 10.0, max_nfev=40)
    held = [r for r in rep.rows if r.role == "held out"]
    assert {r.technique for r in held} == {"data", "zero2", "shard", "pipeshard"} and all(r.rtt_ms == 10 for r in held)
    assert rep.within_target, [(r.technique, r.error) for r in held]
    assert max(abs(r.error) for r in held) < 0.10
    fitted = {k: v["value"] for k, v in rep.fitted.items()}
    assert fitted["shard.collectives_per_layer"] == pytest.approx(30, rel=0.25)  # profiled on a grid
    assert fitted["transport.p2p_handshake_rtts"] == pytest.approx(3.0, rel=0.2)
    # the slowdown table compares each technique's largest-RTT time with its smallest-RTT time
    assert set(rep.slowdown) == {"data", "zero2", "shard", "pipeshard"} and all(s > 1 for s in rep.slowdown.values())


def test_latency_costs_judge_added_seconds():
    """A rerun of the loop whose CI run failed the old check (slowdown x36.3 for Data against x29.6):
    Pipeshard's LAN step was 2x faster than Data's, so its slowdown (x24.7) came near Data's
    (x30.9), though Data paid 2.4x its added seconds. The verdict is on added seconds per second
    of RTT; the ratios are still reported."""
    Row = validate_report.Row
    measured_rtt = {0.1: 0.42, 10: 10.2, 30: 30.1}
    step = {(0.1, "data"): 0.0835, (0.1, "pipeshard"): 0.0435, (10, "data"): 0.7517, (10, "pipeshard"): 0.34,
            (30, "data"): 2.5827, (30, "pipeshard"): 1.0745}
    rows = [Row(rtt, t, s, s, "fit", measured_rtt_ms=measured_rtt[rtt]) for (rtt, t), s in step.items()]
    slowdown, round_trips, reproduced = validate_report.latency_costs(rows)
    assert slowdown == pytest.approx({"data": 2.5827 / 0.0835, "pipeshard": 1.0745 / 0.0435})
    added_rtt_s = (30.1 - 0.42) / 1e3
    assert round_trips == pytest.approx({"data": (2.5827 - 0.0835) / added_rtt_s,
                                         "pipeshard": (1.0745 - 0.0435) / added_rtt_s})
    assert reproduced is True
    # Pipeshard paying more added seconds than Data is the finding not reproduced, whatever the ratios
    flipped = [Row(x.rtt_ms, x.technique, x.measured_s * (3 if x.technique == "pipeshard" and x.rtt_ms == 30 else 1),
                   x.predicted_s, x.role, measured_rtt_ms=x.measured_rtt_ms) for x in rows]
    assert validate_report.latency_costs(flipped)[2] is False
    # without a measured RTT the ratios decide; without a pipelined technique there is no verdict
    bare = [Row(x.rtt_ms, x.technique, x.measured_s, x.predicted_s, x.role) for x in rows]
    assert validate_report.latency_costs(bare)[1:] == ({}, True)
    assert validate_report.latency_costs([x for x in rows if x.technique == "data"])[2] is None
    assert validate_report.latency_costs([]) == ({}, {}, None)


def test_validate_needs_runs_at_the_held_out_rtt():
    with pytest.raises(GeosimError, match="held-out RTT"):
        live_validate.fit_and_predict(simulated_records([0.1, 40]), 10.0)


# ----------------------------------------------------------------------------- root: real runs

@pytest.fixture
def wan_slice(tmp_path):
    from geosim.live.wan import emulator

    state = str(tmp_path / "state.json")
    made = []

    def make(**kwargs):
        wan = emulator.up(state=state, ttl_s=600, **kwargs)
        made.append(wan)
        return wan

    try:
        yield make, state
    finally:
        for wan in made:
            wan.down()
            assert not [ns for ns in namespaces() if wan.id in ns]


def namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def ns_pids(wan) -> list[str]:
    pids = []
    for h in wan.hosts:
        pids += subprocess.run(["ip", "netns", "pids", h.namespace], capture_output=True, text=True).stdout.split()
    return pids


@needs_root
@pytest.mark.parametrize("technique", ["data"])
def test_live_run_hosts_wan_records_the_slice(wan_slice, tmp_path, technique):
    make, state = wan_slice
    wan = make(rtt_ms=20, bandwidth_mbit=1000)
    runs = tmp_path / "wan.jsonl"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "geosim", "live", "run", "--hosts", "wan", "--technique", technique,
                           "--model", "tiny", "--steps", "5", "--data", "generated", "--records-out", str(runs)],
                          capture_output=True, text=True, env=dict(ENV, GEOSIM_WAN_STATE=state), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.monotonic() - started < 300
    (line,) = runs.read_text().splitlines()
    record = validate(json.loads(line), "wan.jsonl:1")
    assert record.status == "ok" and record.collective_impl == "gloo" and record.technique == technique
    assert record.cluster["links"][0]["rtt_ms"] == 20.0 and record.cluster["links"][0]["bandwidth_gbps"] == 1.0
    assert [h["name"] for h in record.cluster["hosts"]] == ["wan-host0", "wan-host1"]
    assert "2 process(es)" in record.note and wan.id in record.note
    # a step all-reduces over the 20 ms link: it cannot be faster than one round trip
    assert record.measured["time_per_iteration_s"] > 0.02
    assert "collectives     gloo" in proc.stdout
    assert ns_pids(wan) == []  # every training process is gone


@needs_root
def test_ctrl_c_stops_the_processes_on_the_slice(wan_slice, tmp_path):
    make, state = wan_slice
    wan = make(rtt_ms=10)
    proc = subprocess.Popen([sys.executable, "-m", "geosim", "live", "run", "--hosts", "wan", "--steps", "100000",
                             "--data", "generated"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(ENV, GEOSIM_WAN_STATE=state), preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 120
        while len(ns_pids(wan)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(ns_pids(wan)) >= 2, "the two training processes never started"
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert ns_pids(wan) == []


@needs_root
def test_sigkilled_parent_takes_the_processes_on_the_slice_with_it(wan_slice, tmp_path):
    """SIGKILL leaves the parent no chance to stop its children: the kernel does (PR_SET_PDEATHSIG)."""
    make, state = wan_slice
    wan = make(rtt_ms=2)
    proc = subprocess.Popen([sys.executable, "-m", "geosim", "live", "run", "--hosts", "wan", "--steps", "100000",
                             "--data", "generated"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(ENV, GEOSIM_WAN_STATE=state))
    try:
        deadline = time.monotonic() + 120
        while len(ns_pids(wan)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(ns_pids(wan)) >= 2, "the two training processes never started"
        time.sleep(1)
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while ns_pids(wan) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ns_pids(wan) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@needs_root
def test_validate_quick_loop(tmp_path):
    """The CI-sized loop with the defaults (small-wan model, 128 KiB TCP windows): two techniques
    at three RTTs, 6 steps each, fit on two, predict one."""
    out = tmp_path / "validate"
    before = set(namespaces())
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "geosim", "live", "validate", "--quick", "--rtt-ms", "0.1,10,30",
                           "--technique", "data,pipeshard", "--out-dir", str(out), "--json", "--timeout", "240"],
                          capture_output=True, text=True, env=ENV, timeout=900)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(namespaces()) <= before  # every slice torn down
    report = json.loads(proc.stdout)
    rows = [r for r in report["rows"] if r["measured_s"]]
    assert {(r["rtt_ms"], r["technique"]) for r in rows} == {(rtt, t) for rtt in (0.1, 10, 30)
                                                             for t in ("data", "pipeshard")}
    assert report["held_out_rtt_ms"] == 10 and {r["role"] for r in rows} == {"fit", "held out"}
    assert all(r["predicted_s"] > 0 and math.isfinite(r["error"]) for r in rows)
    at = {t: {r["rtt_ms"]: r["measured_s"] for r in rows if r["technique"] == t} for t in ("data", "pipeshard")}
    for t in at:  # the WAN's latency is in the measurements
        assert at[t][30] > at[t][0.1] + 0.03, at
    # the study's result: behind windows smaller than its gradients, each ms of RTT costs Data far more
    # than Pipeshard (measured 2.3-2.4x in added seconds; the slowdown ratio is not compared, its
    # denominator is a noisy LAN step: see test_latency_costs_judge_added_seconds)
    round_trips = report["round_trips_per_step"]
    assert round_trips["data"] > 1.5 * round_trips["pipeshard"], round_trips
    assert report["qualitative_reproduced"] is True
    assert set(report["other_holdouts"]) == {"0.1", "30"}
    assert (out / "validate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len((out / "runs.jsonl").read_text().splitlines()) == 6
    assert (out / "fitted.toml").exists() and (out / "validate.json").exists()
    print(f"quick validate loop: {elapsed:.0f} s")


def test_an_emulated_slices_loss_reaches_its_links_and_the_loss_probes_prediction():
    from dataclasses import replace as with_field

    from geosim.live.experiments.loss_probes import predicted_mbps
    from geosim.inputs.scenario import scenario_from_doc
    from geosim.inputs.params import default_params
    from geosim.sim.network._loss import loss_limited_rate

    lossy = with_field(fake_slice(rtt=20, bandwidth=200), loss=0.005)
    link = scenario_from_doc(wan_runs.wan_cluster(lossy, [1, 1]), "slice").cluster.links[0]
    assert link.loss == 0.005 and link.shaper.at_sender
    # reno (CUBIC's Reno-friendly region here): the response function's rate, a little less for slow start
    shipped = default_params().network("tcp").congestion  # Linux's SACK and RACK-TLP: no timeout term
    assert not shipped.timeouts and not shipped.bbr
    rate = loss_limited_rate(0.005, 0.02 + 2e-5, 0.22 + 2e-5, shipped) * 8 / 1e6
    assert 0.9 * rate < predicted_mbps(lossy, "reno", 20.0) <= rate
    # bbr: the rate's goodput less the retransmissions
    goodput = 200 * (1500 - 52) / (1500 + 14) * (1 - 0.005)
    assert predicted_mbps(lossy, "bbr", 20.0) == pytest.approx(goodput, rel=0.02)
