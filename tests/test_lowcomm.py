"""The low-communication techniques (DiLoCo, Streaming DiLoCo, SparseLoCo, the hybrid),
Pipeshard's activation compression, and time to target (geosim/convergence.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from geosim.inputs.case import Case
from geosim.cli import main
from geosim.sim.engine import run_schedule
from geosim.sim.network.tcp import TCPNetwork
from geosim.base.errors import GeosimError
from geosim.inputs.params import default_params, load_params
from geosim.predict import predict
from geosim.inputs.scenario import get_model, gpu_catalog, load_scenario, model_catalog
from geosim.sim.schedule import Collective, Repeat
from geosim.inputs.specs import Cluster, Host, Link, Workload
from geosim.techniques import build_schedule, sparseloco
from geosim.techniques.hybrid import plan_replicas, replica_layout
from geosim.studies.whatif import with_bandwidth, with_rtt
from geosim.studies import convergence

PARAMS = default_params()
GPT2M = model_catalog()["gpt2m"]
GPT2 = model_catalog()["gpt2"]
SLICE = load_scenario("utah-gpn")
WORKLOAD = SLICE.workload()
NEW = ("diloco", "sparseloco", "hybrid")
SMALL = Workload(tokens_per_epoch=12 * 256 * 10, seq_len=256, global_batch=12, microbatches=2, epochs=1)


def one_gpu_hosts(n: int, rtt_ms: float = 50.0) -> Cluster:
    a30 = gpu_catalog()["A30"]
    hosts = tuple(Host(f"h{i}", f"S{i}", (a30,)) for i in range(n))
    links = tuple(Link(f"S{i}", f"S{j}", rtt_ms / 1e3, 10e9) for i in range(n) for j in range(i + 1, n))
    return Cluster("one-gpu-hosts", hosts, links)


def wan_bytes(schedule, cluster, iterations=1) -> float:
    run = run_schedule(schedule, cluster, PARAMS, SMALL if cluster.name == "one-gpu-hosts" else WORKLOAD,
                       iterations=iterations, network=TCPNetwork, trace=True, exact=True)
    return sum(row[5] for row in run.trace if row[0] == "link" and "pcie" not in row[1])


# --- formula tests -----------------------------------------------------------------------

def test_diloco_with_h1_and_no_compression_communicates_exactly_as_data():
    same = {"inner_steps": 1, "sync_dtype_bytes": WORKLOAD.bytes_per_value}
    diloco = build_schedule("diloco", Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), same)
    data = build_schedule("data", Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS))
    # the same all-reduce over the same ring in the same XLA combiner buffers, so the same bytes on the wide-area link
    def gradient_sync(schedule, tag):
        return [(r.count, [(c.op, c.group, c.nbytes, c.algorithm) for c in r.ops]) for r in schedule.programs[0]
                if isinstance(r, Repeat) and isinstance(r.ops[0], Collective) and r.ops[0].tag == tag]

    assert gradient_sync(diloco, ("outer",)) == gradient_sync(data, ("grads",)) and len(gradient_sync(data, ("grads",))) == 1
    assert wan_bytes(diloco, SLICE.cluster) == pytest.approx(wan_bytes(data, SLICE.cluster), rel=1e-12)
    # one GPU per host: no in-host all-reduce, every byte the same
    cluster = one_gpu_hosts(2)
    d = build_schedule("diloco", Case(cluster, GPT2, SMALL, PARAMS), {"inner_steps": 1, "sync_dtype_bytes": 2})
    g = build_schedule("data", Case(cluster, GPT2, SMALL, PARAMS))
    assert (run_schedule(d, cluster, PARAMS, SMALL, 1, network=TCPNetwork).bytes_sent
            == run_schedule(g, cluster, PARAMS, SMALL, 1, network=TCPNetwork).bytes_sent)
    # ... and it is no faster than Data (it adds the outer step)
    assert (predict(Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), "diloco", options=same).iteration_time_s
            >= predict(Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), "data").iteration_time_s)


@pytest.mark.parametrize("replicas", [2, 3])
@pytest.mark.parametrize("topk,bits", [(0.01, 2), (0.03, 4), (0.1, 8)])
def test_sparseloco_bytes_on_the_wire_are_topk_fraction_times_bits(replicas, topk, bits):
    cluster = one_gpu_hosts(replicas)
    options = {"topk_fraction": topk, "bits": bits, "index_bits": 12, "inner_steps": 3}
    schedule = build_schedule("sparseloco", Case(cluster, GPT2, SMALL, PARAMS), options)
    payload = GPT2.num_params * topk * (bits + 12) / 8
    # an all-gather: each replica receives the other replicas' payloads, R(R-1) payloads in all
    assert wan_bytes(schedule, cluster) == pytest.approx(replicas * (replicas - 1) * payload, rel=1e-9)
    assert sparseloco.payload_bytes(GPT2.num_params, replace(PARAMS.settings("sparseloco"), **options)) == pytest.approx(payload)


def test_sparseloco_payload_is_linear_in_topk_and_bits():
    s = replace(PARAMS.settings("sparseloco"), index_bits=0)
    base = sparseloco.payload_bytes(1e9, s)
    assert base == pytest.approx(1e9 * 0.01 * 2 / 8)
    assert sparseloco.payload_bytes(1e9, replace(s, topk_fraction=0.03)) == pytest.approx(3 * base)
    assert sparseloco.payload_bytes(1e9, replace(s, bits=8)) == pytest.approx(4 * base)


def test_streaming_diloco_sends_a_ring_all_reduces_bytes_for_two_replicas():
    cluster = one_gpu_hosts(2)
    blocking = build_schedule("diloco", Case(cluster, GPT2, SMALL, PARAMS), {"inner_steps": 8})
    streaming = build_schedule("diloco", Case(cluster, GPT2, SMALL, PARAMS), {"inner_steps": 8, "overlap": True, "fragments": 4})
    assert wan_bytes(streaming, cluster) == pytest.approx(wan_bytes(blocking, cluster), rel=1e-9)
    quantized = build_schedule("diloco", Case(cluster, GPT2, SMALL, PARAMS), {"inner_steps": 8, "overlap": True, "sync_dtype_bytes": 0.5})
    assert wan_bytes(quantized, cluster) == pytest.approx(wan_bytes(blocking, cluster) / 8, rel=1e-9)


# --- behaviour -----------------------------------------------------------------------------

def test_a_program_is_an_outer_round_and_predict_reports_per_iteration():
    for h in (1, 10, 50):
        p = predict(Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), "diloco", options={"inner_steps": h})
        assert p.ok
        assert p.tokens_per_s == pytest.approx(WORKLOAD.tokens_per_iteration / p.iteration_time_s)
        assert p.total_time_s == pytest.approx(p.startup_s + p.time_per_epoch_s * WORKLOAD.epochs)
        assert p.iteration_breakdown.total_s == pytest.approx(p.iteration_time_s)
        assert p.run_breakdown.total_s == pytest.approx(p.total_time_s)
    assert build_schedule("data", Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS)).iterations_per_program == 1


def test_rarer_synchronization_is_faster_on_a_slow_link():
    slow = with_rtt(SLICE.cluster, 0.103)
    times = [predict(Case(slow, GPT2M, WORKLOAD, PARAMS), "diloco", options={"inner_steps": h}).iteration_time_s
             for h in (1, 10, 100)]
    assert times[0] > times[1] > times[2]
    data = predict(Case(slow, GPT2M, WORKLOAD, PARAMS), "data").iteration_time_s
    assert times[2] < data / 3


def test_overlap_and_compression_hide_the_outer_sync():
    cluster = load_scenario("gat-amst").cluster
    blocking = predict(Case(cluster, GPT2M, WORKLOAD, PARAMS), "diloco").iteration_time_s
    streaming = predict(Case(cluster, GPT2M, WORKLOAD, PARAMS), "diloco", options={"overlap": True}).iteration_time_s
    sparse = predict(Case(cluster, GPT2M, WORKLOAD, PARAMS), "sparseloco").iteration_time_s
    assert streaming < blocking
    assert sparse < blocking


# Found here: a transfer holds the GPUs' PCIe ports for its serialization at line rate, but a
# window-limited one trickles on "without holding the line" (geosim/network.py). Streaming
# DiLoCo's fragment sends overlap the replicas' in-host all-reduces, so at 0.1 ms they hold the
# ports the all-reduce needs and at 20 ms they do not: UTAH-GPN, H=10, 3.318 s at 0.1 ms vs
# 3.264 s at 20 ms per iteration. The network backend belongs to the lead; expected to fail until
# a trickling flow shares its ports too.


@pytest.mark.parametrize("technique,options", [("diloco", {}), ("diloco", {"overlap": True}),
                                               ("sparseloco", {}), ("hybrid", {}),
                                               ("hybrid", {"replicas": [["vm1", "vm2"]]})])
def test_more_rtt_or_less_bandwidth_is_never_faster(technique, options):
    options = options | {"inner_steps": 10}
    slack = 1e-9  # float rounding in the simulated clock
    times = [predict(Case(with_rtt(SLICE.cluster, ms / 1e3), GPT2M, WORKLOAD, PARAMS), technique, options=options).iteration_time_s
             for ms in (0.1, 20, 57, 103, 200)]
    assert all(b >= a * (1 - slack) for a, b in zip(times, times[1:])), times
    assert times[-1] > times[0] or technique == "sparseloco" or technique == "hybrid" and "replicas" not in options
    times = [predict(Case(with_bandwidth(SLICE.cluster, g * 1e9), GPT2M, WORKLOAD, PARAMS), technique, options=options).iteration_time_s for g in (25, 10, 1, 0.3)]
    assert all(b >= a * (1 - slack) for a, b in zip(times, times[1:])), times


def test_memory_counts_outer_state_and_error_feedback():
    n = GPT2M.num_params
    for optimizer, per_param in (("nesterov", 8), ("sgd", 4)):
        s = build_schedule("diloco", Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), {"outer_optimizer": optimizer})
        assert s.memory_parts[0]["outer optimizer"] == pytest.approx(per_param * n)
    data = build_schedule("data", Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS))
    for feedback, per_param in ((True, 8), (False, 4)):
        s = build_schedule("sparseloco", Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), {"error_feedback": feedback})
        extra = s.memory_bytes[0] - data.memory_bytes[0]
        assert extra == pytest.approx(per_param * n)


def test_pipeshard_activation_compression_scales_the_bytes_between_stages():
    full = build_schedule("pipeshard", Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS))
    tenth = build_schedule("pipeshard", Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), {"activation_compression": 0.1})
    assert wan_bytes(tenth, SLICE.cluster) == pytest.approx(wan_bytes(full, SLICE.cluster) / 10, rel=1e-9)
    with pytest.raises(GeosimError):
        build_schedule("pipeshard", Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), {"activation_compression": 0})


def test_hybrid_uses_full_replicas_where_they_fit_and_pipelines_elsewhere():
    # every study host fits gpt2m: the hybrid is SparseLoCo
    assert plan_replicas(SLICE.cluster, GPT2M, WORKLOAD, PARAMS, 8.0, {}) == [("vm1",), ("vm2",)]
    hybrid = predict(Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), "hybrid")
    assert hybrid.iteration_time_s == pytest.approx(predict(Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), "sparseloco").iteration_time_s)
    # one big host and two 16 GiB hosts that cannot hold gpt2-large: a full replica + a pipeline
    catalog = gpu_catalog()
    hosts = (Host("big", "A", (catalog["A100-80GB"],)), Host("t1", "B", (catalog["T4"],)), Host("t2", "B", (catalog["T4"],)))
    cluster = Cluster("mixed", hosts, (Link("A", "B", 0.05, 10e9),))
    model = model_catalog()["gpt2-large"]
    workload = Workload(global_batch=8, microbatches=4)
    assert plan_replicas(cluster, model, workload, PARAMS, 8.0, {}) == [("big",), ("t1", "t2")]
    p = predict(Case(cluster, model, workload, PARAMS), "hybrid")
    assert p.ok and " pipelined " in p.description
    assert convergence.uses_compressed_pipeline(p, PARAMS)
    # a lone host that fits nothing has no partner to pipeline with
    lone = Cluster("lone", hosts[:2], (Link("A", "B", 0.05, 10e9),))
    assert predict(Case(lone, model, workload, PARAMS), "hybrid").status == "infeasible"


def test_a_pipelined_replica_alone_is_compressed_pipeshard():
    hybrid = predict(Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), "hybrid", options={"replicas": [["vm1", "vm2"]]})
    pipe = predict(Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), "pipeshard", options={"activation_compression": PARAMS.settings("hybrid").activation_compression})
    assert hybrid.iteration_time_s == pytest.approx(pipe.iteration_time_s, rel=1e-3)


# --- parameters --------------------------------------------------------------------------

def test_params_file_sets_and_checks_the_new_tunables(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("[diloco]\ninner_steps = 20\noverlap = true\n[sparseloco]\ntopk_fraction = 0.03\n"
                    "[convergence.token_efficiency]\ndiloco = 0.8\n")
    params = load_params(path)
    assert (params.settings("diloco").inner_steps, params.settings("diloco").overlap,
            params.settings("sparseloco").topk_fraction) == (20, True, 0.03)
    assert params.token_efficiency["diloco"] == 0.8 and params.token_efficiency["data"] == 1.0
    path.write_text("[sparseloco]\ntopk_fraction = 2.0\n")
    with pytest.raises(GeosimError, match="topk_fraction"):
        load_params(path)
    path.write_text('[diloco]\nouter_optimizer = "adam"\n')
    with pytest.raises(GeosimError, match="outer_optimizer"):
        load_params(path)


# --- time to target ------------------------------------------------------------------------

def test_loss_gap_to_token_efficiency():
    n, d = GPT2M.num_params, 20 * GPT2M.num_params
    assert convergence.efficiency_from_loss_gap(0.0, n, d) == pytest.approx(1.0)
    gaps = [convergence.efficiency_from_loss_gap(g, n, d) for g in (0.005, 0.0075, 0.011)]
    assert gaps == sorted(gaps, reverse=True)
    # the shipped defaults are these gaps, rounded
    assert PARAMS.token_efficiency["diloco"] == pytest.approx(gaps[1], abs=0.005)
    assert PARAMS.token_efficiency["hybrid"] == pytest.approx(gaps[2], abs=0.005)
    assert PARAMS.compressed_activation_efficiency == pytest.approx(gaps[0], abs=0.005)


def test_measured_efficiency_from_loss_curves(tmp_path):
    path = tmp_path / "curves.jsonl"
    lines = [{"technique": "data", "loss_curve": [[0, 10], [100, 5], [200, 4]]},
             {"technique": "diloco", "loss_curve": [[0, 10], [100, 6], [200, 5], [300, 4.5]], "note": "extra keys ok"},
             {"technique": "data", "status": "ok"}]  # no curve: skipped
    path.write_text("\n".join(json.dumps(x) for x in lines))
    curves = convergence.read_loss_curves(path)
    assert convergence.tokens_to_loss(curves["data"], 4.5) == pytest.approx(150)
    measured = convergence.measured_efficiencies(curves)  # target: 4.5, the lowest loss both reach
    assert measured["data"] == 1.0 and measured["diloco"] == pytest.approx(150 / 300)
    eff = convergence.token_efficiency("diloco", PARAMS, measured=measured)
    assert eff.value == pytest.approx(0.5) and "measured" in eff.source
    given = convergence.token_efficiency("diloco", PARAMS, measured=measured, overrides={"diloco": 0.7})
    assert given.value == 0.7


def test_time_to_target_formula():
    p = predict(Case(SLICE.cluster, GPT2M, WORKLOAD, PARAMS), "sparseloco")
    [row] = convergence.annotate([p], PARAMS, lambda _: 1e9)
    assert row["time_to_target_s"] == pytest.approx(1e9 / PARAMS.token_efficiency["sparseloco"] / p.tokens_per_s
                                                    + p.startup_s)
    assert convergence.target_tokens("chinchilla", GPT2M) == 20 * GPT2M.num_params
    compressed = PARAMS.with_settings("pipeshard", activation_compression=0.5)
    assert convergence.token_efficiency("pipeshard", compressed, compressed_pipeline=True).value == pytest.approx(
        PARAMS.compressed_activation_efficiency)


def test_cli_predict_target_tokens_json(capsys):
    code = main(["predict", "--scenario", "utah-mass", "--hosts", "all", "--json", "--technique", "data",
                 "--technique", "sparseloco", "--target-tokens", "1e9", "--token-efficiency", "sparseloco=0.5"])
    assert code == 0
    rows = {r["technique"]: r for r in json.loads(capsys.readouterr().out)["slices"][0]["predictions"]}
    assert rows["sparseloco"]["token_efficiency"] == 0.5
    for r in rows.values():
        assert r["time_to_target_s"] == pytest.approx(1e9 / r["token_efficiency"] / r["tokens_per_s"] + r["startup_s"])
    assert rows["sparseloco"]["time_to_target_s"] < rows["data"]["time_to_target_s"]


def test_a_hybrid_replica_per_site_is_sparselocos_where_every_site_fits():
    """replica_per = site: each site's hosts train one replica data parallel (not a pipeline); where every
    site fits, the run is SparseLoCo's replica per site, figure for figure (so the planner, which weighs
    that one, does not offer it twice)."""
    from geosim.techniques import build_schedule, plan_variants

    h100 = gpu_catalog()["H100"]
    hosts = tuple(Host(f"s{s}h{h}", f"S{s}", (h100,) * 2, intra_host="nvlink") for s in range(2) for h in range(2))
    cluster = Cluster("two-sites", hosts, (Link("S0", "S1", 30e-3, 10e9),))
    workload = Workload(global_batch=16, microbatches=2, seq_len=1024, tokens_per_epoch=2 ** 22, epochs=1)
    case = Case(cluster, GPT2M, workload, PARAMS)
    everyone = tuple(h.name for h in hosts)
    assert list(plan_variants("hybrid", case, everyone)) == [({}, None)]
    per_site = [("s0h0", "s0h1"), ("s1h0", "s1h1")]
    hybrid = build_schedule("hybrid", case, {"replica_per": "site"})
    assert "pipelined" not in hybrid.description and hybrid.description.startswith("2 replicas (s0h0+s0h1 full")
    sparse = build_schedule("sparseloco", case, {"replicas": per_site})
    assert hybrid.memory_parts == sparse.memory_parts
    a, b = predict(case, "hybrid", options={"replica_per": "site"}), predict(case, "sparseloco",
                                                                              options={"replicas": per_site})
    assert a.ok and b.ok
    assert a.iteration_time_s == b.iteration_time_s and a.total_time_s == b.total_time_s
    assert a.iteration_breakdown == b.iteration_breakdown and a.memory == b.memory


def test_a_hybrid_site_that_cannot_hold_a_replica_joins_the_pipeline():
    from geosim.techniques import plan_variants

    catalog = gpu_catalog()
    big, small = catalog["H100"], catalog["T4"]
    model = get_model("gpt2L")
    hosts = (Host("b0", "S0", (big,)), Host("b1", "S0", (big,)), Host("t0", "S1", (small,)), Host("t1", "S2", (small,)))
    cluster = Cluster("mixed", hosts, (Link("S0", "S1", 20e-3, 10e9), Link("S1", "S2", 20e-3, 10e9)))
    workload = Workload(global_batch=8, microbatches=2, seq_len=1024, tokens_per_epoch=2 ** 22, epochs=1)
    layout = replica_layout(cluster, model, workload, PARAMS, 8.0, None, "site")
    assert layout == [(("b0", "b1"), "full"), (("t0", "t1"), "pipeline")]
    case = Case(cluster, model, workload, PARAMS)
    assert ({}, {"replica_per": "site"}) in list(plan_variants("hybrid", case, tuple(h.name for h in hosts)))
    p = predict(case, "hybrid", options={"replica_per": "site"})
    assert p.ok and "b0+b1 full" in p.description and "t0+t1 pipelined" in p.description
    from geosim.techniques import plan_floor_s
    assert 0 < plan_floor_s("hybrid", case, tuple(h.name for h in hosts), workload, {"replica_per": "site"}) <= p.total_time_s
    with pytest.raises(GeosimError, match="replica_per"):
        replica_layout(cluster, model, workload, PARAMS, 8.0, None, "rack")


def test_live_reads_each_techniques_own_settings():
    """One settings class per technique: a live run's options are the Settings' fields, with their names
    and defaults, but where the Settings' LIVE_DEFAULTS give live's own (with the reason beside them)."""
    import dataclasses

    from geosim.live.registry import low_communication
    from geosim.live.train import lowcomm
    from geosim.techniques import settings_class

    assert low_communication()  # diloco and sparseloco run live
    for name in low_communication():
        cls = settings_class(name)
        declared = {f.name: f.default for f in dataclasses.fields(cls)}
        live = lowcomm.effective(name)
        own = getattr(cls, "LIVE_DEFAULTS", {})
        assert set(live) - {"chunk"} <= set(declared), name  # no option of live's own
        assert {k: v for k, v in live.items() if k in declared and k not in own} == {
            k: declared[k] for k in live if k in declared and k not in own}, name
        assert all(live[k] == v for k, v in own.items()), name
        if "index_bits" in declared:  # a sparse sync's chunk: what its index bits address
            assert live["chunk"] == 2 ** declared["index_bits"]
    # an old record's name for the top-k fraction still reads
    assert lowcomm.effective("sparseloco", {"topk": 0.05})["topk_fraction"] == 0.05
