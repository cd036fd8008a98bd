"""Properties of the simulator, checked with hypothesis on a study slice and on random
small clusters: predicted time never falls as RTT grows, never rises as bandwidth or
GPU speed grows, and every byte sent is received."""

from __future__ import annotations

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from geosim.inputs.case import Case
from geosim.base.errors import GeosimError
from geosim.sim.collectives import expand
from geosim.sim.engine import run_schedule
from geosim.sim.network.tcp import TCPNetwork
from geosim.inputs.params import default_params
from geosim.predict import predict
from geosim.inputs.scenario import gpu_catalog, load_scenario, model_catalog
from geosim.sim.schedule import Collective, Recv, Repeat, Send
from geosim.techniques import STUDY_ORDER as TECHNIQUE_NAMES
from geosim.inputs.specs import Cluster, Host, Link, Workload
from geosim.techniques import build_schedule
from geosim.studies.whatif import with_bandwidth, with_rtt

SLACK = 1e-9  # float rounding in the simulated clock
# On random clusters of mixed GPUs: a prediction extrapolates from a few simulated iterations and
# repetitions (geosim.sim.engine, geosim.predict). Where they alternate (a ring's iterations at
# 115.22, 115.12, ... s) the extrapolation moves by up to ~1e-5 of the total when a GPU gets faster
# or a link slower, although every simulated iteration gets faster (docs/reference/properties.md).
EXTRAPOLATION = 1e-4
# Faster GPUs on a ring alternating between two sites: the sends reach the shared WAN link in
# another order (first come, first served), a few 1e-4 of the total at most in what hypothesis
# found (test_faster_gpus_are_not_slower_on_random_clusters); a bound with a margin, measured.
REORDERING = 1e-3
# Example counts come from the hypothesis profile (tests/conftest.py): 12 by default, 1,000 with
# HYPOTHESIS_PROFILE=ci (what .ci/run sets), random seeds with HYPOTHESIS_PROFILE=search.
PROPERTY = settings()

PARAMS = default_params()
GPT2M = model_catalog()["gpt2m"]
GPT2 = model_catalog()["gpt2"]
SLICE = load_scenario("utah-gpn")
SLICE_WORKLOAD = SLICE.workload()
GPU_TYPES = ("A30", "RTX6000", "A100-40GB", "V100", "L4")
# 48 sequences in 4 microbatches of 12: divisible by every GPU count (1-6) and mesh size (1-2) drawn below
SMALL_WORKLOAD = Workload(tokens_per_epoch=48 * 256 * 10, seq_len=256, global_batch=48, microbatches=4, epochs=2)

rtt_ms = st.floats(min_value=0.0, max_value=200.0, allow_nan=False)
gbps = st.floats(min_value=0.5, max_value=100.0, allow_nan=False)
techniques = st.sampled_from(TECHNIQUE_NAMES)


@st.composite
def small_clusters(draw):
    """2-3 hosts of 1-2 GPUs (the same count on each, so the batch divides), at two or three
    sites, connected by links of random RTT, bandwidth and window."""
    n_hosts = draw(st.integers(2, 3))
    per_host = draw(st.integers(1, 2))
    catalog = gpu_catalog()
    sites = ["A", "B"] + [draw(st.sampled_from(["A", "B", "C"])) for _ in range(n_hosts - 2)]
    hosts = tuple(Host(f"h{i}", sites[i], (catalog[draw(st.sampled_from(GPU_TYPES))],) * per_host)
                  for i in range(n_hosts))
    links = []
    distinct = sorted(set(sites))
    for a, b in zip(distinct, distinct[1:]):  # a chain of site links keeps every host reachable
        window_mib = draw(st.one_of(st.none(), st.floats(0.25, 32.0)))
        links.append(Link(a, b, draw(rtt_ms) / 1e3, draw(gbps) * 1e9,
                          window_bytes=None if window_mib is None else window_mib * 2**20))
    if draw(st.booleans()):  # sometimes a direct host link beside the site path
        links.append(Link("h0", "h1", draw(rtt_ms) / 1e3, draw(gbps) * 1e9))
    return Cluster("random", hosts, tuple(links))


_TOTALS: dict = {}


