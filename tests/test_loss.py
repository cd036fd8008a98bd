"""Loss and a token bucket's drops in the TCP model (geosim/sim/network/_loss.py): the response
functions against their published formulas worked by hand, and properties of the whole model
(more loss never faster, a smaller queue never faster, BBR never slower than CUBIC under loss)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosim.base.errors import GeosimError
from geosim.inputs.params import default_params
from geosim.inputs.scenario import gpu_catalog, scenario_from_doc
from geosim.sim.network._loss import (Congestion, cubic_window, loss_limited_rate, reno_window,
                                     shaper_utilization)
from geosim.sim.network.tcp import TCPNetwork
from geosim.inputs.specs import Cluster, Host, Link, Shaper
from geosim.techniques._base import devices_of

CUBIC = Congestion(mss_bytes=1448.0, cubic_c=0.4, cubic_beta=0.7, segments_per_ack=1, bbr=False, timeouts=True)


def test_reno_window_is_mathis():
    # sqrt(3 / (2 x 0.01)) = sqrt(150)
    assert reno_window(0.01) == pytest.approx(12.2474, rel=1e-5)
    assert reno_window(0.01, b=2) == pytest.approx(math.sqrt(75), rel=1e-12)


def test_cubic_window_is_rfc9438_section_5_1():
    # (0.4 x 3.7 / (4 x 0.3))^(1/4) = 1.05385; x 0.1^(3/4) = 0.177828; / 1e-4^(3/4) = x 1000
    assert cubic_window(1e-4, 0.1, CUBIC) == pytest.approx(1.05385 * 0.177828 * 1000, rel=1e-4)
    # at 1 ms and 1% loss the cubic term (1.05385 x 0.005623 / 0.031623 = 0.187) is below Reno's 12.2
    assert cubic_window(0.01, 0.001, CUBIC) == pytest.approx(reno_window(0.01), rel=1e-12)


def test_timeouts_follow_padhye():
    # p = 2%, RTT 50 ms, RTO 250 ms: W = max(1.05385 x 0.05^0.75 / 0.02^0.75, sqrt(75)) = max(2.0, 8.660) = 8.660
    # timeouts: 0.25 x min(1, 3 sqrt(0.0075)) x 0.02 x (1 + 32 x 0.0004) = 0.25 x 0.259808 x 0.02 x 1.0128
    w = math.sqrt(3 / (2 * 0.02))
    expected = 1448 / (0.05 / w + 0.25 * 3 * math.sqrt(3 * 0.02 / 8) * 0.02 * 1.0128)
    assert loss_limited_rate(0.02, 0.05, 0.25, CUBIC) == pytest.approx(expected, rel=1e-9)
    assert loss_limited_rate(0.02, 0.05, 0.25, CUBIC) < 1448 * w / 0.05  # timeouts cost something


def test_no_loss_and_bbr_are_not_loss_limited():
    assert loss_limited_rate(0.0, 0.05, 0.25, CUBIC) == math.inf
    bbr = Congestion(1448.0, 0.4, 0.7, 1, bbr=True, timeouts=True)
    assert loss_limited_rate(0.05, 0.05, 0.25, bbr) == math.inf
    assert shaper_utilization(1e6, 0.0, 1, 0.1, bbr) == 1.0


def test_a_deep_enough_queue_keeps_the_bucket_busy():
    # beta x (BDP + Q) >= BDP  <=>  Q >= BDP x 0.3 / 0.7
    assert shaper_utilization(1e6, 1e6 * 0.3 / 0.7 + 1, 1, 0.1, CUBIC) == 1.0
    assert shaper_utilization(1e6, 1e6 * 0.3 / 0.7 - 1e4, 1, 0.1, CUBIC) < 1.0


def test_the_saw_of_a_reno_friendly_flow_is_the_closed_form():
    # a tiny C leaves the Reno-friendly line: the window climbs linearly from 0.7 T to T = BDP + Q;
    # it spends (BDP - 0.7 T) / (0.3 T) of the cycle below the BDP, at (0.7 T + BDP) / 2 on average
    reno_like = Congestion(1448.0, 1e-6, 0.7, 1, bbr=False, timeouts=True)
    bdp, queue = 1e6, 0.1e6
    top = bdp + queue
    below = (bdp - 0.7 * top) / (0.3 * top)
    expected = below * (0.7 * top + bdp) / (2 * bdp) + (1 - below)
    assert shaper_utilization(bdp, queue, 1, 0.1, reno_like) == pytest.approx(expected, rel=1e-4)
    assert shaper_utilization(bdp, 0.0, 1, 0.1, reno_like) == pytest.approx(0.85, rel=1e-4)  # (0.7 + 1) / 2


def network(loss: float = 0.0, shaper: Shaper | None = None, rtt_s: float = 0.05, rate_bps: float = 1e9,
            streams: int | None = None, **transport):
    gpu = gpu_catalog()["A30"]
    cluster = Cluster("two", (Host("a", "s0", (gpu,)), Host("b", "s1", (gpu,))),
                      (Link("s0", "s1", rtt_s, rate_bps, shaper=shaper, loss=loss, streams=streams),))
    params = default_params().with_network("tcp", **{"collective_step_rtts": 0.0, "per_message_overhead_s": 0.0,
                                                     "window_bytes": 64 * 2**20, **transport})
    clock = type("Clock", (), {"now": 0.0})()
    return TCPNetwork(clock, cluster, params, devices_of(cluster))


def steady_seconds(net: TCPNetwork, nbytes: float = 200e6) -> float:
    """A warmed connection's time for nbytes (the window opened by an earlier transfer)."""
    end = net.send_at(0, 1, nbytes, False, "warm", 0.0)
    return net.send_at(0, 1, nbytes, False, "m", end) - end


