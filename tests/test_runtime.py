"""Runtimes (geosim/inputs/runtime.py): the fixed costs that belong to the software stack.

Alpa's are the parameters file's (the study's fit, unchanged: tests/test_golden.py); JAX's are
what `geosim live` measured; PyTorch's follow DDP's documented behaviour. Small models are not
free of overhead, nor dominated by Alpa's 0.15 s per step."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from geosim.inputs.case import Case
from geosim.cli import main
from geosim.base.errors import GeosimError
from geosim.inputs.params import default_params
from geosim.inputs.runtime import runtime_from_table, runtime_names, runtime_of, shipped_runtimes, with_runtime
from geosim.inputs.scenario import gpu_catalog, load_scenario, make_workload
from geosim.predict import predict
from geosim.inputs.specs import MIB, Cluster, Host, Model, Workload

LAN = "scenarios/lan-4xa100-30m.toml"


def lan_case(runtime: str, params=None) -> Case:
    scenario = load_scenario(LAN)
    return Case(scenario.cluster, scenario.models["gpt-30m"], scenario.workload(runtime=runtime),
                params or default_params())


def test_the_three_runtimes_are_shipped_with_sources():
    runtimes = shipped_runtimes()
    assert set(runtime_names()) >= {"alpa", "jax", "pytorch"}
    for runtime in runtimes.values():
        assert runtime.source and runtime.description
    assert runtimes["pytorch"].overlap_backward and runtimes["pytorch"].gradient_buckets == 25.0  # DDP's bucket_cap_mb
    assert not runtimes["jax"].overlap_backward and runtimes["jax"].gradient_buckets == "whole"


def test_alpa_takes_its_fixed_costs_from_the_parameters_file():
    params = default_params()
    alpa = runtime_of(Workload(), params)
    assert alpa.name == "alpa" and Workload().runtime == "alpa"
    for technique, seconds in params.iteration_overhead_s.items():
        assert alpa.iteration_overhead_s(technique, params, Workload()) == seconds
        assert alpa.startup(technique, params) == params.startup_s[technique]
    assert alpa.buffers(100 * MIB, params) == math.ceil(100 * MIB / params.combine_bytes)


def test_a_30m_model_on_four_datacenter_gpus_steps_in_tens_of_milliseconds_under_pytorch():
    """Issue 24: 4 A100s, one per host, a 10 Gbit/s LAN, --runtime pytorch: tens of ms, not hundreds."""
    case = lan_case("pytorch")
    assert 29e6 < case.model.num_params < 31e6
    for technique in ("data", "diloco"):
        result = predict(case, technique)
        b = result.iteration_breakdown
        assert 0.010 <= result.iteration_time_s < 0.100, (technique, result.iteration_time_s)
        assert b.overhead_s < 0.005  # DDP's fixed cost is milliseconds, not Alpa's 150
        assert b.compute_s > b.overhead_s
    alpa = predict(lan_case("alpa"), "data")
    assert alpa.iteration_breakdown.overhead_s == pytest.approx(0.15)  # the study's per-step cost
    assert alpa.iteration_time_s > 2 * predict(case, "data").iteration_time_s


def test_nanogpt_baby_gpt_on_one_a100_matches_its_published_pace():
    """nanoGPT's README: the shakespeare_char baby GPT (6 layers, 384 channels, 6 heads, context 256,
    batch 64; 10.7 M parameters with its 65-character vocabulary) trains its 5,000 iterations on one
    A100 in about 3 minutes, evaluation included: at most 36 ms an iteration."""
    a100 = gpu_catalog()["A100-40GB"]
    baby = Model("baby-gpt", 6, 384, 6, vocab=65, n_ctx=256)
    cluster = Cluster("one-a100", (Host("h", "s", (a100,)),), ())
    workload = Workload(tokens_per_epoch=64 * 256 * 5000, seq_len=256, global_batch=64, microbatches=1,
                        precision="bf16", epochs=1, runtime="pytorch")
    result = predict(Case(cluster, baby, workload, default_params()), "data")
    assert 0.012 <= result.iteration_time_s <= 0.040
    assert result.iteration_breakdown.compute_s > 0.8 * result.iteration_time_s


def test_ddp_overlap_hides_communication_behind_the_backward():
    params = default_params()
    overlapped = predict(lan_case("pytorch", params), "data")
    serial = replace(shipped_runtimes()["pytorch"], overlap_backward=False)
    after = predict(lan_case("pytorch", with_runtime(params, serial)), "data")
    assert overlapped.iteration_time_s < after.iteration_time_s
    assert overlapped.iteration_breakdown.exposed_comm_s < after.iteration_breakdown.exposed_comm_s
    assert "buckets" in overlapped.description and "during the backward" in overlapped.description


def test_collective_launches_and_microbatches_cost_what_the_runtime_says():
    params = default_params()
    jax = replace(shipped_runtimes()["jax"], collective_launch_s=0.0, microbatch_s=0.0)
    costly = replace(jax, collective_launch_s=0.01, microbatch_s=0.002)
    case = lan_case("jax", with_runtime(params, costly))
    case = replace(case, workload=replace(case.workload, microbatches=4), cluster=case.cluster)
    base = predict(replace(case, params=with_runtime(params, jax)), "data")
    more = predict(case, "data")
    # one flat buffer: one launch; four microbatches
    assert more.iteration_breakdown.overhead_s - base.iteration_breakdown.overhead_s == pytest.approx(0.01 + 4 * 0.002)


def test_the_runtime_is_named_and_checked():
    assert make_workload({"runtime": "pytorch"}).runtime == "pytorch"
    with pytest.raises(GeosimError) as exc:  # a name: a shipped runtime, or one a parameters file adds
        make_workload({"runtime": 3}, "scen.toml")
    assert exc.value.key == "workload.runtime"
    with pytest.raises(GeosimError) as exc:  # checked against both when it is run
        runtime_of(make_workload({"runtime": "tensorflow"}, "scen.toml"), default_params())
    assert exc.value.key == "workload.runtime" and "alpa" in exc.value.problem
    with pytest.raises(GeosimError) as exc:
        runtime_from_table("x", {"iteration_s": -1.0})
    assert exc.value.key == "x.iteration_s"
    with pytest.raises(GeosimError):
        runtime_from_table("x", {"gradient_buckets": "some"})


def test_predict_names_the_default_runtime_and_takes_the_flag(capsys):
    assert main(["predict", "--scenario", "utah-gpn", "--technique", "data"]) == 0
    assert "runtime alpa" in capsys.readouterr().out
    assert main(["predict", "--scenario", LAN, "--model", "gpt-30m", "--technique", "data", "--runtime", "pytorch"]) == 0
    assert "runtime pytorch" in capsys.readouterr().out
    assert main(["predict", "--runtime", "tensorflow"]) == 2  # one line: unknown runtime, the known ones


def test_a_fitted_runtime_cost_survives_the_parameters_file(tmp_path):
    """calibrate fit / live validate move a runtime's fixed cost (FreeParam kind 'runtime'); the
    fitted.toml they write keeps it ([runtime.NAME], only what differs from the shipped runtime),
    and reading it back gives the same runtime and the same prediction."""
    from geosim.calibrate.free import FreeParam, apply_params
    from geosim.inputs.params import load_params, write_params

    base = default_params()
    free = [FreeParam("runtime", "jax.iteration_s", 1e-4, 1e-5, 1.0, "s"),
            FreeParam("runtime", "jax.collective_launch_s", 0.0037, 1e-6, 1.0, "s")]
    fitted = apply_params(base, free, [0.0421, 0.0123])
    assert fitted.runtimes["jax"].iteration_s == 0.0421 != shipped_runtimes()["jax"].iteration_s
    path = tmp_path / "fitted.toml"
    write_params(fitted, path)
    text = path.read_text()
    assert "[runtime.jax]" in text and "startup_s" not in text.partition("[runtime.jax]")[2]  # as shipped: not written
    again = load_params(path)
    assert again.runtimes == fitted.runtimes
    workload = Workload(runtime="jax")
    assert runtime_of(workload, again).iteration_s == 0.0421
    assert runtime_of(workload, again).collective_launch_s == 0.0123
    assert runtime_of(workload, again).startup_s == shipped_runtimes()["jax"].startup_s
    # a file that does not name a runtime keeps them as shipped
    assert load_params().runtimes == {}


@pytest.mark.parametrize("text, key, problem", [
    ("[runtime.nccl]\niteration_s = 0.1\n", "runtime.nccl", "unknown runtime"),
    ("[runtime.jax]\niteration_s = -1\n", "runtime.jax.iteration_s", "must be a number"),
    ("[runtime.jax]\nlaunch_s = 1\n", "runtime.jax.launch_s", "unknown key"),
    ("runtime = 3\n", "runtime", "must be a table"),
])
def test_a_parameters_files_runtime_table_is_checked(tmp_path, text, key, problem):
    from geosim.inputs.params import load_params

    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(GeosimError, match=problem) as err:
        load_params(path)
    assert err.value.key == key and err.value.source == str(path)
