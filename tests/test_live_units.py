"""live/: the parts that need no multi-device JAX (fast, in this process)."""

import subprocess
import sys

import numpy as np
import pytest

from geosim.cli import main
from geosim.base.errors import GeosimError
from geosim.inputs.scenario import load_scenario
from geosim.live.train import corpus
from geosim.live.train.alpa_backend import ALPA_MISSING, method_spec
from geosim.live.wan.agent import Agent, scenario_text


def test_cli_module_imports_nothing_heavy():
    code = "import sys, geosim.live.cli; heavy = {'jax', 'flax', 'optax', 'ray'} & set(sys.modules); print(sorted(heavy))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_generated_corpus_is_deterministic_and_packed():
    a = corpus.load("generated", n_ctx=64, tokenizer="bytes", seed=0)
    b = corpus.load("generated", n_ctx=64, tokenizer="bytes", seed=0)
    assert a.sequences.shape[1] == 65 and a.sequences.shape[0] > 1000
    assert np.array_equal(a.sequences, b.sequences)
    assert a.vocab == 257 and a.sequences.max() <= 256
    assert (a.sequences == 256).any()  # documents separated by end-of-text
    text = bytes(int(t) for t in a.sequences[0] if t < 256).decode("utf-8", "replace")
    assert "Article" in text or "The " in text
    assert np.array_equal(a.batch(3, 8), b.batch(3, 8))
    assert not np.array_equal(a.batch(0, 8), a.batch(1, 8))
    assert a.batch(0, 10_000).shape == (10_000, 65)  # batches larger than the corpus wrap around


