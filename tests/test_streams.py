"""Parallel streams: how many TCP sockets a connection opens (a link's `streams`, the parameters'
transport.streams, a runtime's collective library) and what they buy on a window-limited, a
loss-limited and a shaped path, worked by hand."""

from __future__ import annotations

import pytest

from geosim.errors import GeosimError
from geosim.params import default_params
from geosim.runtime import runtime_from_table, shipped_runtimes
from geosim.sim.network.loss import Congestion, loss_limited_rate, shaper_utilization
from geosim.specs import Shaper
from tests.test_loss import network

CUBIC = Congestion(mss_bytes=1448.0, cubic_c=0.4, cubic_beta=0.7, segments_per_ack=1, bbr=False)
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
    route = network(loss=0.01, rtt_s=0.05, rate_bps=10e9, streams=streams).route(0, 1)
    one = loss_limited_rate(0.01, route.rtt_s, route.rtt_s + 0.2, CUBIC)
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
