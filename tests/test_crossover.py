"""Crossover bisection: on plain functions, and on the simulator where the flip is known analytically.

The analytic case: two VMs at two sites, one T4 each, the tiny model, and a transport
with nothing but latency and bandwidth (no slow start, no per-message cost, no handshake
or flow-control round trips, no per-socket rate cap). Then
one ring all-reduce of n bytes over 2 GPUs costs n/B + RTT, and per iteration
  data  = C + n_grad/B + RTT                  (one gradient all-reduce)
  shard = C + K*n_act/B + K*RTT               (K = layers x 4 activation all-reduces)
with the same compute C (both split the same FLOPs over 2 GPUs). Data sends more bytes,
shard more messages, so shard wins at low RTT and data at high RTT, flipping at
  RTT* = (n_grad - K*n_act) / ((K - 1) * B).
"""

import math

import pytest

from geosim.studies.crossover import bisect_flip, crossovers, find_brackets, solve
from geosim.inputs.params import load_params
from geosim.inputs.scenario import Scenario, get_model, gpu_catalog
from geosim.inputs.specs import Cluster, Host, Link
from geosim.studies.sweep.run import SerialExecutor, SweepContext, metric_of, run_sweep
from geosim.studies.sweep.grid import Grid, make_point

BANDWIDTH_BPS = 1e9
WORKLOAD = {"seq_len": 64, "global_batch": 2, "microbatches": 1, "tokens_per_epoch": 64 * 2 * 10, "epochs": 1}


def test_bisect_finds_a_root_to_tolerance():
    root = 7.3
    x, steps = bisect_flip(lambda v: v - root, 1.0, 100.0, rel_tol=1e-6)
    assert x == pytest.approx(root, rel=1e-6)
    assert steps < 40
    x, _ = bisect_flip(lambda v: root - v, 0.0, 100.0, log=False)  # decreasing, linear, starting at 0
    assert x == pytest.approx(root, rel=1e-3)


def test_bisect_refuses_a_bracket_without_a_sign_change():
    with pytest.raises(ValueError, match="does not change sign"):
        bisect_flip(lambda v: v + 1, 1.0, 10.0)
    with pytest.raises(ValueError, match="does not change sign"):
        bisect_flip(lambda v: None, 1.0, 10.0)


def synthetic_context() -> SweepContext:
    t4 = gpu_catalog()["T4"]
    cluster = Cluster("synthetic", (Host("vm1", "A", (t4,)), Host("vm2", "B", (t4,))),
                      (Link("vm1", "vm2", 0.010, BANDWIDTH_BPS),), source="<test>")
    base = load_params()
    params = base.with_values(
        intra_host_latency_s=0.0,
        collectives={t: "ring" for t in base.collectives},
        iteration_overhead_s={t: 0.01 for t in base.iteration_overhead_s}, startup_s={},
    ).with_network("tcp", per_message_overhead_s=0.0, p2p_handshake_rtts=0.0, collective_step_rtts=0.0,
                   slow_start_after_idle=False, stream_rate_bps=1e15, initial_window_bytes=1e18, window_bytes=1e18)
    return SweepContext(params, {"synthetic": Scenario(cluster, dict(WORKLOAD), {})})


def analytic_rtt_ms() -> float:
    model = get_model("tiny")
    n_grad = model.num_params * 2  # fp16 gradients
    n_act = WORKLOAD["global_batch"] * WORKLOAD["seq_len"] * model.n_embd * 2
    k = model.n_layer * 4
    return (n_grad - k * n_act) / ((k - 1) * BANDWIDTH_BPS / 8) * 1e3


def point(technique, rtt_ms):
    return make_point("synthetic", technique, "tiny", rtt_ms=rtt_ms)


def test_synthetic_times_are_linear_in_rtt_with_the_analytic_slopes():
    ctx = synthetic_context()
    iterations = 10
    for technique, per_iteration_rtts in (("data", 1), ("shard", 2 * 4)):
        t1, t2 = metric_of(point(technique, 1.0), ctx), metric_of(point(technique, 21.0), ctx)
        assert (t2 - t1) / 20e-3 == pytest.approx(iterations * per_iteration_rtts, rel=1e-6)


def test_bisection_on_the_simulator_matches_the_analytic_flip_and_a_dense_scan(tmp_path):
    ctx = synthetic_context()
    expected = analytic_rtt_ms()
    assert 1 < expected < 100  # the case is meaningful inside the grid below
    result = run_sweep(Grid({"scenario": ["synthetic"], "technique": ["data", "shard"], "model": ["tiny"],
                             "rtt_ms": [1.0, 3.0, 10.0, 30.0, 100.0]}),
                       ctx, tmp_path, SerialExecutor(ctx), progress=False)
    found = crossovers(result.rows, ctx, SerialExecutor(ctx), "rtt_ms", ["data", "shard"])
    assert len(found) == 1
    c = found[0]
    assert (c["a"], c["b"], c["faster_below"], c["faster_above"]) == ("data", "shard", "shard", "data")
    assert c["at"] == pytest.approx(expected, rel=1.5e-3)
    # a dense scan of the simulator brackets the same point
    n = 100
    xs = [c["lo"] * (c["hi"] / c["lo"]) ** (i / n) for i in range(n + 1)]
    diffs = [metric_of(point("data", x), ctx) - metric_of(point("shard", x), ctx) for x in xs]
    flips = [(xs[i], xs[i + 1]) for i in range(n) if (diffs[i] > 0) != (diffs[i + 1] > 0)]
    assert len(flips) == 1
    lo, hi = flips[0]
    assert lo * (1 - 1e-3) <= c["at"] <= hi * (1 + 1e-3)
    assert lo * (1 - 1e-3) <= expected <= hi * (1 + 1e-3)


def test_brackets_skip_pairs_that_never_flip_or_do_not_run():
    rows = []
    for x, (a, b, c) in zip((1.0, 10.0, 100.0), ((1, 2, None), (3, 2, None), (5, 2, None))):
        for tech, t in (("data", a), ("shard", b), ("zero2", c)):
            rows.append({"point": make_point("s", tech, "m", rtt_ms=x), "status": "ok" if t else "out-of-memory",
                         "total_time_s": t})
    jobs, steady = find_brackets(rows, "rtt_ms", "total_time_s", ["data", "zero2", "shard"])
    assert [(j["a"], j["b"], j["lo"], j["hi"]) for j in jobs] == [("data", "shard", 1.0, 10.0)]
    assert steady == []  # zero2 never runs: no order to report


def test_solve_reports_which_side_is_faster():
    ctx = synthetic_context()
    job = {"point": point("data", 1.0), "a": "data", "b": "shard", "axis": "rtt_ms", "metric": "total_time_s",
           "lo": 1.0, "hi": 100.0}
    c = solve(ctx, job)
    assert c["faster_below"] == "shard" and c["faster_above"] == "data"
    assert c["evaluations"] >= 2 * c["steps"]
    assert math.isclose(c["at"], analytic_rtt_ms(), rel_tol=1.5e-3)