def test_a_lossy_link_moves_at_the_response_functions_rate():
    net = network(loss=0.001)
    route = net.route(0, 1)
    rtt = route.rtt_s
    rate = loss_limited_rate(0.001, rtt, rtt + 0.2, net.settings.congestion)  # the shipped hosts' (SACK, RACK-TLP)
    assert route.max_window == pytest.approx(rate * rtt, rel=1e-12)
    nbytes = 200e6
    assert steady_seconds(net, nbytes) == pytest.approx(nbytes / rate + route.one_way_s, rel=1e-6)
    # streams x the rate, while under the line
    assert network(loss=0.001, streams=4).route(0, 1).max_window == pytest.approx(4 * rate * rtt, rel=1e-12)


def test_no_loss_and_no_shaper_is_the_link_it_was():
    plain, zero = network().route(0, 1), network(loss=0.0).route(0, 1)
    assert (plain.line_rate, plain.max_window, plain.initial_window) == (zero.line_rate, zero.max_window,
                                                                         zero.initial_window)
    assert plain.line_rate == 1e9 / 8


def test_a_shallow_bucket_idles_between_drops():
    # 50 Mbit/s, 200 ms: a BDP of 1.2 MB and a queue of 10 ms: the saw drops below the BDP
    shallow = network(shaper=Shaper(burst_bytes=0.0, queue_s=0.01), rtt_s=0.2, rate_bps=50e6)
    deep = network(shaper=Shaper(burst_bytes=0.0, queue_s=0.2), rtt_s=0.2, rate_bps=50e6)
    route = shallow.route(0, 1)
    bdp = route.line_rate * route.rtt_s
    keep = shaper_utilization(bdp, route.line_rate * 0.01, 1, route.rtt_s, CUBIC)
    assert 0.5 < keep < 1.0
    assert route.max_window == pytest.approx(keep * bdp, rel=1e-12)
    assert steady_seconds(shallow) > steady_seconds(deep)
    assert deep.route(0, 1).max_window > deep.route(0, 1).line_rate * deep.route(0, 1).rtt_s  # into its queue


@settings(max_examples=40, deadline=None)
@given(loss=st.floats(0.0, 0.2), more=st.floats(0.0, 0.2), rtt_ms=st.floats(0.1, 300.0),
       streams=st.integers(1, 16), nbytes=st.floats(1e3, 1e8))
def test_more_loss_is_never_faster(loss, more, rtt_ms, streams, nbytes):
    low, high = sorted((loss, more))
    a = network(loss=low, rtt_s=rtt_ms / 1e3, streams=streams)
    b = network(loss=high, rtt_s=rtt_ms / 1e3, streams=streams)
    assert b.send_at(0, 1, nbytes, False, "", 0.0) >= a.send_at(0, 1, nbytes, False, "", 0.0) * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(queue_ms=st.floats(0.0, 100.0), smaller=st.floats(0.0, 1.0), rtt_ms=st.floats(1.0, 300.0),
       streams=st.integers(1, 8), nbytes=st.floats(1e5, 1e8))