def test_text_file_corpus(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("first document " * 40 + "\n\n" + "second one " * 40)
    ds = corpus.load(str(path), n_ctx=16, tokenizer="bytes")
    assert ds.source == str(path) and ds.sequences.shape[1] == 17


def test_wikipedia_loader_names_the_studys_dump():
    assert corpus.WIKIPEDIA == ("wikimedia/wikipedia", "20231101.ace")


def test_alpa_method_mapping():
    assert method_spec("data", 1, 24, None) == ("DataParallel", {})
    assert method_spec("zero2", 1, 24, None) == ("Zero2Parallel", {})
    assert method_spec("shard", 1, 24, None) == ("ShardParallel", {})
    name, kwargs = method_spec("pipeshard", 8, 24, None)
    assert name == "PipeshardParallel" and kwargs["num_micro_batches"] == 8
    assert kwargs["layer_option"] == ("AutoLayerOption", {"layer_num": 2}) and kwargs["stage_option"] == "uniform"


def test_alpa_backend_missing_is_one_line(capsys):
    pytest.importorskip("geosim")
    assert main(["live", "run", "--backend", "alpa", "--technique", "data", "--steps", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and ALPA_MISSING in err


@pytest.mark.parametrize("argv, needle", [
    (["--technique", "tensor"], "unknown technique 'tensor'"),
    (["--model", "gpt5"], "unknown model 'gpt5'"),
    (["--steps", "0"], "--steps: must be >= 1"),
    (["--global-batch", "6", "--microbatches", "4"], "must be divisible by microbatches"),
])
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    assert main(["live", "run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and needle in err and "Traceback" not in err


def test_wan_subcommand_is_hooked(capsys):
    with pytest.raises(SystemExit) as info:
        main(["live", "wan", "--help"])
    assert info.value.code == 0 and "status" in capsys.readouterr().out


def test_probe_agent_measures_loopback_and_writes_a_loadable_scenario(tmp_path):
    agent = Agent("127.0.0.1")
    port = agent.server.port
    assert agent.server.socket.getsockname()[0] == "127.0.0.1"  # the address given, not every interface
    rtt = agent.ping("127.0.0.1", port, 10)
    single = agent.throughput("127.0.0.1", port, 1, 0.3)
    multi = agent.throughput("127.0.0.1", port, 3, 0.3)
    assert 0 < rtt < 50 and single > 0.01 and multi > 0.01
    result = {"when": "now", "hosts": [{"name": "a", "ip": "127.0.0.1", "gpus": []},
                                       {"name": "b", "ip": "127.0.0.1", "gpus": ["Tesla T4", "Tesla T4"]},
                                       {"name": "c", "ip": "127.0.0.1",
                                        "gpus": ["NVIDIA A100-SXM4-40GB", "NVIDIA A100 PCIe", "Mystery GPU 9"],
                                        "gpu_memory_gib": [40.0, 80.0, 12.0]}],
              "links": [{"a": "a", "b": "b", "rtt_ms": rtt, "single_gbps": single, "multi_gbps": multi, "streams": 3},
                        {"a": "b", "b": "c", "rtt_ms": rtt, "single_gbps": single, "multi_gbps": multi, "streams": 3}]}
    path = tmp_path / "probed.toml"
    path.write_text(scenario_text(result, "probed"))
    with pytest.raises(GeosimError) as info:  # a GPU the catalog lacks: its generation is the user's to say
        load_scenario(path)
    assert info.value.key == "gpus.Mystery-GPU-9.architecture" and "fill in its [gpus] table, its architecture" in \
        path.read_text()
    path.write_text(path.read_text().rstrip() + '\narchitecture = "ampere"\n')  # its table is the file's last
    cluster = load_scenario(path).cluster
    assert [h.name for h in cluster.hosts] == ["a", "b", "c"]
    assert [g.name for g in cluster.hosts[1].gpus] == ["T4", "T4"] and cluster.hosts[0].gpus[0].name == "CPU"
    # names and memory through the one GPU catalog: an A100 is 40 or 80 GB, never a made-up size
    assert [g.memory_gib for g in cluster.hosts[2].gpus] == [40, 80, 12]
    assert cluster.links[0].rtt_s == pytest.approx(rtt / 1e3, rel=1e-4, abs=1e-9)
    assert cluster.links[0].bandwidth_bps == pytest.approx(max(single, multi) * 1e9, rel=1e-3)


def test_out_of_memory_is_recognised_from_a_real_xla_error():
    jnp = pytest.importorskip("jax.numpy")
    from geosim.live.train.loop import is_out_of_memory

    with pytest.raises(Exception) as info:
        jnp.zeros((2**42,), jnp.float32).block_until_ready()  # 16 TiB: XLA refuses, RESOURCE_EXHAUSTED
    assert is_out_of_memory(info.value)
    assert not is_out_of_memory(ValueError("shapes do not match"))


@pytest.mark.parametrize("device, memory_gib, name", [
    ("NVIDIA A100-SXM4-40GB", None, "A100-40GB"),
    ("NVIDIA A100-SXM4-80GB", None, "A100-80GB"),
    ("NVIDIA A100-PCIE", 30.0, "A100-40GB-PCIe"),  # XLA's allocator limit (75% of 40 GB)
    ("NVIDIA A100-PCIE", 60.0, "A100-80GB-PCIe"),
    ("NVIDIA A100-PCIE-40GB", None, "A100-40GB-PCIe"),  # a variant word picks the PCIe card
    ("NVIDIA A100 80GB PCIe", None, "A100-80GB-PCIe"),
    ("NVIDIA H200", None, "H200"),
    ("NVIDIA H100 PCIe", None, "H100-PCIe"),
    ("NVIDIA H100 NVL", None, "H100-NVL"),
    ("NVIDIA RTX 6000 Ada Generation", None, "RTX6000-Ada"),
    ("NVIDIA B200", None, "B200"),
    ("NVIDIA A100-PCIE", None, None),  # ambiguous: no guessed size
    ("Quadro RTX 6000", None, "RTX6000"),
    ("Tesla T4", None, "T4"),
    ("NVIDIA H100 80GB HBM3", None, "H100"),
    ("NVIDIA L4", None, "L4"),
    ("NVIDIA L40S", None, "L40S"),
    ("NVIDIA A10", None, "A10"),  # not A100
])
def test_gpu_names_resolve_through_the_catalog(device, memory_gib, name):
    from geosim.live.train.record import catalog_gpu, inline_cluster
    from geosim.inputs.scenario import gpu_catalog

    assert catalog_gpu(device, memory_gib) == name
    cluster = inline_cluster({"platform": "gpu", "kind": device, "count": 2, "memory_gib": memory_gib}, ["vm1"])
    if name:
        assert cluster["hosts"][0]["gpus"] == [name, name] and "gpus" not in cluster
        assert gpu_catalog()[name].memory_gib >= (memory_gib or 0)
    else:  # the device's own name and memory, never a made-up 16 GiB when the device says otherwise
        table = cluster["gpus"]["GPU"]
        assert table["name"] == device and (memory_gib is None or table["memory_gib"] == memory_gib)