def total(cluster, technique, params=PARAMS, model=GPT2M, workload=SLICE_WORKLOAD, exact=False):
    """Predicted total time, None if the case does not run. Memoized: a prediction is a pure
    function of its inputs, and hypothesis draws the same values often (~half of the values
    of 1,000 examples repeat), which halves the CI time of these properties. exact: every
    repetition simulated (the engine's Repeat shortcut off), for the random clusters, whose
    mixed GPUs settle slowly: the shortcut's own error is bounded separately below."""
    key = (cluster, technique, repr(params), model, workload, exact)
    if key not in _TOTALS:
        r = predict(Case(cluster, model, workload, params), technique, exact=exact)
        _TOTALS[key] = r.total_time_s if r.ok else None
    return _TOTALS[key]


def assert_not_decreasing(t1, t2, what, slack=SLACK):
    """t2 (after the change named in `what`) must not be below t1 (before it)."""
    assert t2 >= t1 * (1 - slack), f"{what}: {t1!r} -> {t2!r} ({(t2 - t1) / t1:+.3%})"


def assert_not_increasing(t1, t2, what, slack=SLACK):
    """t2 (after an improvement named in `what`) must not be above t1 (before it)."""
    assert t2 <= t1 * (1 + slack), f"{what}: {t1!r} -> {t2!r} ({(t2 - t1) / t1:+.3%})"


# --- the study slice (UTAH-GPN) ---------------------------------------------------


@PROPERTY
@given(technique=techniques, r1=rtt_ms, r2=rtt_ms)
def test_time_does_not_fall_as_rtt_grows_on_a_study_slice(technique, r1, r2):
    r1, r2 = sorted((r1, r2))
    t1 = total(with_rtt(SLICE.cluster, r1 / 1e3), technique)
    t2 = total(with_rtt(SLICE.cluster, r2 / 1e3), technique)
    assert_not_decreasing(t1, t2, f"{technique} on UTAH-GPN, RTT {r1!r} -> {r2!r} ms")


@PROPERTY
@given(technique=techniques, b1=gbps, b2=gbps)
def test_time_does_not_rise_as_bandwidth_grows_on_a_study_slice(technique, b1, b2):
    b1, b2 = sorted((b1, b2))
    t1 = total(with_bandwidth(SLICE.cluster, b1 * 1e9), technique)
    t2 = total(with_bandwidth(SLICE.cluster, b2 * 1e9), technique)
    assert_not_increasing(t1, t2, f"{technique} on UTAH-GPN, bandwidth {b1!r} -> {b2!r} Gbit/s")


efficiency = st.floats(min_value=0.01, max_value=0.6, allow_nan=False)


@PROPERTY
@example(technique="zero2", e1=0.25, e2=0.5, which="RTX6000")  # the counterexample hypothesis found
@given(technique=st.sampled_from(["data", "zero2", "shard", "pipeshard"]), e1=efficiency, e2=efficiency,
       which=st.sampled_from(["RTX6000", "T4", "both"]))
def test_faster_gpus_are_not_slower_on_a_study_slice(technique, e1, e2, which):
    """With Linux's slow start after idle switched off. With it on, real TCP can make a faster
    GPU slower: its connections sit idle longer waiting for the slow GPUs and restart from a
    smaller window (hypothesis found it: ZeRO2 on UTAH-GPN, RTX6000 0.25 -> 0.5, +1.2%); the
    test below bounds that effect instead of pretending it away."""
    e1, e2 = sorted((e1, e2))

    def params(e):
        eff = dict(PARAMS.flat_fraction)
        for name in (("RTX6000", "T4") if which == "both" else (which,)):
            eff[name] = e
        return PARAMS.with_values(flat_fraction=eff).with_network("tcp", slow_start_after_idle=False)

    t1 = total(SLICE.cluster, technique, params(e1))
    t2 = total(SLICE.cluster, technique, params(e2))
    assert_not_increasing(t1, t2, f"{technique} on UTAH-GPN, {which} efficiency {e1!r} -> {e2!r}")


@pytest.mark.parametrize("technique", ["data", "zero2", "shard", "pipeshard"])
def test_the_idle_restart_penalty_of_a_faster_gpu_is_small(technique):
    def run(e):
        return total(SLICE.cluster, technique, PARAMS.with_values(flat_fraction={**PARAMS.flat_fraction, "RTX6000": e}))

    slow, fast = run(0.25), run(0.5)
    assert fast <= slow * 1.02, (technique, slow, fast)


