"""The window a run's own connections were given (live/wan/connections.py): `ss` parsing, which
samples count, and how the figure reaches the run's record and the simulator.

The root test samples a real transfer through a real slice; the others run anywhere."""

from __future__ import annotations

import os
import subprocess

import pytest

from geosim.live.experiments import validate as live_validate
from geosim.live.experiments import wan_runs
from geosim.live.wan.connections import ConnectionSampler, Sample, parse_ss
from geosim.inputs.records import validate
from test_live_wan_runs import fake_slice, local_record_doc

# `ss -tinH state established` in host 0 of a 25 ms slice during a data-parallel run (this
# machine, 2026-11-25; trimmed after bytes_received): a loopback socket of the coordinator, the
# coordinator's socket to host 1, and gloo's connection carrying the gradients
SS_OUTPUT = """\
0      0      10.213.0.1:35074 10.213.0.1:53929
\t bbr wscale:7,7 rto:212 rtt:8.202/11.386 ato:40 mss:32768 pmtu:65535 rcvmss:536 advmss:65483 cwnd:18 bytes_sent:2152 bytes_acked:2153 bytes_received:1802 snd_wnd:65536
0      0      10.213.0.1:53929 10.213.0.2:57460
\t bbr wscale:7,7 rto:232 rtt:30.111/10.279 ato:40 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:18 bytes_sent:1662 bytes_acked:1662 bytes_received:1863 snd_wnd:64128
0      85432  10.213.0.1:36045 10.213.0.2:51040
\t bbr wscale:7,7 rto:228 rtt:24.606/0.02 ato:40 mss:1448 pmtu:1500 rcvmss:1448 advmss:1448 cwnd:170 ssthresh:96 bytes_sent:9744248 bytes_acked:9658816 bytes_received:9729776 snd_wnd:101120
"""


def test_parse_ss_reads_each_socket_and_its_window():
    sockets = dict(parse_ss(SS_OUTPUT))
    assert len(sockets) == 3
    gloo = sockets[("10.213.0.1:36045", "10.213.0.2:51040")]
    # rcvmss and advmss are other fields than mss
    assert gloo == {"mss": 1448, "bytes_acked": 9658816, "bytes_received": 9729776, "snd_wnd": 101120}


def sampler_with(series: dict) -> ConnectionSampler:
    """series: key -> [(snd_wnd, bytes moved)] or [(snd_wnd, bytes moved, in flight, not sent)], a
    sample a second."""
    s = ConnectionSampler(fake_slice())
    s.samples = {key: [Sample(t, p[0], p[1], *p[2:]) for t, p in enumerate(points)] for key, points in series.items()}
    return s


def test_summary_takes_the_later_half_of_the_samples_where_data_moved_on_the_busy_connections():
    busy = [(64128, 0), (101120, 1e6), (101120, 1e6), (62976, 2e6), (62976, 3e6), (101120, 4e6), (61568, 5e6)]
    idle_peer = [(64128, 100), (64128, 200), (64128, 300)]  # the coordinator's socket: not the run's data
    s = sampler_with({(0, "10.213.0.1:1", "10.213.0.2:2"): busy, (0, "10.213.0.1:3", "10.213.0.2:4"): idle_peer})
    summary = s.summary()
    # intervals ending at samples 1-6; the later half ends at 4, 5, 6, and data moved in each; their time-mean
    assert summary["window_bytes"] == pytest.approx((62976 + 101120 + 61568) / 3)
    assert summary["samples"] == 3 and summary["connections"] == 1
    assert summary["blocked_samples"] == 0 and summary["in_flight_bytes"] is None


