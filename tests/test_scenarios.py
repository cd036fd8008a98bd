"""Scenario and parameters files: what loads, and the one-line errors (file, key, problem)
for what does not; and the CLI end to end, in process and as the installed script.

Over 400 lines: one file for what scenario files accept and refuse, key by key.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from geosim.inputs.case import Case
from geosim.cli import main
from geosim.base.errors import GeosimError
from geosim.inputs.params import default_params, load_params
from geosim.predict import predict
from geosim.inputs.scenario import BUILTIN_SCENARIOS, builtin_scenarios, load_scenario, model_catalog
from geosim.techniques import STUDY_ORDER as TECHNIQUE_NAMES
from geosim.techniques import default_techniques

HOSTS = """
[[hosts]]
name = "vm1"
site = "UTAH"
gpus = ["RTX6000", "RTX6000"]

[[hosts]]
name = "vm2"
site = "GPN"
gpus = ["T4", "T4"]
"""
LINK = """
[[links]]
between = ["vm1", "vm2"]
rtt_ms = 20.0
bandwidth_gbps = 10.0
"""
VALID = 'name = "mine"\n' + HOSTS + LINK


def write(tmp_path: Path, text: str, name: str = "scenario.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(path: Path) -> GeosimError:
    with pytest.raises(GeosimError) as info:
        load_scenario(path)
    err = info.value
    line = err.line()
    assert "\n" not in line
    assert line.startswith(str(path))
    return err


def test_valid_scenario_loads(tmp_path):
    scenario = load_scenario(write(tmp_path, VALID))
    cluster = scenario.cluster
    assert [h.name for h in cluster.hosts] == ["vm1", "vm2"]
    assert cluster.num_gpus == 4
    assert cluster.links[0].rtt_s == pytest.approx(0.020)
    assert cluster.links[0].bandwidth_bps == pytest.approx(10e9)


@pytest.mark.parametrize("name", BUILTIN_SCENARIOS)
def test_builtin_scenarios_load(name):
    scenario = load_scenario(name)
    assert scenario.cluster.num_gpus == 4
    assert len(scenario.cluster.hosts) == 2
    assert scenario.cluster.reference_slice == name.upper()
    scenario.workload()


def test_builtin_scenarios_load_by_path():
    paths = builtin_scenarios()
    assert len(paths) == len(BUILTIN_SCENARIOS)
    for path in paths:
        assert load_scenario(path).cluster.source == str(path)


@pytest.mark.parametrize("text,key,problem", [
    # unknown GPU
    (VALID.replace('"T4", "T4"', '"T4", "H200X"'), "hosts[1].gpus", "unknown GPU 'H200X'"),
    # negative RTT
    (VALID.replace("rtt_ms = 20.0", "rtt_ms = -5.0"), "links[0].rtt_ms", "must be >= 0"),
    # zero / negative bandwidth
    (VALID.replace("bandwidth_gbps = 10.0", "bandwidth_gbps = 0"), "links[0].bandwidth_gbps", "must be >= 1e-06"),
    # RTT not a number
    (VALID.replace("rtt_ms = 20.0", 'rtt_ms = "fast"'), "links[0].rtt_ms", "must be a number"),
    # unknown top-level key
    ('colour = "blue"\n' + VALID, "colour", "unknown key"),
    # unknown key inside a host
    (VALID.replace('site = "GPN"', 'site = "GPN"\nram_gb = 32'), "hosts[1].ram_gb", "unknown key"),
    # missing key
    (VALID.replace('site = "GPN"\n', ""), "hosts[1].site", "missing"),
    # duplicate host
    (VALID.replace('name = "vm2"', 'name = "vm1"'), "hosts[1].name", "duplicate host name 'vm1'"),
    # a link naming an unknown host
    (VALID.replace('between = ["vm1", "vm2"]', 'between = ["vm1", "vm3"]'), "links[0].between",
     "'vm3' is neither a host nor a site"),
    # a link from a host to itself
    (VALID.replace('between = ["vm1", "vm2"]', 'between = ["vm1", "vm1"]'), "links[0].between", "two different"),
    # hosts at different sites with no link between them
    ('name = "mine"\n' + HOSTS, "links", "has no link path"),
    # no hosts
    ('name = "empty"\nhosts = []\n', "hosts", "non-empty"),
    # bad intra-host interconnect
    (VALID.replace('site = "GPN"', 'site = "GPN"\nintra_host = "infiniband"'), "hosts[1].intra_host", "pcie or nvlink"),
    (VALID.replace('site = "GPN"', 'site = "GPN"\nnic = "two"'), "hosts[1].nic", "shared or per-gpu"),
    # streams not a whole number
    (VALID + "streams = 0\n", "links[0].streams", "must be >= 1"),
    # microbatches not dividing the batch
    (VALID + "\n[workload]\nglobal_batch = 8\nmicrobatches = 3\n", "workload.microbatches",
     "microbatches (3) must divide global_batch (8)"),
    # unknown workload key
    (VALID + "\n[workload]\nlearning_rate = 3\n", "workload.learning_rate", "unknown key"),
    # bad precision
    (VALID + '\n[workload]\nprecision = "fp8"\n', "workload.precision", "must be one of"),
    # negative batch
    (VALID + "\n[workload]\nglobal_batch = -8\n", "workload.global_batch", "must be >= 1"),
    # a custom GPU missing a figure
    (VALID + "\n[gpus.X1]\nmemory_gib = 16\n", "gpus.X1.", "missing"),
    # a custom model with heads not dividing the width
    (VALID + "\n[models.odd]\nn_layer = 2\nn_embd = 100\nn_head = 3\n", "models.odd.n_head", "divisible"),
])
def test_scenario_errors_name_file_key_and_problem(tmp_path, text, key, problem):
    path = write(tmp_path, text)
    err = load_error(path)
    assert err.source == str(path)
    assert err.key is not None and err.key.startswith(key), err.line()
    assert problem in err.problem, err.line()
    where = f"{path}:{err.lineno}" if err.lineno else str(path)
    assert err.line() == f"{where}: {err.key}: {err.problem}"
    if key not in ("links", "hosts", "gpus.X1."):  # keys a file sets on a line of their own have that line
        assert err.lineno is not None, err.line()
        assert key.rsplit(".", 1)[-1].split("[")[0] in path.read_text().splitlines()[err.lineno - 1] or "[" in \
            path.read_text().splitlines()[err.lineno - 1], err.line()


def test_bad_toml(tmp_path):
    path = write(tmp_path, VALID + "\n[[hosts]\nname = \n")
    err = load_error(path)
    assert err.source == str(path)
    assert "not valid TOML" in err.problem


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    err = load_error(path)
    assert err.source == str(path)
    assert err.problem == "no such file"


def test_unknown_builtin_name():
    with pytest.raises(GeosimError) as info:
        load_scenario("atlantis-mars")
    assert info.value.source == "atlantis-mars"
    assert "built-in" in info.value.problem


def test_custom_gpu_and_model_in_a_scenario(tmp_path):
    text = VALID.replace('"T4", "T4"', '"X1", "X1"') + (
        "\n[gpus.X1]\narchitecture = \"ada\"\nmemory_gib = 48\nmemory_bandwidth_gbs = 900\nfp32_tflops = 30\n"
        "fp16_tensor_tflops = 200\npcie_gen = 4\n"
        "\n[models.small]\nn_layer = 4\nn_embd = 256\nn_head = 4\n")
    scenario = load_scenario(write(tmp_path, text))
    assert scenario.cluster.hosts[1].gpus[0].fp16_tensor_tflops == 200
    assert scenario.models["small"].n_layer == 4


def test_the_header_of_a_slice_without_a_wan_link_says_so():
    from dataclasses import replace

    from geosim.cli.predict import describe_cluster

    cluster = load_scenario("utah-gpn").cluster
    assert describe_cluster(cluster).endswith("; RTT 20.2 ms")
    one_vm = replace(cluster, hosts=cluster.hosts[:1], links=())
    assert describe_cluster(one_vm) == "vm1: 2x RTX6000 @UTAH; no WAN link"  # not "RTT  ms"


def test_a_mesh_that_does_not_fit_the_hosts_is_infeasible():
    scenario = load_scenario("utah-gpn")
    r = predict(Case(scenario.cluster, model_catalog()["gpt2m"], scenario.workload(), default_params()), "pipeshard", options={"meshes": [["vm1"], ["vm3"]]})
    assert r.status == "infeasible"
    assert "mesh" in r.reason


def test_a_batch_that_does_not_split_over_the_gpus_is_infeasible():
    scenario = load_scenario("utah-gpn")
    r = predict(Case(scenario.cluster, model_catalog()["gpt2m"], scenario.workload(global_batch=6, microbatches=2), default_params()), "data")
    assert r.status == "infeasible"
    assert "divisible" in r.reason


# --- parameters files -------------------------------------------------------------


def params_error(tmp_path, text) -> GeosimError:
    path = write(tmp_path, text, "params.toml")
    with pytest.raises(GeosimError) as info:
        load_params(path)
    assert info.value.source == str(path)
    assert "\n" not in info.value.line()
    return info.value


def test_params_subset_overrides_the_defaults(tmp_path):
    path = write(tmp_path, "[transport]\nwindow_mib = 8.0\n\n[compute]\ngemm_fraction = 0.3\n\n"
                 "[compute.efficiency]\nCPU = 0.05\n", "params.toml")
    params = load_params(path)
    defaults = default_params()
    assert params.network("tcp").window_bytes == 8 * 2**20
    assert params.gemm_fraction == 0.3 and params.flat_fraction == {"CPU": 0.05}
    assert params.memory_fraction == defaults.memory_fraction
    assert params.network("tcp").streams == defaults.network("tcp").streams
    assert params.source == str(path)


@pytest.mark.parametrize("text,key,problem", [
    ("[transport]\nwindow_size = 3\n", "transport.window_size", "unknown parameter"),
    ("[transport]\nstreams = \"two\"\n", "transport.streams", "must be a number"),
    ("[transport]\nstreams = 1.5\n", "transport.streams", "whole number"),
    ("[transport]\nwindow_mib = -1\n", "transport.window_mib", "must be >= 0"),
    ("[transport]\nslow_start_after_idle = \"yes\"\n", "transport.slow_start_after_idle", "true or false"),
    ("[pipeshard]\nschedule = \"zigzag\"\n", "pipeshard.schedule", "must be one of 1f1b, gpipe"),
    ("[pipeshard]\nstage_split = \"random\"\n", "pipeshard.stage_split", "must be one of"),
    ("[collectives]\ndata = \"butterfly\"\n", "collectives.data", "must be one of ring, tree, hierarchical"),
    ("[collectives]\nexpert = \"ring\"\n", "collectives.expert", "unknown technique"),
    ("[compute.flat_fraction]\nT4 = \"high\"\n", "compute.flat_fraction.T4", "must be a number"),
    ("[host.pcie_gbps]\nfour = 160\n", "host.pcie_gbps.four", "PCIe generation"),
    ("[compute]\nflat_fraction = 0.5\n", "compute.flat_fraction", "must be a table"),
    ("[compute]\ngemm_fraction = 1.5\n", "compute.gemm_fraction", "must be"),
])
def test_params_errors(tmp_path, text, key, problem):
    err = params_error(tmp_path, text)
    assert err.key == key, err.line()
    assert problem in err.problem, err.line()


def test_params_bad_toml_and_missing_file(tmp_path):
    err = params_error(tmp_path, "[transport\n")
    assert "not valid TOML" in err.problem
    with pytest.raises(GeosimError) as info:
        load_params(tmp_path / "missing.toml")
    assert info.value.problem == "no such file"


def test_params_round_trip(tmp_path):
    from geosim.inputs.params import write_params

    path = tmp_path / "out.toml"
    write_params(default_params(), path)
    again = load_params(path)
    mine = {k: v for k, v in again.__dict__.items() if k != "source"}
    theirs = {k: v for k, v in default_params().__dict__.items() if k != "source"}
    assert mine.keys() == theirs.keys()
    for k in mine:
        if isinstance(mine[k], float):
            assert mine[k] == pytest.approx(theirs[k], rel=1e-12), k
        else:
            assert mine[k] == theirs[k], k


# --- the CLI, in process ----------------------------------------------------------


@pytest.mark.slow
def test_cli_predict_default_prints_the_five_slices(capsys):
    assert main(["predict"]) == 0
    out = capsys.readouterr().out
    for name in BUILTIN_SCENARIOS:
        assert name.upper() in out
    for technique in TECHNIQUE_NAMES:
        assert technique in out
    assert "measured" in out


def test_cli_predict_json_breakdowns_add_up(capsys):
    assert main(["predict", "--json", "--scenario", "utah-gpn", "--scenario", "gat-amst"]) == 0
    doc = json.loads(capsys.readouterr().out)
    predictions = [p for s in doc["slices"] for p in s["predictions"]]
    assert {p["scenario"] for p in predictions} == {"UTAH-GPN", "GAT-AMST"}
    ok = [p for p in predictions if p["status"] == "ok"]
    assert len(ok) >= 8
    for p in ok:
        run = p["run_breakdown"]
        assert sum(run.values()) == pytest.approx(p["total_time_s"], rel=1e-9), p["technique"]
        it = p["iteration_breakdown"]
        assert sum(it.values()) == pytest.approx(p["iteration_time_s"], rel=1e-9), p["technique"]
        assert all(v >= 0 for v in it.values())
        assert p["time_per_epoch_s"] * p["epochs"] + p["startup_s"] == pytest.approx(p["total_time_s"], rel=1e-9)
    both = [p for p in ok if len(p["hosts"]) == 2 and p["technique"] in TECHNIQUE_NAMES]
    assert len(both) == 2 * len(TECHNIQUE_NAMES)
    assert all(p["measured"] is not None for p in both)  # the study's figure beside each of its cells
    for p in predictions:
        if p["status"] != "ok":
            assert p["reason"]


@pytest.mark.parametrize("argv,needle", [
    (["predict", "--scenario", "/nonexistent/x.toml"], "/nonexistent/x.toml: no such file"),
    (["predict", "--scenario", "utah-gpn", "--technique", "magic"], "unknown technique 'magic'"),
    (["predict", "--scenario", "utah-gpn", "--rtt-ms", "-5"], "--rtt-ms: must be >= 0"),
    (["predict", "--scenario", "utah-gpn", "--model", "gpt5"], "unknown model 'gpt5'"),
    (["predict", "--scenario", "utah-gpn", "--global-batch", "8", "--microbatches", "3"],
     "microbatches (3) must divide global_batch (8)"),
    (["predict", "--scenario", "utah-gpn", "--epochs", "0"], "--epochs: must be >= 1"),
    (["predict", "--params", "/nonexistent/p.toml"], "/nonexistent/p.toml: no such file"),
])
def test_cli_bad_input_exits_2_with_one_line(capsys, argv, needle):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err
    assert err.startswith("geosim predict: error: ")
    assert needle in err
    assert "Traceback" not in captured.err


def test_cli_bad_scenario_file_names_file_key_problem(tmp_path, capsys):
    path = write(tmp_path, VALID.replace("rtt_ms = 20.0", "rtt_ms = -1"))
    assert main(["predict", "--scenario", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"geosim predict: error: {path}:15: links[0].rtt_ms: must be >= 0, got -1"


def test_cli_bad_params_file(tmp_path, capsys):
    path = write(tmp_path, "[pipeshard]\nschedule = \"zigzag\"\n", "params.toml")
    assert main(["predict", "--scenario", "utah-gpn", "--params", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"geosim predict: error: {path}:2: pipeshard.schedule: must be one of")


# --- the installed script, as a user runs it --------------------------------------


def geosim_command() -> list[str]:
    script = Path(sys.executable).parent / "geosim"
    if script.exists():
        return [str(script)]
    found = shutil.which("geosim")
    return [found] if found else [sys.executable, "-m", "geosim"]


def run_cli(*args, cwd=None):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(geosim_command() + list(args), capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.mark.slow
def test_script_predict_default(tmp_path):
    proc = run_cli("predict", cwd=tmp_path)  # outside the checkout: built-ins come from the package
    assert proc.returncode == 0, proc.stderr
    for name in BUILTIN_SCENARIOS:
        assert name.upper() in proc.stdout
    assert proc.stderr == ""


def test_script_predict_json(tmp_path):
    proc = run_cli("predict", "--json", "--scenario", "tacc-tacc", "--hosts", "all", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (answer,) = doc["slices"]
    assert [p["technique"] for p in answer["predictions"]] == default_techniques()  # fsdp runs when asked (ON_REQUEST)
    for p in answer["predictions"]:
        assert sum(p["run_breakdown"].values()) == pytest.approx(p["total_time_s"], rel=1e-9)


@pytest.mark.parametrize("make_args", [
    lambda d: ["predict", "--scenario", str(d / "missing.toml")],
    lambda d: ["predict", "--scenario", str(d / "bad.toml")],
    lambda d: ["predict", "--scenario", "utah-gpn", "--rtt-ms", "-3"],
    lambda d: ["predict", "--scenario", "utah-gpn", "--technique", "magic"],
])
def test_script_bad_input_exits_2_one_line_no_traceback(tmp_path, make_args):
    (tmp_path / "bad.toml").write_text(VALID.replace('"T4", "T4"', '"T4", "T5"'))
    proc = run_cli(*make_args(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("geosim predict: error: ")


def test_script_unknown_gpu_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(VALID.replace('"T4", "T4"', '"T4", "T5"'))
    proc = run_cli("predict", "--scenario", str(path), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"geosim predict: error: {path}:11: hosts[1].gpus: unknown GPU 'T5'")


def test_script_usage_error_exits_2(tmp_path):
    proc = run_cli("predict", "--no-such-flag", cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
