"""What a dead forwarder leaves behind is found by `status` and removed by `down`; a broken
state file is reported and recoverable; bad options are refused before anything is built."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from geosim.cli import main
from geosim.live.wan import emulator, netns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def geosim(*argv, state):
    env = dict(os.environ, GEOSIM_WAN_STATE=str(state))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "geosim", "live", "wan", *argv], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("argv, needle", [
    (["--rtt-matrix", "0,10;40,0"], "must be symmetric"),
    (["--bandwidth-gbps", "1e-9"], "--bandwidth-gbps: must be >= 0.0001"),
    (["--bandwidth-gbps", "1e9"], "--bandwidth-gbps: must be <= 100"),
    (["--bandwidth-gbps", "nan"], "--bandwidth-gbps: must be a finite number"),
])
def test_bad_options_are_one_line_before_anything_is_built(argv, needle, capsys):
    assert main(["live", "wan", "up", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Usage" not in err and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun"), reason="needs root and /dev/net/tun")
def test_sigkilled_forwarder_then_status_and_down(tmp_path):
    state = tmp_path / "state.json"
    up = geosim("up", "--rtt-ms", "2", "--ttl-s", "120", "--json", state=state)
    assert up.returncode == 0, up.stderr
    wan = emulator.WanSlice.from_dict(json.loads(up.stdout))
    sleeper = subprocess.Popen(wan.exec_argv(1, ["sleep", "300"]))  # a process inside a host
    try:
        time.sleep(0.3)
        os.kill(wan.forwarder_pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while emulator.forwarder_alive(wan.forwarder_pid, wan.id) and time.monotonic() < deadline:
            time.sleep(0.05)

        status = geosim("status", state=state)
        assert status.returncode == 1
        out = status.stdout
        assert "no WAN slice is up" in out and "geosim live wan down" in out
        assert f"state file {state} (slice {wan.id}): its forwarder is not running" in out
        for h in wan.hosts:
            assert h.namespace in out  # namespaces (and their /etc/netns entries) by name
        assert "/etc/netns entries" in out
        assert f"process {sleeper.pid} (sleep) still running in {wan.hosts[1].namespace}" in out
        assert json.loads(geosim("status", "--json", state=state).stdout) is None  # stdout stays the slice alone

        down = geosim("down", state=state)
        assert down.returncode == 0 and wan.id in down.stdout, down.stderr
        assert sleeper.wait(10) != 0  # stopped: it kept the namespace alive
        assert netns.namespaces(wan.id) == [] and netns.tap_links(wan.id) == []
        assert not any(os.path.exists(os.path.join(netns.NETNS_ETC, h.namespace)) for h in wan.hosts)
        assert not state.exists() and not os.path.exists(wan.log_path)
        after = geosim("status", state=state)
        assert after.returncode == 1 and after.stdout.strip() == "no WAN slice is up"
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
        emulator.down(str(state))


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun"), reason="needs root and /dev/net/tun")
def test_broken_state_file_is_reported_and_recoverable(tmp_path):
    state = tmp_path / "state.json"
    state.write_text('{"id": "abc123", "hosts": [')  # half a file
    status = geosim("status", state=state)
    assert status.returncode == 1 and "Traceback" not in status.stderr
    assert f"state file {state}: unreadable state file" in status.stdout
    up = geosim("up", "--rtt-ms", "1", state=state)
    assert up.returncode == 2 and up.stderr.count("\n") == 1
    assert "unreadable state file" in up.stderr and "geosim live wan down" in up.stderr
    down = geosim("down", state=state)
    assert down.returncode == 0 and not state.exists(), down.stderr
    try:
        up = geosim("up", "--rtt-ms", "1", "--ttl-s", "60", state=state)
        assert up.returncode == 0, up.stderr
        assert geosim("status", state=state).returncode == 0
    finally:
        assert geosim("down", state=state).returncode == 0
