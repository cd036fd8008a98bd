"""Pipeshard against hand formulas: one microbatch is the sum of its stages and
transfers; the bubble of uniform stages is (S-1)/(M+S-1); 1F1B holds fewer
activations than GPipe; a split balanced by GPU speed is not slower."""

from __future__ import annotations

from dataclasses import replace

import pytest

from geosim.inputs.case import Case
from geosim.sim.engine import run_schedule
from geosim.sim.network.ideal import IdealNetwork
from geosim.sim.network.tcp import TCPNetwork
from geosim.inputs.params import default_params
from geosim.sim.network.tcp import Settings as TCPSettings
from geosim.predict import predict
from geosim.inputs.scenario import gpu_catalog, load_scenario, model_catalog
from geosim.inputs.specs import Cluster, Host, Link, Workload
from geosim.techniques import build_schedule
from geosim.techniques.pipeshard import split_layers

REL = 1e-9
CATALOG = gpu_catalog()
GPT2M = model_catalog()["gpt2m"]
GPT2 = model_catalog()["gpt2"]

TCP_FIELDS = set(TCPSettings.__dataclass_fields__)  # what flat_params changes in the TCP model's settings


# the hand formulas below time compute as FLOPs at a flat rate: the catalog's GPUs get the flat
# efficiency override (the op-level model has its own tests, tests/test_kernel_timer.py)
FLAT = {name: 0.1 for name in CATALOG}


def flat_params(**changes):
    tcp = {k: changes.pop(k) for k in list(changes) if k in TCP_FIELDS}
    p = default_params().with_values(flat_fraction=FLAT, **changes).with_network("tcp", slow_start_after_idle=False, **tcp)
    return p.with_network("tcp", initial_window_bytes=p.network("tcp").window_bytes * p.network("tcp").streams)


def rate(gpu, params, workload) -> float:
    return gpu.peak_tflops(workload.precision) * 1e12 * params.flat_fraction[gpu.name]


