"""Parallel streams: how many TCP sockets a connection opens (a link's `streams`, the parameters'
transport.streams, a runtime's collective library) and what they buy on a window-limited, a
loss-limited and a shaped path, worked by hand."""

from __future__ import annotations

import pytest

from geosim.base.errors import GeosimError
from geosim.inputs.params import default_params
from geosim.inputs.runtime import runtime_from_table, shipped_runtimes
from geosim.sim.network._loss import Congestion, loss_limited_rate, shaper_utilization
from geosim.inputs.specs import Shaper
from tests.test_loss import network

CUBIC = Congestion(mss_bytes=1448.0, cubic_c=0.4, cubic_beta=0.7, segments_per_ack=1, bbr=False, timeouts=True)
MIB = 2**20


@pytest.mark.parametrize("streams", [1, 2, 8])
def test_a_window_limited_path_moves_streams_windows_a_round_trip(streams):
    net = network(rtt_s=0.1, rate_bps=100e9, streams=streams, window_bytes=1 * MIB)
    route = net.route(0, 1)
    assert route.max_window == pytest.approx(streams * MIB, rel=1e-12)
    # each socket starts from its own initial window (10 segments)
    assert route.initial_window == pytest.approx(streams * 14.26 * 1024, rel=1e-12)


def test_the_line_caps_any_number_of_streams():
    route = network(rtt_s=0.1, rate_bps=1e9, streams=64, window_bytes=1 * MIB).route(0, 1)
    assert route.max_window == pytest.approx(route.line_rate * route.rtt_s, rel=1e-12)


@pytest.mark.parametrize("streams", [1, 4])
def test_a_loss_limited_path_moves_streams_response_rates(streams):
    net = network(loss=0.01, rtt_s=0.05, rate_bps=10e9, streams=streams)
    route = net.route(0, 1)
    one = loss_limited_rate(0.01, route.rtt_s, route.rtt_s + 0.2, net.settings.congestion)
    assert route.max_window == pytest.approx(streams * one * route.rtt_s, rel=1e-12)


def test_synchronized_streams_saw_like_one_through_a_shallow_bucket():
    # flows that lose together sum to one cubic N x C (t - K)^3 + W_max with K = (W_max (1 - beta) / (N C))^(1/3):
    # the same shape in t / K whatever N, so the bucket idles the same fraction; only when the Reno-friendly
    # line (N x 0.53 segments a round trip) overtakes the cubic does the saw turn linear, and idle longer
    keeps = {n: shaper_utilization(1e6, 0.05e6, n, 0.1, CUBIC) for n in (1, 2, 4, 16, 64)}
    assert keeps[1] == pytest.approx(keeps[2], rel=1e-12) == pytest.approx(keeps[4], rel=1e-12)
    assert keeps[64] < keeps[16] < keeps[4] < 1.0
    four = network(shaper=Shaper(burst_bytes=0.0, queue_s=0.005), rtt_s=0.2, rate_bps=50e6, streams=4).route(0, 1)
    assert four.max_window < four.line_rate * four.rtt_s


def test_gloo_opens_one_socket_whatever_the_parameters_say():
    params = default_params().with_network("tcp", streams=8)
    assert shipped_runtimes()["jax"].streams == 1
    assert shipped_runtimes()["jax"].applied_to(params).network("tcp").streams == 1
    assert shipped_runtimes()["pytorch"].applied_to(params).network("tcp").streams == 8  # NCCL: the parameters'


@pytest.mark.parametrize("bad", [0, 2000, 1.5, True, "4"])
def test_a_bad_runtime_streams_is_one_line(bad):
    with pytest.raises(GeosimError) as caught:
        runtime_from_table("jax", {"streams": bad}, "runtimes.toml")
    assert "jax.streams" in str(caught.value) and "\n" not in str(caught.value)


def shared_network(streams: int, competing: float, rate_bps: float = 1e9, rtt_s: float = 0.05):
    from geosim.inputs.scenario import gpu_catalog
    from geosim.sim.network.tcp import TCPNetwork
    from geosim.inputs.specs import Cluster, Host, Link
    from geosim.techniques._base import devices_of

    gpu = gpu_catalog()["A30"]
    cluster = Cluster("two", (Host("a", "s0", (gpu,)), Host("b", "s1", (gpu,))),
                      (Link("s0", "s1", rtt_s, rate_bps, window_bytes=64 * MIB, streams=streams,
                            competing_flows=competing),))
    params = default_params().with_network("tcp", collective_step_rtts=0.0, per_message_overhead_s=0.0)
    return TCPNetwork(type("Clock", (), {"now": 0.0})(), cluster, params, devices_of(cluster))


@pytest.mark.parametrize("streams, competing", [(1, 3.0), (4, 4.0), (20, 0.5)])
def test_competing_traffic_leaves_the_streams_their_fair_share(streams, competing):
    # 1 Gbit/s, 50 ms, windows far above the bandwidth-delay product: N streams among N + M flows
    route = shared_network(streams, competing).route(0, 1)
    share = streams / (streams + competing)
    assert route.max_window == pytest.approx(share * 1e9 / 8 * route.rtt_s, rel=1e-12)  # the RTT has the hosts' latency
    assert route.line_rate == 1e9 / 8  # the line is not slower: other connections of the run may use the rest


def test_more_streams_take_a_larger_share_and_none_is_the_link_it_was():
    windows = [shared_network(n, 10.0).route(0, 1).max_window for n in (1, 2, 5, 10, 40)]
    plain, alone = shared_network(4, 0.0).route(0, 1), shared_network(4, 1e-300).route(0, 1)
    assert windows == sorted(windows) and windows[-1] < plain.max_window
    assert plain.max_window == 1e9 / 8 * plain.rtt_s and alone.max_window == plain.max_window


def test_the_scenario_reads_competing_flows_and_refuses_bad_ones():
    from geosim.inputs.scenario import scenario_from_doc
    from tests.test_loss import scenario_doc

    assert scenario_from_doc(scenario_doc(competing_flows=7.5), "x.toml").cluster.links[0].competing_flows == 7.5
    assert scenario_from_doc(scenario_doc(), "x.toml").cluster.links[0].competing_flows == 0.0
    for bad in (-1, "many", True, 1e7):
        with pytest.raises(GeosimError) as caught:
            scenario_from_doc(scenario_doc(competing_flows=bad), "x.toml")
        assert "links[0].competing_flows" in str(caught.value) and "\n" not in str(caught.value)