# --- random small clusters --------------------------------------------------------


@PROPERTY
@given(cluster=small_clusters(), technique=techniques, r1=rtt_ms, r2=rtt_ms)
def test_time_does_not_fall_as_rtt_grows_on_random_clusters(cluster, technique, r1, r2):
    r1, r2 = sorted((r1, r2))
    t1 = total(with_rtt(cluster, r1 / 1e3), technique, model=GPT2, workload=SMALL_WORKLOAD)
    assume(t1 is not None)
    t2 = total(with_rtt(cluster, r2 / 1e3), technique, model=GPT2, workload=SMALL_WORKLOAD)
    assert_not_decreasing(t1, t2, f"{technique} on {cluster}, RTT {r1!r} -> {r2!r} ms", slack=EXTRAPOLATION)


@PROPERTY
@given(cluster=small_clusters(), technique=techniques, b1=gbps, b2=gbps)
def test_time_does_not_rise_as_bandwidth_grows_on_random_clusters(cluster, technique, b1, b2):
    """With TCP's idle restart off, as for GPU speed: a faster link can leave a connection
    idle past its RTO and restart it from a smaller window (hypothesis found a 3-site
    Pipeshard 2e-7 slower at 2 Gbit/s than at 1); the study-slice test above keeps it on."""
    b1, b2 = sorted((b1, b2))
    params = PARAMS.with_network("tcp", slow_start_after_idle=False)
    t1 = total(with_bandwidth(cluster, b1 * 1e9), technique, params, model=GPT2, workload=SMALL_WORKLOAD)
    assume(t1 is not None)
    t2 = total(with_bandwidth(cluster, b2 * 1e9), technique, params, model=GPT2, workload=SMALL_WORKLOAD)
    assert_not_increasing(t1, t2, f"{technique} on {cluster}, bandwidth {b1!r} -> {b2!r} Gbit/s", slack=EXTRAPOLATION)


@PROPERTY
@example(cluster=Cluster("alternating", tuple(Host(f"h{i}", site, (gpu_catalog()["A30"],) * 2) for i, site in enumerate("ABA")),
                         (Link("A", "B", 0.071, 1e9),)),
         technique="shard", e1=0.0625, e2=0.5)  # +1.4e-5 even with every repetition simulated
@example(cluster=Cluster("random", tuple(Host(f"h{i}", site, (gpu_catalog()["A30"],) * 2) for i, site in enumerate("ABC")),
                         (Link("A", "B", 0.008, 2e9), Link("B", "C", 0.005, 3e9))),
         technique="zero2", e1=0.25, e2=0.5)  # +0.024% with the Repeat shortcut, -0.008% with every repetition
@example(cluster=Cluster("alternating", tuple(Host(f"h{i}", site, (gpu_catalog()["A30"],) * 2) for i, site in enumerate("ABA")),
                         (Link("A", "B", 0.061, 1e9),)),
         technique="data", e1=0.25, e2=0.375)  # +0.026% with every repetition simulated: the ring's sends reorder
@given(cluster=small_clusters(), technique=techniques, e1=efficiency, e2=efficiency)
def test_faster_gpus_are_not_slower_on_random_clusters(cluster, technique, e1, e2):
    """With TCP's idle restart off, as on the study slice (its own effect is bounded below), with
    every repetition simulated (exact): the engine's Repeat shortcut errs by up to REPEAT_SHORTCUT
    (bounded below), more than a faster GPU gains on some slices (ZeRO-2 on three A30 hosts,
    +0.024%). Up to REORDERING: where a ring alternates between two sites (h0 and h2 at A, h1 at
    B), faster GPUs change the order in which the ring's sends reach the shared WAN link, which
    serves them first come, first served; hypothesis found +0.026% (Data, 61 ms)."""
    e1, e2 = sorted((e1, e2))

    def params(e):
        return PARAMS.with_values(flat_fraction={name: e for name in GPU_TYPES}).with_network("tcp", slow_start_after_idle=False)

    t1 = total(cluster, technique, params(e1), model=GPT2, workload=SMALL_WORKLOAD, exact=True)
    assume(t1 is not None)
    t2 = total(cluster, technique, params(e2), model=GPT2, workload=SMALL_WORKLOAD, exact=True)
    assert_not_increasing(t1, t2, f"{technique} on {cluster}, efficiency {e1!r} -> {e2!r}", slack=REORDERING)