def chain(gpus, rtt_s=20e-3, bandwidth_bps=10e9) -> Cluster:
    """One GPU per host, one host per site, a link between neighbouring stages only."""
    hosts = tuple(Host(f"h{i}", f"site{i}", (g,)) for i, g in enumerate(gpus))
    links = tuple(Link(f"h{i}", f"h{i + 1}", rtt_s, bandwidth_bps) for i in range(len(gpus) - 1))
    return Cluster("chain", hosts, links)


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
@pytest.mark.parametrize("rtt_s", [0.1e-3, 20e-3, 100e-3])
def test_one_microbatch_is_the_sum_of_stages_and_transfers(kind, rtt_s):
    """Two stages, 1 microbatch: F0, activations over the WAN, F1 + B1 (with the LM head), the
    gradient back, B0, then the iteration overhead."""
    params = flat_params().with_settings("pipeshard", schedule=kind)
    g0, g1 = CATALOG["RTX6000"], CATALOG["T4"]  # heterogeneous, both PCIe gen 3
    bw = 10e9
    cluster = chain([g0, g1], rtt_s, bw)
    workload = Workload(global_batch=4, microbatches=1)
    model = GPT2M
    tokens = workload.global_batch * workload.seq_len
    layers = [model.n_layer // 2, model.n_layer - model.n_layer // 2]  # uniform split
    f0 = layers[0] * model.layer_forward_flops(tokens, workload.seq_len) / rate(g0, params, workload)
    f1 = (layers[1] * model.layer_forward_flops(tokens, workload.seq_len) + model.head_forward_flops(tokens)) / rate(
        g1, params, workload)
    act = workload.global_batch * workload.seq_len * model.n_embd * workload.bytes_per_value
    one_way = params.intra_host_latency_s + rtt_s / 2
    rtt = 2 * one_way
    beta = 1 / min(params.pcie_bps[3] / 8, bw / 8, params.network("tcp").window_bytes * params.network("tcp").streams / rtt,
                   params.network("tcp").streams * params.network("tcp").stream_rate_bps / 8)
    transfer = params.network("tcp").p2p_handshake_rtts * rtt + one_way + params.network("tcp").per_message_overhead_s + act * beta
    overhead = params.iteration_overhead_s["pipeshard"]
    expected = f0 + transfer + 3 * f1 + transfer + 2 * f0 + overhead

    schedule = build_schedule("pipeshard", Case(cluster, model, workload, params))
    result = run_schedule(schedule, cluster, params, workload, iterations=1, network=TCPNetwork)
    assert result.iteration_end[0] == pytest.approx(expected, rel=REL)
    assert result.bytes_sent == pytest.approx(2 * act, rel=REL)

    ideal = run_schedule(schedule, cluster, params, workload, iterations=1, network=IdealNetwork)
    assert ideal.iteration_end[0] == pytest.approx(3 * f0 + 3 * f1 + overhead, rel=REL)


def test_one_microbatch_on_a_study_slice_with_an_ideal_network():
    """UTAH-GPN, two 2-GPU stages, 1 microbatch: with an ideal network the iteration is
    the stages' compute one after the other plus the overhead."""
    scenario = load_scenario("utah-gpn")
    cluster = scenario.cluster
    params = default_params().with_values(flat_fraction=FLAT)
    workload = scenario.workload(microbatches=1)
    model = GPT2M
    schedule = build_schedule("pipeshard", Case(cluster, model, workload, params))
    result = run_schedule(schedule, cluster, params, workload, iterations=1, network=IdealNetwork)
    g0, g1 = cluster.hosts[0].gpus[0], cluster.hosts[1].gpus[0]
    tokens = workload.global_batch / 2 * workload.seq_len  # each stage's batch is split over its 2 GPUs
    per_layer = model.layer_forward_flops(tokens, workload.seq_len)
    f0 = 12 * per_layer / rate(g0, params, workload)
    f1 = (12 * per_layer + model.head_forward_flops(tokens)) / rate(g1, params, workload)
    expected = 3 * f0 + 3 * f1 + params.iteration_overhead_s["pipeshard"]
    assert result.iteration_end[0] == pytest.approx(expected, rel=REL)
    # with the real network it can only take longer
    real = run_schedule(schedule, cluster, params, workload, iterations=1, network=TCPNetwork)
    assert real.iteration_end[0] > expected


def uniform_stages(S: int, workload: Workload, model=GPT2):
    """S one-GPU stages made exactly uniform: the last stage's GPU is faster by just what
    the LM head costs, so every stage's forward takes the same time."""
    assert model.n_layer % S == 0
    tokens = workload.global_batch / workload.microbatches * workload.seq_len
    layers = model.n_layer // S
    body = layers * model.layer_forward_flops(tokens, workload.seq_len)
    ratio = (body + model.head_forward_flops(tokens)) / body
    base = CATALOG["A30"]
    gpus = [replace(base, name="G")] * (S - 1) + [replace(base, name="Glast")]
    params = default_params().with_values(flat_fraction={"G": 0.1, "Glast": 0.1 * ratio})
    stage_s = 3 * body / rate(gpus[0], params, workload)  # forward + backward of one microbatch
    return chain(gpus), params, stage_s


@pytest.mark.parametrize("S", [2, 3, 4])
@pytest.mark.parametrize("M", [1, 2, 4, 8])
def test_bubble_fraction_of_uniform_stages(S, M):
    workload = Workload(global_batch=16, microbatches=M, seq_len=512)
    cluster, params, stage_s = uniform_stages(S, workload)
    expected_bubble = (S - 1) / (M + S - 1)
    for kind in ("1f1b", "gpipe"):
        p = params.with_settings("pipeshard", schedule=kind)
        r = predict(Case(cluster, GPT2, workload, p), "pipeshard")
        assert r.ok, r.reason
        b = r.iteration_breakdown
        assert b.compute_s == pytest.approx(M * stage_s, rel=REL)
        assert b.bubble_s / (b.compute_s + b.bubble_s) == pytest.approx(expected_bubble, rel=1e-9, abs=1e-12)
        # the ideal-network makespan is (M + S - 1) stage times plus the overhead
        schedule = build_schedule("pipeshard", Case(cluster, GPT2, workload, p))
        ideal = run_schedule(schedule, cluster, p, workload, iterations=1, network=IdealNetwork)
        assert ideal.iteration_end[0] == pytest.approx(
            (M + S - 1) * stage_s + p.iteration_overhead_s["pipeshard"], rel=REL)


@pytest.mark.parametrize("S,M", [(2, 4), (3, 8), (4, 4), (4, 16)])
def test_gpipe_and_1f1b_take_the_same_time_with_an_ideal_network(S, M):
    workload = Workload(global_batch=16, microbatches=M, seq_len=512)
    cluster, params, _ = uniform_stages(S, workload)
    times, acts = {}, {}
    for kind in ("1f1b", "gpipe"):
        p = params.with_settings("pipeshard", schedule=kind)
        schedule = build_schedule("pipeshard", Case(cluster, GPT2, workload, p))
        times[kind] = run_schedule(schedule, cluster, p, workload, iterations=1, network=IdealNetwork).iteration_end[0]
        acts[kind] = {r: parts["activations"] for r, parts in schedule.memory_parts.items()}
        assert all(m <= d.gpu.memory_gib * 2**30 for d, m in
                   zip(schedule.devices, schedule.memory_bytes.values()))  # memory allows both
    assert times["1f1b"] == pytest.approx(times["gpipe"], rel=REL)


@pytest.mark.parametrize("S,M", [(2, 1), (2, 2), (2, 8), (3, 4), (4, 16)])
def test_1f1b_keeps_fewer_activations_in_flight_than_gpipe(S, M):
    workload = Workload(global_batch=16, microbatches=M, seq_len=512)
    cluster, params, _ = uniform_stages(S, workload)
    sched = {kind: build_schedule("pipeshard", Case(cluster, GPT2, workload, params.with_settings("pipeshard", schedule=kind)))
             for kind in ("1f1b", "gpipe")}
    for stage, d in enumerate(sched["gpipe"].devices):
        a_1f1b = sched["1f1b"].memory_parts[d.rank]["activations"]
        a_gpipe = sched["gpipe"].memory_parts[d.rank]["activations"]
        # GPipe keeps all M microbatches' activations; 1F1B at most S - stage of them
        assert a_1f1b == pytest.approx(a_gpipe * min(M, S - stage) / M, rel=REL)
        if M > S - stage:
            assert a_1f1b < a_gpipe
        else:
            assert a_1f1b == pytest.approx(a_gpipe, rel=REL)
        assert sched["1f1b"].memory_bytes[d.rank] <= sched["gpipe"].memory_bytes[d.rank]


def test_gpipe_can_run_out_of_memory_where_1f1b_fits():
    scenario = load_scenario("utah-gpn")
    workload = scenario.workload(global_batch=64, microbatches=32)
    r = {kind: predict(Case(scenario.cluster, GPT2M, workload, default_params().with_settings("pipeshard", schedule=kind)), "pipeshard") for kind in ("1f1b", "gpipe")}
    assert r["1f1b"].ok
    assert r["gpipe"].status == "out-of-memory"
    assert r["1f1b"].peak_memory_gib < r["gpipe"].peak_memory_gib


def test_balanced_split_gives_the_faster_gpus_more_layers():
    assert split_layers(24, [2.0, 1.0], "balanced") == [16, 8]
    assert split_layers(24, [1.0, 1.0], "balanced") == [12, 12]
    assert split_layers(25, [1.0, 1.0], "uniform") == [13, 12]
    assert sum(split_layers(24, [3.0, 1.0, 1.7], "balanced")) == 24


# The balanced split minimizes the slowest stage's compute (the LM head counted on the last
# stage), so with an ideal network it is never slower. Over a real WAN the iteration is
# mostly round trips, and which stage starts sending first shifts it a little either way
# (BRIS-STAR, shipped defaults: balanced 0.8% slower), so there it must stay within 2%.


@pytest.mark.parametrize("scenario_name", ["utah-gpn", "bris-star", "tacc-tacc"])
@pytest.mark.parametrize("ideal", [True, False])
def test_balanced_split_is_not_slower_on_heterogeneous_gpus(scenario_name, ideal):
    scenario = load_scenario(scenario_name)
    cluster, workload = scenario.cluster, scenario.workload()
    assert len({h.gpus[0].name for h in cluster.hosts}) == 2  # heterogeneous slice
    times = {}
    for split in ("uniform", "balanced"):
        params = default_params().with_settings("pipeshard", stage_split=split)
        schedule = build_schedule("pipeshard", Case(cluster, GPT2M, workload, params))
        times[split] = run_schedule(schedule, cluster, params, workload, iterations=2,
                                    network=IdealNetwork if ideal else TCPNetwork).iteration_time(1 if not ideal else 0)
    assert times["balanced"] <= times["uniform"] * (1 + (REL if ideal else 0.02))


def test_balanced_split_is_not_slower_on_heterogeneous_gpus_predict():
    scenario = load_scenario("utah-gpn")
    r = {split: predict(Case(scenario.cluster, GPT2M, scenario.workload(), default_params().with_settings("pipeshard", stage_split=split)), "pipeshard") for split in ("uniform", "balanced")}
    assert r["balanced"].iteration_time_s <= r["uniform"].iteration_time_s * (1 + REL)
    assert "12/12" in r["uniform"].description


def test_more_microbatches_shrink_the_bubble_with_an_ideal_network():
    workload = Workload(global_batch=16, microbatches=1, seq_len=512)
    cluster, params, _ = uniform_stages(4, workload)
    fractions = []
    for M in (1, 2, 4, 8, 16):
        w = replace(workload, microbatches=M)
        cl, p, _ = uniform_stages(4, w)
        b = predict(Case(cl, GPT2, w, p), "pipeshard").iteration_breakdown
        fractions.append(b.bubble_s / (b.compute_s + b.bubble_s))
    assert fractions == sorted(fractions, reverse=True)
    assert fractions[0] == pytest.approx(3 / 4, rel=1e-9)


@pytest.mark.parametrize("sizes", [(1, 2), (2, 1), (2, 1, 2)])
def test_jax_bubble_sends_reach_every_peer_of_stages_of_unlike_sizes(sizes):
    """Under jax every real activation and gradient send is followed by S - 1 bubble sends: with stages of
    different GPU counts each GPU repeats its last microbatch's sends to every peer, and a GPU with no
    counterpart in another stage still gets its bubbles (they once left a send unmatched: the run failed)."""
    from geosim.sim.schedule import Recv, Send

    cluster = Cluster("unlike", tuple(Host(f"h{i}", "S0", (CATALOG["T4"],) * n) for i, n in enumerate(sizes)), ())
    workload = Workload(global_batch=8, microbatches=2, seq_len=256, tokens_per_epoch=2 ** 22, epochs=1, runtime="jax")
    case = Case(cluster, GPT2, workload, default_params())
    schedule = build_schedule("pipeshard", case)
    sends = sorted((r, op.dst, op.tag) for r, ops in schedule.programs.items() for op in ops if type(op) is Send)
    recvs = sorted((op.src, r, op.tag) for r, ops in schedule.programs.items() for op in ops if type(op) is Recv)
    assert sends == recvs
    real = [s for s in sends if not s[2][0].startswith("bubble")]
    assert len(sends) - len(real) == (len(sizes) - 1) * len({(a, b, t[0]) for a, b, t in real})
    assert predict(case, "pipeshard").ok
