"""The pieces of the rate-capped live runs that need no root: the step-time estimator of
live/experiments/rate_runs.py and the message probe of live/wan/probe.py over loopback."""

from __future__ import annotations

import json
import threading
import time

import pytest

from geosim.live.experiments.rate_runs import per_iteration, steps_for
from geosim.live.wan import probe


def test_data_takes_the_median_after_compile_and_warmup():
    times = [5.0, 0.3, 0.3, 0.10, 0.12, 0.11, 0.50, 0.11]
    assert per_iteration(times, None) == pytest.approx(0.11)


def test_diloco_counts_whole_rounds_after_the_first():
    h = 4
    inner, sync = 0.010, 0.200
    first_round = [3.0, 0.02, 0.02, 0.5]  # compiles, then a slow first synchronization
    rounds = ([inner] * (h - 1) + [sync]) * 2
    assert per_iteration(first_round + rounds, h) == pytest.approx((3 * inner + sync) / h)
    assert per_iteration(first_round + rounds[:3], h) is None  # no whole round after the first
    assert steps_for(32) == 96 and steps_for(None) == 12


def test_a_message_probe_times_a_transfer_and_its_ack_over_loopback(monkeypatch):
    lines = []
    ready = threading.Event()

    def capture(text, **_):  # the probes print one line each: "ready PORT", then the JSON result
        lines.append(str(text))
        if str(text).startswith("ready"):
            ready.set()

    monkeypatch.setattr(probe, "print", capture, raising=False)
    server = threading.Thread(target=probe.msgsink, args=("127.0.0.1",), daemon=True)
    server.start()
    assert ready.wait(10)
    port = int(lines[0].split()[1])
    started = time.perf_counter()
    probe.messages("127.0.0.1", port, [1000, 1 << 20], 2, 0.01)
    result = json.loads(lines[-1])["seconds"]
    assert sorted(result) == ["1000", "1048576"] and all(len(v) == 2 for v in result.values())
    assert all(0 < t < time.perf_counter() - started for v in result.values() for t in v)
    server.join(10)
    assert not server.is_alive()  # the sink ends when the connection closes


@pytest.mark.slow
def test_the_results_page_regenerates_from_its_data_file():
    """docs/results/2026-11-25-runtime-validation.md: one fit at RTT 10 ms, every run at 40 ms held
    out within 15%, from the link's stated rate and RTT and the jax runtime."""
    from pathlib import Path

    from geosim.live.experiments.runtime_validation import TARGET, validate

    data = Path(__file__).resolve().parents[1] / "docs" / "results" / "data" / "2026-11-25-rate-runs.jsonl"
    report = validate(str(data), (), (10.0,))
    held = [r for r in report["runs"] if r["role"] == "held out"]
    assert len(held) == 16 and len(report["runs"]) == 32
    assert all(abs(r["error"]) <= TARGET for r in held), [(r["rate_gbps"], r["technique"], r["inner_steps"], r["error"])
                                                          for r in held if abs(r["error"]) > TARGET]
    assert report["fitted"]["jax.collective_step_rtts"] == pytest.approx(1.40, abs=0.05)
    assert "cpu_efficiency" not in report["fitted"]  # the CPU's compute is measured (cpu_compute), not fitted here


def test_a_lossy_run_is_predicted_on_a_lossy_link():
    from dataclasses import replace

    from geosim.live.experiments.runtime_validation import Run, cluster_doc, predict_run
    from geosim.inputs.params import load_params
    from geosim.inputs.scenario import scenario_from_doc

    record = {"cluster": {"name": "wan", "hosts": [{"name": "h0", "site": "s0", "gpus": ["CPU"]},
                                                   {"name": "h1", "site": "s1", "gpus": ["CPU"]}],
                          "links": [{"between": ["h0", "h1"], "rtt_ms": 20.0, "bandwidth_gbps": 0.2}],
                          "gpus": {"CPU": {"architecture": "cpu", "fp16_tensor_tflops": 0.16, "fp32_tflops": 0.16,
                                           "memory_bandwidth_gbs": 20.0,
                                           "memory_gib": 24.0, "pcie_gen": 3}}},
              "model": "small-wan", "model_dims": {"n_layer": 2, "n_embd": 256, "n_head": 4, "vocab": 257, "n_ctx": 32},
              "workload": {"seq_len": 32, "global_batch": 8, "microbatches": 1, "precision": "fp32",
                           "tokens_per_epoch": 2560, "epochs": 1}}
    clean = Run("data", None, 0.2, 20.0, 1.0, "", record)
    lossy = replace(clean, loss=0.005, congestion="reno")
    link = scenario_from_doc(cluster_doc(lossy), "runs").cluster.links[0]
    assert link.loss == 0.005 and link.shaper.at_sender
    params = load_params(None)
    clean_s, lossy_s = predict_run(clean, params), predict_run(lossy, params)
    assert lossy_s > 5 * clean_s  # 6.6 MB at ~9 Mbit/s, not at 190
    assert predict_run(replace(lossy, congestion="bbr"), params) < 1.1 * clean_s