def test_what_tcp_keeps_in_flight_while_it_has_more_to_send_caps_the_window():
    # the send buffer full: 80 kB in flight with data waiting, under a 101120-byte advertised window
    # (the later half: samples 4-7; at 5 a message starts, its window still ramping; at 6 a
    # message's tail has nothing waiting)
    sending = [(101120, 1e6 * t, 20000 if t == 5 else 80000, 0 if t == 6 else 30000) for t in range(8)]
    summary = sampler_with({(0, "10.213.0.1:1", "10.213.0.2:2"): sending}).summary()
    assert summary["blocked_samples"] == 3 and summary["in_flight_bytes"] == 80000
    assert summary["window_bytes"] == 80000 and summary["advertised_bytes"] == 101120
    # fewer than MIN_BLOCKED such samples (short messages that rarely wait): the advertised window
    short = [(101120, 1e6 * t, 20000, 5000 if t == 7 else 0) for t in range(8)]
    summary = sampler_with({(0, "10.213.0.1:1", "10.213.0.2:2"): short}).summary()
    assert summary["in_flight_bytes"] is None and summary["window_bytes"] == 101120


def test_summary_is_none_without_a_sample_that_moved_data():
    assert sampler_with({}).summary() is None
    assert sampler_with({(0, "a:1", "b:2"): [(65536, 10), (65536, 10), (65536, 10)]}).summary() is None


def test_the_runs_own_window_becomes_the_capped_links_window_and_is_recorded():
    capped = fake_slice(rtt=25, bandwidth=1000)
    capped.extra = {"tcp_window_kib": 128.0}
    doc = wan_runs.to_wan_record(local_record_doc(), capped, {"window_bytes": 62976, "samples": 9, "connections": 2})
    assert doc["measured"]["tcp_window_kib"] == 61.5
    assert doc["cluster"]["links"][0]["window_mib"] == pytest.approx(61.5 / 1024, abs=1e-6)
    assert "61.5 KiB, read with ss" in doc["note"]
    validate(doc, "t")
    # the bulk-measured window validate passes never overrides the run's own
    again = live_validate.with_measured_rtt(doc, 25.1, 25, window_mib=93 / 1024)
    assert again["cluster"]["links"][0]["window_mib"] == doc["cluster"]["links"][0]["window_mib"]
    # a record without one (older runs) still takes the bulk figure
    old = wan_runs.to_wan_record(local_record_doc(), capped)
    assert "tcp_window_kib" not in old["measured"]
    assert live_validate.with_measured_rtt(old, 25.1, 25, window_mib=93 / 1024)["cluster"]["links"][0]["window_mib"] \
        == round(93 / 1024, 5)


def test_without_a_buffer_cap_the_window_is_recorded_but_the_link_keeps_its_buffers():
    doc = wan_runs.to_wan_record(local_record_doc(), fake_slice(rtt=25, bandwidth=1000),
                                 {"window_bytes": 3e6, "samples": 4, "connections": 2})
    assert doc["measured"]["tcp_window_kib"] == pytest.approx(2929.688, abs=1e-3)
    assert doc["cluster"]["links"][0]["window_mib"] == round(wan_runs.uncapped_window_bytes(
        fake_slice(rtt=25, bandwidth=1000)) / 2**20, 4)


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun")
                    or subprocess.run(["which", "ss"], capture_output=True).returncode != 0,
                    reason="needs root, /dev/net/tun and ss")
def test_sampled_window_is_what_a_window_bound_transfer_moves_per_round_trip(tmp_path):
    from geosim.live.wan import emulator
    from geosim.live.wan.measure import measure_throughput

    wan = emulator.up(state=str(tmp_path / "state.json"), rtt_ms=20, tcp_window_kib=64, ttl_s=120)
    try:
        sampler = ConnectionSampler(wan, interval_s=0.1).start()
        t = measure_throughput(wan, seconds=2.0)
        sampler.stop()
    finally:
        wan.down()
    summary = sampler.summary()
    assert summary is not None and summary["samples"] >= 5, summary
    assert summary["window_bytes"] <= 64 * 1024  # within the buffer cap
    # window-bound: the throughput is the window per round trip
    moved_per_rtt = t["mbit_steady"] * 1e6 / 8 * 0.020
    assert summary["window_bytes"] == pytest.approx(moved_per_rtt, rel=0.25), (summary, t)
