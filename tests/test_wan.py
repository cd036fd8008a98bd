"""WAN emulator checks that need no root: validation, preconditions, the forwarding loop.

The forwarding loop is exercised on SOCK_SEQPACKET socket pairs, which keep frame
boundaries like a TAP does, so delay, switching, loss and ordering are tested for real.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from geosim.base.errors import GeosimError
from geosim.live.wan import emulator, forwarder, netns


def _frame(dst: int, payload: bytes = b"x" * 50) -> bytes:
    dst_mac = b"\xff" * 6 if dst < 0 else bytes.fromhex(netns.mac(dst).replace(":", ""))
    return dst_mac + bytes.fromhex(netns.mac(9).replace(":", "")) + b"\x08\x00" + payload


class Switch:
    """forward() running in a thread between `n` socket pairs; tests hold the far ends."""

    def __init__(self, delay_s, *, jitter_s=0.0, loss=0.0, run_s=3.0, seed=1):
        n = len(delay_s)
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(n)]
        self.ends = [a for a, _ in pairs]
        self._inner = [b for _, b in pairs]
        for s in self._inner:
            s.setblocking(False)
        self.stats = {}
        self.thread = threading.Thread(target=forwarder.forward, daemon=True, args=([s.fileno() for s in self._inner], delay_s),
                                       kwargs=dict(jitter_s=jitter_s, loss=loss, deadline=time.monotonic() + run_s,
                                                   mtu=1500, seed=seed, stats=self.stats))
        self.thread.start()

    def recv(self, i, timeout=1.0):
        self.ends[i].settimeout(timeout)
        try:
            return self.ends[i].recv(4096), time.monotonic()
        except TimeoutError:
            return None, time.monotonic()

    def close(self):
        self.thread.join(10)
        for s in self.ends + self._inner:
            s.close()


def test_forward_delays_each_pair_by_its_one_way_delay():
    sw = Switch([[0, 0.03, 0.01], [0.03, 0, 0.02], [0.01, 0.02, 0]], run_s=1.0)
    try:
        for src, dst, d in ((0, 1, 0.03), (1, 2, 0.02), (2, 0, 0.01)):
            t0 = time.monotonic()
            sw.ends[src].send(_frame(dst, b"hello"))
            data, t1 = sw.recv(dst)
            assert data == _frame(dst, b"hello")
            assert d - 0.001 <= t1 - t0 < d + 0.015
        for other in (0, 2):  # unicast went to host 1 only
            assert sw.recv(other, timeout=0.05)[0] is None
    finally:
        sw.close()


def test_forward_floods_broadcast_to_every_other_host():
    sw = Switch([[0, 0.005, 0.005]] * 3, run_s=0.6)
    try:
        sw.ends[0].send(_frame(-1))
        assert sw.recv(1)[0] == _frame(-1) and sw.recv(2)[0] == _frame(-1)
        assert sw.recv(0, timeout=0.05)[0] is None  # never back to the sender
    finally:
        sw.close()


def test_forward_loss_rate_and_jitter_never_reorders():
    sw = Switch([[0, 0.002], [0.002, 0]], jitter_s=0.0015, loss=0.3, run_s=1.5)
    try:
        for k in range(400):
            sw.ends[0].send(_frame(1, k.to_bytes(4, "big")))
        got = []
        while True:
            data, _ = sw.recv(1, timeout=0.3)
            if data is None:
                break
            got.append(int.from_bytes(data[14:18], "big"))
        assert got == sorted(got)  # jitter is clamped per pair: order kept
        assert 0.2 < 1 - len(got) / 400 < 0.4
    finally:
        sw.close()
    assert sw.stats["dropped"] == 400 - len(got)


@pytest.mark.parametrize("kwargs, key", [
    (dict(rtt_ms=-1), "--rtt-ms"),
    (dict(rtt_ms=float("nan")), "--rtt-ms"),
    (dict(loss=1.0), "--loss"),
    (dict(loss=-0.1), "--loss"),
    (dict(hosts=1), "--host-count"),
    (dict(hosts=2.5), "--host-count"),
    (dict(bandwidth_mbit=0), "bandwidth_mbit"),
    (dict(ttl_s=0), "--ttl-s"),
    (dict(rtt_ms=10, jitter_ms=6), "--jitter-ms"),
    (dict(rtt_ms=[[0, 10], [10, 0], [1, 1]]), "--rtt-matrix"),
    (dict(loss=0.1, offload=True), "--loss"),
    (dict(tcp_window_kib=0), "--tcp-window-kib"),
    (dict(tcp_window_kib="big"), "--tcp-window-kib"),
])
def test_bad_values_are_one_line_errors(kwargs, key, tmp_path):
    with pytest.raises(GeosimError) as err:
        emulator.up(state=str(tmp_path / "state.json"), **kwargs)
    assert err.value.key == key and "\n" not in err.value.line()
    assert not (tmp_path / "state.json").exists()


def test_not_root_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(GeosimError, match="needs root"):
        emulator.up(state=str(tmp_path / "s.json"))


def test_missing_tun_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns, "TUN_PATH", str(tmp_path / "no-tun"))
    with pytest.raises(GeosimError, match="no-tun is missing"):
        emulator.up(state=str(tmp_path / "s.json"))


def test_missing_ip_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns, "TUN_PATH", os.devnull)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GeosimError, match="'ip' command"):
        emulator.up(state=str(tmp_path / "s.json"))


def test_tcp_window_cap_sets_the_buffer_maxima():
    assert netns.tcp_buffers(8 << 20) == ("4096 131072 8388608", "4096 65536 8388608")
    assert netns.tcp_buffers(8 << 20, 64 * 1024) == ("4096 65536 65536", "4096 65536 65536")
    assert "net.ipv4.tcp_rmem=4096 131072 262144" in netns.sysctls(8 << 20, 256 * 1024)


def test_names_fit_linux_limits_and_hosts_file_maps_own_hostname():
    assert len(netns.tap_name("abcdef", 199)) <= 15
    assert netns.address(0) == "10.213.0.1" and netns.address(199) == "10.213.0.200"
    text = netns.hosts_file(1, 3)
    assert f"10.213.0.2 {os.uname().nodename} wan-host1" in text  # gloo resolves the machine's hostname
    assert "10.213.0.1 wan-host0" in text and "10.213.0.3 wan-host2" in text


def test_cli_import_is_light_and_parses():
    code = ("import sys, argparse; import geosim.live.wan.cli as c; p = argparse.ArgumentParser(); c.add_arguments(p);"
            "a = p.parse_args(['up', '--rtt-ms', '10', '--bandwidth-gbps', '0.2', '--host-count', '3', '--ttl-s', '60']);"
            "assert (a.rtt_ms, a.bandwidth_gbps, a.hosts, a.ttl_s) == (10, 0.2, 3, 60);"
            "assert not {'geosim.live.wan.emulator', 'geosim.live.wan.netns', 'subprocess'} & set(sys.modules), sys.modules.keys()")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_rejects_bad_matrix_before_touching_the_system():
    import argparse

    from geosim.live.wan import cli

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    with pytest.raises(GeosimError, match="rtt-matrix"):
        cli.run(p.parse_args(["up", "--rtt-matrix", "0,x;1,0"]))


def test_the_icmp_checksum_is_rfc_1071s():
    """RFC 1071's worked example: 00 01 f2 03 f4 f5 f6 f7 sums to 2ddf0, folds to ddf2, whose
    complement is 220d; a packet carrying its checksum sums to zero; an odd length pads a zero byte."""
    from geosim.live.wan.probe import icmp_checksum, icmp_echo_request

    assert icmp_checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D
    packet = icmp_echo_request(0x1234, 7, b"\0" * 48)
    assert packet[:2] == b"\x08\x00" and packet[4:8] == bytes.fromhex("12340007") and len(packet) == 56
    assert icmp_checksum(packet) == 0
    assert icmp_checksum(b"\x01") == icmp_checksum(b"\x01\x00")


def test_an_unknown_rtt_method_is_one_line():
    from geosim.live.wan.measure import measure_rtt

    class Slice:
        rtt_ms, jitter_ms = [[0, 1], [1, 0]], 0.0

    with pytest.raises(GeosimError, match="unknown RTT method 'tcp'"):
        measure_rtt(Slice(), method="tcp")
