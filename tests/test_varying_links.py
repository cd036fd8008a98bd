"""Paths that vary: a link's bandwidth samples (inline or a file), drawn per link per draw by
`--draws`, so a collective over many such links waits for the slowest of them."""

from __future__ import annotations

import statistics

import pytest

from geosim.inputs.case import Case
from geosim.cli import main
from geosim.base.errors import GeosimError
from geosim.inputs.params import default_params
from geosim.predict import predict
from geosim.inputs.scenario import scenario_from_doc
from geosim.studies.uncertainty import link_draws, varies

FAST, SLOW = 10.0, 0.1  # Gbit/s


def mesh_doc(hosts: int, samples=None) -> dict:
    names = [f"h{i}" for i in range(hosts)]
    links = [{"between": [a, b], "rtt_ms": 20.0, "bandwidth_gbps": FAST,
              **({"bandwidth_samples": samples} if samples is not None else {})}
             for i, a in enumerate(names) for b in names[i + 1:]]
    return {"name": f"mesh{hosts}", "hosts": [{"name": n, "site": f"s{n}", "gpus": ["A100-40GB"]} for n in names],
            "links": links,
            "models": {"tiny": {"n_layer": 2, "n_embd": 256, "n_head": 4, "n_ctx": 256}},
            "workload": {"seq_len": 256, "global_batch": 48, "microbatches": 1, "tokens_per_epoch": 1_000_000,
                         "epochs": 1}}


def test_samples_inline_and_from_a_file(tmp_path):
    inline = scenario_from_doc(mesh_doc(2, [1.0, 0.5]), str(tmp_path / "s.toml")).cluster
    assert inline.links[0].bandwidth_samples == (1e9, 0.5e9)
    (tmp_path / "iperf.txt").write_text("# Gbit/s, one a line\n0.21\n\n0.2  # a dip\n")
    from_file = scenario_from_doc(mesh_doc(2, "iperf.txt"), str(tmp_path / "s.toml")).cluster
    assert from_file.links[0].bandwidth_samples == (0.21e9, 0.2e9)
    assert not varies(scenario_from_doc(mesh_doc(2), "s.toml").cluster)


@pytest.mark.parametrize("samples, words", [([], "non-empty"), ([1.0, -2.0], "bandwidth_samples[1]"),
                                            ("missing.txt", "cannot read"), ("bad.txt", "line 2")])
def test_bad_samples_are_one_line(tmp_path, samples, words):
    (tmp_path / "bad.txt").write_text("1.0\nfast\n")
    with pytest.raises(GeosimError) as caught:
        scenario_from_doc(mesh_doc(2, samples), str(tmp_path / "s.toml"))
    message = str(caught.value)
    assert words in message and "links[0].bandwidth_samples" in message and "\n" not in message


def test_a_draw_takes_each_varying_link_from_its_samples_and_leaves_constant_links_alone():
    doc = mesh_doc(3, [FAST, SLOW])
    doc["links"][0].pop("bandwidth_samples")
    cluster = scenario_from_doc(doc, "s.toml").cluster
    draws = link_draws(cluster, 40, seed=1)
    assert all(d.links[0] is cluster.links[0] for d in draws)
    seen = {d.links[1].bandwidth_bps for d in draws}
    assert seen == {FAST * 1e9, SLOW * 1e9}
    assert [d.links for d in link_draws(cluster, 5, seed=1)] == [d.links for d in draws[:5]]  # reproducible


def median_slowdown(hosts: int, draws: int = 16) -> float:
    scenario = scenario_from_doc(mesh_doc(hosts, [FAST, FAST, FAST, SLOW]), "mesh.toml")
    case = Case(scenario.cluster, scenario.models["tiny"], scenario.workload(), default_params())
    constant = predict(case, "data").total_time_s
    return statistics.median(predict(case.with_(cluster=c), "data").total_time_s / constant
                             for c in link_draws(case.cluster, draws))


def test_the_slowest_of_many_peers_is_priced():
    # one link in four is slow: two hosts' ring has one link (slow in a quarter of draws: the median is
    # the constant link's), six hosts' ring six (some link slow in 1 - 0.75^6 = 82% of draws)
    two, six = median_slowdown(2), median_slowdown(6)
    assert two == pytest.approx(1.0, rel=1e-9)
    assert six > 2.0


def test_predict_draws_vary_the_links(tmp_path, capsys):
    (tmp_path / "samples.txt").write_text("1.0\n0.05\n")
    scenario = tmp_path / "vary.toml"
    scenario.write_text('name = "vary"\n[[hosts]]\nname = "a"\nsite = "A"\ngpus = ["A100-40GB"]\n'
                        '[[hosts]]\nname = "b"\nsite = "B"\ngpus = ["A100-40GB"]\n'
                        '[[links]]\nbetween = ["a", "b"]\nrtt_ms = 5.0\nbandwidth_gbps = 1.0\n'
                        'bandwidth_samples = "samples.txt"\n')
    assert main(["predict", "--scenario", str(scenario), "--technique", "data", "--hosts", "a+b",
                 "--draws", "8"]) == 0
    out = capsys.readouterr().out
    assert "varying links' bandwidths from their samples" in out
