"""TCP as the hosts run it (issue 42 item 5): the window is a host property. A host a scenario writes that
states no tcp_window_mib opens its kernel's default ([transport] kernel_window_mib: Linux's tcp_rmem maximum
of 6 MiB, half advertised); FABRIC's VMs (hosts at FABRIC's sites: the study's slices) keep FABRIC's fitted
[transport] window_mib, which calibrate moves; a flow's window is the smaller of its two hosts'."""

from __future__ import annotations

import pytest

from geosim.inputs.params import default_params
from geosim.inputs.scenario import load_scenario
from geosim.sim.network.tcp import TCPNetwork, window_limits
from geosim.techniques._base import devices_of
from geosim.base.units import MIB


def scenario(tmp_path, sites: tuple[str, str], windows: tuple[str, str] = ("", ""), rtt_ms: float = 40.0):
    text = []
    for name, site, window in zip(("a", "b"), sites, windows):
        text += ["[[hosts]]", f'name = "{name}"', f'site = "{site}"', 'gpus = ["A100-80GB"]', window]
    text += ["[[links]]", f'between = ["{sites[0]}", "{sites[1]}"]', f"rtt_ms = {rtt_ms}", "bandwidth_gbps = 100"]
    path = tmp_path / "s.toml"
    path.write_text("\n".join(text) + "\n")
    return load_scenario(path).cluster


def window_of(cluster, params=None) -> float:
    params = params or default_params()
    net = TCPNetwork(None, cluster, params, devices_of(cluster))
    return net.route(0, 1).window_bytes


def test_the_kernel_default_is_linuxs_advertised_half_of_tcp_rmem():
    assert default_params().network("tcp").kernel_window_bytes == pytest.approx(6 * MIB / 2)


def test_a_host_a_user_writes_opens_its_kernels_window(tmp_path):
    cluster = scenario(tmp_path, ("east", "west"))
    assert all(h.kernel_window and h.tcp_window_bytes is None for h in cluster.hosts)
    assert window_of(cluster) == pytest.approx(3 * MIB)  # one stream (NCCL's default) x 3 MiB
    (limit,) = window_limits(cluster, default_params())
    assert limit.window_mib == pytest.approx(3.0) and "kernel default" in limit.setting
    assert limit.window_gbps == pytest.approx(3 * MIB * 8 / 0.040 / 1e9)


def test_fabric_vms_keep_the_fitted_window_and_calibrate_still_moves_it(tmp_path):
    """Hosts at FABRIC's sites (UTAH, STAR: the study's) are FABRIC VMs: transport.window_mib, and a fit that
    moves it moves them, while a user's host at a site of its own keeps its kernel's."""
    fabric = scenario(tmp_path, ("UTAH", "STAR"))
    assert not any(h.kernel_window for h in fabric.hosts)
    params = default_params()
    assert window_of(fabric, params) == pytest.approx(params.network("tcp").window_bytes)
    refit = params.with_network("tcp", window_bytes=5 * MIB)
    assert window_of(fabric, refit) == pytest.approx(5 * MIB)
    assert window_of(scenario(tmp_path, ("east", "west")), refit) == pytest.approx(3 * MIB)


def test_a_stated_window_wins_and_a_flow_takes_the_smaller_end(tmp_path):
    stated = scenario(tmp_path, ("east", "west"), ("tcp_window_mib = 16", "tcp_window_mib = 16"))
    assert not any(h.kernel_window for h in stated.hosts) and window_of(stated) == pytest.approx(16 * MIB)
    mixed = scenario(tmp_path, ("east", "west"), ("tcp_window_mib = 16", ""))
    assert window_of(mixed) == pytest.approx(3 * MIB)  # b's kernel default
    # a FABRIC VM and a host of one's own: the VM's fitted window is the smaller
    with_vm = scenario(tmp_path, ("UTAH", "west"))
    assert window_of(with_vm) == pytest.approx(default_params().network("tcp").window_bytes)


def test_the_studys_built_in_slices_are_fabric_vms():
    for name in ("utah-gpn", "utah-mass", "bris-star", "gat-amst", "tacc-tacc"):
        assert not any(h.kernel_window for h in load_scenario(name).cluster.hosts), name


def test_the_planner_compares_hosts_that_state_a_window_with_hosts_that_do_not(tmp_path, capsys):
    """A host's window is None where it states none: the planner's twin key sorted None against a number
    (a TypeError traceback); the mixed slice plans like any other."""
    from geosim.cli import main

    scenario(tmp_path, ("east", "west"), ("tcp_window_mib = 16", ""))
    assert main(["plan", "--scenario", str(tmp_path / "s.toml"), "--model", "gpt2-medium", "--top", "2"]) == 0
    assert "verdict" in capsys.readouterr().out