def test_shaped_is_never_faster_than_unshaped_nor_a_smaller_queue_than_a_larger(queue_ms, smaller, rtt_ms,
                                                                                 streams, nbytes):
    rtt = rtt_ms / 1e3

    def seconds(shaper):
        net = network(shaper=shaper, rtt_s=rtt, rate_bps=50e6, streams=streams)
        return steady_seconds(net, nbytes)

    line = seconds(None)
    big = seconds(Shaper(burst_bytes=0.0, queue_s=queue_ms / 1e3))
    small = seconds(Shaper(burst_bytes=0.0, queue_s=queue_ms * smaller / 1e3))
    assert big >= line * (1 - 1e-12)
    assert small >= big * (1 - 1e-12)


@settings(max_examples=30, deadline=None)
@given(loss=st.floats(1e-5, 0.2), rtt_ms=st.floats(1.0, 300.0), nbytes=st.floats(1e5, 1e8))
def test_bbr_is_never_slower_than_cubic_under_loss(loss, rtt_ms, nbytes):
    cubic = network(loss=loss, rtt_s=rtt_ms / 1e3)
    bbr = network(loss=loss, rtt_s=rtt_ms / 1e3, bbr=True)
    assert steady_seconds(bbr, nbytes) <= steady_seconds(cubic, nbytes) * (1 + 1e-12)


def scenario_doc(**link):
    return {"name": "lossy", "hosts": [{"name": "a", "site": "s0", "gpus": ["A30"]},
                                       {"name": "b", "site": "s1", "gpus": ["A30"]}],
            "links": [{"between": ["s0", "s1"], "rtt_ms": 20.0, "bandwidth_gbps": 1.0, **link}]}


def test_the_scenario_reads_a_links_loss():
    cluster = scenario_from_doc(scenario_doc(loss=0.005), "lossy.toml").cluster
    assert cluster.links[0].loss == 0.005
    assert scenario_from_doc(scenario_doc(), "lossy.toml").cluster.links[0].loss == 0.0


@pytest.mark.parametrize("bad", [-0.1, 0.6, "1%", True])
def test_a_bad_loss_is_one_line_naming_the_key(bad):
    with pytest.raises(GeosimError) as caught:
        scenario_from_doc(scenario_doc(loss=bad), "lossy.toml")
    message = str(caught.value)
    assert "links[0].loss" in message and "lossy.toml" in message and "\n" not in message


def test_a_bucket_on_the_senders_own_egress_never_drops_its_flows():
    # the WAN emulator shapes each namespace's egress: TCP small queues hold a local sender back
    shallow = Shaper(burst_bytes=0.0, queue_s=0.01)
    local = Shaper(burst_bytes=0.0, queue_s=0.01, at_sender=True)
    dropping = network(shaper=shallow, rtt_s=0.2, rate_bps=50e6).route(0, 1)
    held_back = network(shaper=local, rtt_s=0.2, rate_bps=50e6).route(0, 1)
    assert held_back.max_window > held_back.line_rate * held_back.rtt_s > dropping.max_window
    doc = scenario_doc(shaper={"burst_kib": 67, "at_sender": True})
    assert scenario_from_doc(doc, "s.toml").cluster.links[0].shaper.at_sender
    with pytest.raises(GeosimError) as caught:
        scenario_from_doc(scenario_doc(shaper={"burst_kib": 67, "at_sender": "yes"}), "s.toml")
    assert caught.value.key == "links[0].shaper.at_sender"


def test_without_timeouts_the_rate_is_the_window_per_round_trip():
    # SACK and RACK-TLP recovery (transport.loss_timeouts = false): Mathis's sqrt(3 / (2p)) segments a round trip
    sack = Congestion(1448.0, 0.4, 0.7, 1, bbr=False, timeouts=False)
    assert loss_limited_rate(0.02, 0.02, 0.22, sack) == pytest.approx(1448 * math.sqrt(75) / 0.02, rel=1e-12)
    assert loss_limited_rate(0.02, 0.02, 0.22, sack) > loss_limited_rate(0.02, 0.02, 0.22, CUBIC)
    route = network(loss=0.02, rtt_s=0.02, loss_timeouts=False).route(0, 1)
    assert route.max_window == pytest.approx(1448 * math.sqrt(75), rel=1e-12)  # the window itself: rate x RTT
