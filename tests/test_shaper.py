"""Rate-limited links (geosim.inputs.specs.Shaper): a token bucket's rate, burst and queue in the TCP model,
checked against the hand-derived time of one message (the probes of live/wan/measure.py measure the
same thing on the WAN emulator: docs/results/2026-11-25-runtime-validation.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from geosim.base.errors import GeosimError
from geosim.inputs.params import default_params
from geosim.inputs.scenario import gpu_catalog, scenario_from_doc
from geosim.sim.network.tcp import TCPNetwork
from geosim.inputs.specs import Cluster, Host, Link, Shaper
from geosim.techniques._base import devices_of

RATE = 50e6  # bit/s
BURST = 68564.0  # the emulator's tbf bucket at 50 Mbit/s with offload (live/wan/netns.tbf_burst_bytes)


def network(shaper: Shaper | None, rtt_s: float = 0.01):
    gpu = gpu_catalog()["A30"]
    cluster = Cluster("two", (Host("a", "s0", (gpu,)), Host("b", "s1", (gpu,))),
                      (Link("s0", "s1", rtt_s, RATE, shaper=shaper),))
    params = default_params().with_network("tcp", collective_step_rtts=0.0, per_message_overhead_s=0.0,
                                           window_bytes=64 * 2**20)
    clock = type("Clock", (), {"now": 0.0})()
    return TCPNetwork(clock, cluster, params, devices_of(cluster))


def test_goodput_is_the_rate_times_payload_per_frame():
    assert Shaper(burst_bytes=0).goodput_fraction == pytest.approx(1448 / 1514)
    assert Shaper(burst_bytes=0, mtu=9000).goodput_fraction == pytest.approx(8948 / 9014)


def test_a_message_after_idle_pays_the_rate_beyond_its_burst():
    shaper = Shaper(burst_bytes=BURST)
    net = network(shaper)
    route = net.route(0, 1)
    goodput = RATE / 8 * shaper.goodput_fraction
    assert route.line_rate == pytest.approx(goodput)
    # a long-warmed connection (its window past the bandwidth-delay product), then a long idle
    net.send_at(0, 1, 50e6, False, "warm", 0.0)
    start = 100.0
    nbytes = 6.6e6
    arrival = net.send_at(0, 1, nbytes, False, "m", start)
    burst_payload = BURST * shaper.goodput_fraction
    expected = (nbytes - burst_payload) / goodput + route.one_way_s
    assert arrival - start == pytest.approx(expected, rel=0.02)
    # back to back (sent as the link falls free), the bucket is empty: the whole message at the rate
    free = arrival - route.one_way_s
    again = net.send_at(0, 1, nbytes, False, "m2", free)
    assert again - free == pytest.approx(nbytes / goodput + route.one_way_s, rel=1e-9)


def test_an_unshaped_link_is_the_line_it_was():
    net = network(None)
    assert net.route(0, 1).line_rate == RATE / 8
    assert net.route(0, 1).burst_bytes == 0


def test_the_window_grows_into_the_shaper_queue():
    shaper = Shaper(burst_bytes=BURST, queue_s=0.05)
    route = network(shaper).route(0, 1)
    bdp = route.line_rate * route.rtt_s
    assert route.max_window == pytest.approx(bdp + route.line_rate * 0.05 + BURST * shaper.goodput_fraction)
    line = network(None).route(0, 1)
    assert line.max_window == pytest.approx(line.line_rate * line.rtt_s)


def _doc(shaper):
    return {"name": "x", "hosts": [{"name": "a", "site": "s0", "gpus": ["A30"]}, {"name": "b", "site": "s1", "gpus": ["A30"]}],
            "links": [{"between": ["s0", "s1"], "rtt_ms": 10, "bandwidth_gbps": 0.05, "shaper": shaper}]}


def test_a_scenario_states_a_shaper_and_bad_values_are_one_line():
    link = scenario_from_doc(_doc({"burst_kib": 67, "queue_ms": 50}), "s.toml").cluster.links[0]
    assert link.shaper == Shaper(burst_bytes=67 * 1024, queue_s=0.05, mtu=1500)
    with pytest.raises(GeosimError) as exc:
        scenario_from_doc(_doc({"burst_kib": -1}), "s.toml")
    assert exc.value.key == "links[0].shaper.burst_kib"
    with pytest.raises(GeosimError) as exc:
        scenario_from_doc(_doc({"queue_ms": 5}), "s.toml")
    assert exc.value.key == "links[0].shaper.burst_kib" and exc.value.problem == "missing"
