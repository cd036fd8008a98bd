"""A symmetry that fixes a shared hop (geosim.sim.symmetry, the network's symmetric_fixing): every pipeline
replica's activations cross one WAN hop, which a shift of replicas leaves in place. It is accepted where the hop's
flows may leave its line time out of their ends, and the reduced run checks that at every instant the hop is
reserved (else every rank runs). Each test compares the reduced run with the run of every rank, to the bit."""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import assert_same_run, examples
from geosim.base.errors import GeosimError
from geosim.inputs.case import Case
from geosim.inputs.params import default_params
from geosim.inputs.scenario import get_model, load_scenario
from geosim.inputs.specs import Workload
from geosim.sim.engine import run_schedule
from geosim.sim.network import _exclusive
from geosim.sim.network.fabric import FabricNetwork
from geosim.sim.network.tcp import TCPNetwork
from geosim.techniques import build_schedule, layout_options
from test_symmetry import _EXAMPLES, MODEL, PROPERTY, uniform_cluster


def _pipeline_over_sites(cluster, tensor: int, microbatches: int = 4):
    params = default_params()
    p = sum(len(h.gpus) for h in cluster.hosts)
    workload = Workload(global_batch=p * microbatches * 2, microbatches=microbatches, seq_len=256)
    case = Case(cluster, MODEL, workload, params)
    sites = len({h.site for h in cluster.hosts})
    options = layout_options("pipeshard", case, tuple(h.name for h in cluster.hosts), tensor=tensor, pipeline=sites)
    return build_schedule("pipeshard", case, options), params, workload


def test_replicas_across_sites_run_once_where_the_wan_decides_no_end(monkeypatch):
    """A stage per site, four replicas, a NIC per GPU: every replica's activations cross the one WAN hop
    between the sites, which every shift of replicas leaves in place (the proof refused it: every rank ran).
    On a fast link (window-bound flows, their windows within its bandwidth-delay product) one replica runs for
    all. On a slow one the proof refuses the shift before the run; with that cheap refusal off it passes, and
    the reduced run's check stops it at the first instant the hop decides an end: every rank runs. With one
    NIC per host its GPUs meet at their NIC: every rank runs. The figures are the full run's in each case, on
    the TCP and the fabric model."""
    refused = []
    checked = _exclusive.ExclusiveLinks._fixed_send_at

    def counting(self, *args):
        try:
            return checked(self, *args)
        except Exception:
            refused.append(args)
            raise

    monkeypatch.setattr(_exclusive.ExclusiveLinks, "_fixed_send_at", counting)
    cases = (("per-gpu", 100e9, True, 8, False), ("per-gpu", 1e8, True, 32, False), ("per-gpu", 1e8, False, 32, True),
             ("shared", 100e9, True, 32, False))
    for nic, bandwidth, cheap_refusal, ranks, refusal in cases:
        monkeypatch.setattr(_exclusive, "_may_share", _MAY_SHARE if cheap_refusal else lambda route, flows: True)
        cluster = uniform_cluster(2, 4, 4, nic=nic, rtt=0.02, bandwidth=bandwidth)
        schedule, params, workload = _pipeline_over_sites(cluster, tensor=4)
        for network in (TCPNetwork, FabricNetwork):
            refused.clear()
            full = run_schedule(schedule, cluster, params, workload, iterations=2, network=network, symmetry=False)
            reduced = run_schedule(schedule, cluster, params, workload, iterations=2, network=network)
            assert_same_run(full, reduced)
            assert (reduced.simulated_ranks, bool(refused)) == (ranks, refusal), (nic, bandwidth, network)


_MAY_SHARE = _exclusive._may_share


def test_the_bench_layouts_small_version_runs_in_full_and_agrees():
    """Issue 47's layout shape at 256 GPUs (4 sites x 8 hosts x 8 H100, one NIC per host; GPT-3 6.7B t8 p4
    d8): a shift of replicas passes the proof with the WAN hops fixed, but a host's 8 GPUs meet at its NIC
    at one instant, so the reduced run stops there and every rank runs: the same figures."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench" / "clusters"))
    from make_clusters import counted  # the bench clusters' own writer
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "layout.toml"
        path.write_text(counted("layout", 4, 8))
        cluster = load_scenario(path).cluster
    params = default_params()
    workload = Workload(global_batch=128, microbatches=16)
    case = Case(cluster, get_model("gpt3-6.7b"), workload, params)
    schedule = build_schedule("pipeshard", case, layout_options(
        "pipeshard", case, tuple(h.name for h in cluster.hosts), tensor=8, pipeline=4))
    full = run_schedule(schedule, cluster, params, workload, iterations=1, network=FabricNetwork, symmetry=False)
    reduced = run_schedule(schedule, cluster, params, workload, iterations=1, network=FabricNetwork)
    assert_same_run(full, reduced)
    assert reduced.simulated_ranks == 256


@settings(PROPERTY, max_examples=_EXAMPLES or examples(100, 40))
@given(sites=st.sampled_from([2, 3, 4]), hosts=st.sampled_from([1, 2, 4]), gpus=st.sampled_from([2, 4]),
       nic=st.sampled_from(["per-gpu", "per-gpu", "shared"]), rtt=st.sampled_from([2e-4, 2e-3, 2e-2, 9e-2]),
       bandwidth=st.sampled_from([1e8, 1e9, 1e10, 1e11]), tensor=st.sampled_from([1, 2, 4]),
       microbatches=st.sampled_from([1, 2, 4]), fabric=st.booleans(), slow_link=st.booleans(),
       cheap_refusal=st.booleans())
def test_a_shift_that_fixes_the_wan_hop_changes_no_figure(sites, hosts, gpus, nic, rtt, bandwidth, tensor,
                                                            microbatches, fabric, slow_link, cheap_refusal):
    """Pipelines with a stage per site over random links (window-bound or line-bound, one link slower or
    not), with the proof's cheap refusal of fixed hops (_may_share) or without it (so that the reduced run's
    own check is what stops a shift): whatever the search proves, and wherever that check stops the reduced
    run, the figures are those of the run of every rank, to the bit."""
    if tensor > gpus:
        return
    cluster = uniform_cluster(sites, hosts, gpus, nic=nic, rtt=rtt, bandwidth=bandwidth)
    if slow_link and cluster.links:
        cluster = dataclasses.replace(cluster, links=(dataclasses.replace(
            cluster.links[0], bandwidth_bps=cluster.links[0].bandwidth_bps / 10),) + cluster.links[1:])
    try:
        schedule, params, workload = _pipeline_over_sites(cluster, tensor, microbatches)
    except GeosimError:
        return
    network = FabricNetwork if fabric else TCPNetwork
    full = run_schedule(schedule, cluster, params, workload, iterations=2, network=network, symmetry=False)
    try:
        if not cheap_refusal:
            _exclusive._may_share = lambda route, flows: True
        reduced = run_schedule(schedule, cluster, params, workload, iterations=2, network=network)
    finally:
        _exclusive._may_share = _MAY_SHARE
    assert reduced.simulated_ranks <= full.simulated_ranks
    assert_same_run(full, reduced)