# How far the engine's shortcut for a long Repeat block (simulate five repetitions, extrapolate the
# mean period of the last three) may land from simulating every repetition (exact=True). An
# approximation, so a measured bound: a transient longer than the two warm-up repetitions is
# extrapolated as if steady (hypothesis found Data on three A30s 1.8% fast, a ring whose GPUs
# run ahead of one another for five buffers after each iteration; docs/reference/properties.md).
REPEAT_SHORTCUT = 0.03


@PROPERTY
@example(cluster=Cluster("ring", (Host("h0", "A", (gpu_catalog()["A30"],)),
                                  Host("h1", "B", (gpu_catalog()["A100-40GB"],)),
                                  Host("h2", "C", (gpu_catalog()["RTX6000"],))),
                         (Link("A", "B", 0.0, 1e9), Link("B", "C", 0.029, 1e9))),
         technique="shard", e=0.5)  # CI's counterexample: one measured repetition erred 2% here
@example(cluster=Cluster("transient", (Host("h0", "A", (gpu_catalog()["A30"],)), Host("h1", "B", (gpu_catalog()["A30"],)),
                                       Host("h2", "A", (gpu_catalog()["A30"],))),
                         (Link("A", "B", 0.0, 531250000.0), Link("h0", "h1", 0.0, 5e8))),
         technique="data", e=0.5)  # the worst found: 1.8% (a transient of five repetitions)
@given(cluster=small_clusters(), technique=techniques, e=efficiency)
def test_skipping_repetitions_agrees_with_simulating_them_all(cluster, technique, e):
    params = PARAMS.with_values(flat_fraction={name: e for name in GPU_TYPES}).with_network("tcp", slow_start_after_idle=False)
    case = Case(cluster, GPT2, SMALL_WORKLOAD, params)
    try:
        schedule = build_schedule(technique, case)
    except GeosimError:
        assume(False)
    shortcut, exact = (run_schedule(schedule, cluster, params, SMALL_WORKLOAD, iterations=2, network=TCPNetwork, exact=x).iteration_time(1)
                       for x in (False, True))
    assert abs(shortcut - exact) <= REPEAT_SHORTCUT * exact, f"{technique} on {cluster}: {shortcut!r} vs {exact!r}"


def _a30(name, site, gpu="A30"):
    return Host(name, site, (gpu_catalog()[gpu],))


def test_the_faster_gpu_counterexamples_were_the_repeat_shortcut():
    """Two counterexamples hypothesis found (faster GPUs, Shard slower by 0.079% and 0.65% with three
    hosts) came from extrapolating a Repeat block from its last repetition alone; with the mean of
    the last three they are monotone, as simulating every repetition always was."""
    def run(cluster, e):
        params = PARAMS.with_values(flat_fraction={n: e for n in GPU_TYPES}).with_network("tcp", slow_start_after_idle=False)
        return total(cluster, "shard", params, model=GPT2, workload=SMALL_WORKLOAD)

    three = Cluster("three", (_a30("h0", "A"), _a30("h1", "B"), _a30("h2", "A", "RTX6000")),
                    (Link("A", "B", 0.005, 3e9),))
    assert run(three, 0.5) < run(three, 0.25)
    ring = Cluster("ring", (_a30("h0", "A"), _a30("h1", "B", "A100-40GB"), _a30("h2", "C", "RTX6000")),
                   (Link("A", "B", 0.0, 1e9), Link("B", "C", 0.029, 1e9)))
    assert run(ring, 0.5) < run(ring, 0.0625)


def test_a_tie_between_paths_does_not_make_a_longer_rtt_faster():
    """Hypothesis's counterexample: a direct host link beside the site link. At 0 ms every WAN path
    had equal latency and float rounding chose h2's path through h0 (a VM, which forwards nothing)
    over the slower direct link; now paths go through sites and ties go to the most bandwidth."""
    cluster = Cluster("tie", (_a30("h0", "A"), _a30("h1", "B"), _a30("h2", "A")),
                      (Link("A", "B", 0.0, 2e9), Link("h0", "h1", 0.0, 1e9)))
    t0 = total(with_rtt(cluster, 0.0), "data", model=GPT2, workload=SMALL_WORKLOAD)
    t1 = total(with_rtt(cluster, 1e-3), "data", model=GPT2, workload=SMALL_WORKLOAD)
    assert_not_decreasing(t0, t1, "data, RTT 0 -> 1 ms")


# --- conservation of bytes --------------------------------------------------------


def sends_and_recvs(schedule):
    """Every rank's program with collectives expanded: {(src, dst, tag): bytes} sent and the
    (src, dst, tag) each Recv waits for."""
    hosts = tuple(d.host for d in schedule.devices)
    sent, received = {}, []

    def walk(rank, ops, ctx):
        for op in ops:
            if isinstance(op, Send):
                key = (rank, op.dst, op.tag, ctx)
                assert key not in sent, f"two sends with one tag: {key}"
                sent[key] = op.nbytes
            elif isinstance(op, Recv):
                received.append((op.src, rank, op.tag, ctx))
            elif isinstance(op, Collective):
                walk(rank, expand(op, rank, hosts), ctx)
            elif isinstance(op, Repeat):  # every repetition, as the engine runs them with exact=True
                for r in range(op.count):
                    walk(rank, op.ops, ctx + (op.tag, r))

    for rank, program in schedule.programs.items():
        walk(rank, program, ())
    return sent, received


@PROPERTY
@given(cluster=small_clusters(), technique=techniques, iterations=st.integers(1, 3),
       algorithm=st.sampled_from(["ring", "tree", "hierarchical"]))
def test_bytes_sent_equal_bytes_received(cluster, technique, iterations, algorithm):
    params = PARAMS.with_values(collectives={t: algorithm for t in TECHNIQUE_NAMES})
    schedule = build_schedule(technique, Case(cluster, GPT2, SMALL_WORKLOAD, params))
    sent, received = sends_and_recvs(schedule)
    assert len(received) == len(set(received)), "two receives wait for one send"
    assert set(received) == set(sent), "a send without its receive or a receive without its send"
    received_bytes = sum(sent[key] for key in received)
    result = run_schedule(schedule, cluster, params, SMALL_WORKLOAD, iterations=iterations, network=TCPNetwork, trace=True,
                          exact=True)
    assert result.bytes_sent == pytest.approx(iterations * received_bytes, rel=1e-12)
    assert result.transfers == iterations * len(received)
    links = [row for row in result.trace if row[0] == "link"]
    assert len(links) == result.transfers
    assert sum(row[5] for row in links) == pytest.approx(result.bytes_sent, rel=1e-12)
    assert all(row[4] >= row[3] for row in links)  # arrival after start


@pytest.mark.parametrize("technique", TECHNIQUE_NAMES)
@pytest.mark.parametrize("scenario", ["tacc-tacc", "utah-gpn", "gat-amst"])
def test_bytes_sent_equal_bytes_received_on_study_slices(technique, scenario):
    sc = load_scenario(scenario)
    workload = sc.workload()
    schedule = build_schedule(technique, Case(sc.cluster, GPT2M, workload, PARAMS))
    sent, received = sends_and_recvs(schedule)
    assert sorted(received, key=repr) == sorted(sent, key=repr)
    result = run_schedule(schedule, sc.cluster, PARAMS, workload, iterations=2, network=TCPNetwork, exact=True)
    assert result.bytes_sent == pytest.approx(2 * sum(sent.values()), rel=1e-12)


# Found here: repetitions of a Repeat block that the engine skips add no bytes to
# RunResult.bytes_sent, so predict()'s bytes_per_iteration under-counts Shard (layers) and
# ZeRO-2 (buckets), ~9x for ZeRO-2 on UTAH-GPN. The engine belongs to the lead.


@pytest.mark.parametrize("technique", ["data", "zero2", "shard", "pipeshard"])
def test_predicted_bytes_per_iteration_count_every_repetition(technique):
    """predict() skips most repetitions of a Repeat block; the bytes it reports per iteration
    must still be every byte an iteration sends."""
    sc = load_scenario("utah-gpn")
    workload = sc.workload()
    schedule = build_schedule(technique, Case(sc.cluster, GPT2M, workload, PARAMS))
    sent, _ = sends_and_recvs(schedule)
    r = predict(Case(sc.cluster, GPT2M, workload, PARAMS), technique)
    assert r.bytes_per_iteration == pytest.approx(sum(sent.values()) / schedule.iterations_per_program, rel=1e-9)
