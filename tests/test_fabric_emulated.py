"""`geosim fabric calibrate` end to end on the WAN emulator's namespaces standing in for a slice's VMs.

The same steps and commands as on FABRIC, through the same execute/upload/download seam:
a wheel of this checkout installed into each node's home, Ray started over the emulated data
plane, `geosim live probe`, one `geosim live run` per technique, the records brought home,
and `geosim calibrate fit` accepting them. What differs from FABRIC is only the seam's other
side (ip netns exec instead of fablib's SSH) and that the nodes share this machine's Python.
Needs root and /dev/net/tun; ~4 minutes on 2 cores.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geosim.inputs.records import read_records

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
    pytest.mark.skipif(not os.path.exists("/dev/net/tun"), reason="needs /dev/net/tun"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2"),
]
TECHNIQUES = ("data", "zero2", "shard", "pipeshard")


def geosim(*args, env, timeout):
    return subprocess.run([sys.executable, "-m", "geosim", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


def test_fabric_calibrate_on_the_emulated_slice(tmp_path):
    from geosim.live.wan.emulator import up

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["GEOSIM_WAN_STATE"] = str(tmp_path / "wan" / "state.json")  # our own slice, not anyone else's
    (tmp_path / "wan").mkdir()
    wan = up(rtt_ms=10, hosts=2, ttl_s=1200, state=env["GEOSIM_WAN_STATE"])
    try:
        out = tmp_path / "utah-mass.toml"
        made = geosim("fabric", "slice", "emulate", "--scenario", "scenarios/utah-mass.toml", "--wan-state",
                      env["GEOSIM_WAN_STATE"], "--out", str(out), "--json", env=env, timeout=60)
        assert made.returncode == 0, made.stderr
        doc = json.loads(made.stdout)
        assert [n["site"] for n in doc["nodes"]] == ["UTAH", "MASS"] and doc["service"] == "L2STS"
        assert doc["links"][0]["rtt_ms"] == 10

        args = ("fabric", "calibrate", str(out), "--steps", "4", "--gpus-per-host", "1", "--probe-seconds", "0.5")
        started = time.monotonic()
        run = geosim(*args, env=env, timeout=1500)
        assert run.returncode == 0, run.stderr[-4000:]
        workdir = tmp_path / "geosim-utah-mass-calibrate"
        records = read_records(workdir / "runs.jsonl")
        assert [r.technique for r in records] == list(TECHNIQUES)
        for r in records:
            assert r.status == "ok", (r.technique, r.error)
            assert r.collective_impl == "gloo" and "2 process(es)" in r.note
            assert r.measured["time_per_iteration_s"] > 0
        probed = (workdir / "probed.toml").read_text()
        assert "rtt_ms" in probed and "bandwidth_gbps" in probed
        # every node got its own install, in its own home
        for name in ("vm1", "vm2"):
            assert (tmp_path / "utah-mass.homes" / name / "geosim" / "lib" / "geosim" / "fabric" / "steps.py").is_file()
        first = time.monotonic() - started

        # resumable: a second run finds every step done and runs nothing
        again = geosim(*args, env=env, timeout=300)
        assert again.returncode == 0, again.stderr[-2000:]
        assert again.stderr.count("skipped") == 6 and "live run" not in again.stderr
        assert time.monotonic() - started - first < first / 2

        # the records are what `geosim calibrate fit` takes; four runs on one link cannot pin the per-link
        # window and step round trips as well, so those stay at their defaults here
        params = tmp_path / "params.toml"
        fit = geosim("calibrate", "fit", "--records", str(workdir / "runs.jsonl"), "--out", str(params), "--links", "none",
                     "--step-rtts", "none", "--overhead", "none", env=env, timeout=600)
        assert fit.returncode == 0, fit.stderr[-3000:] + fit.stdout[-3000:]
        assert "fitted" in fit.stdout and params.is_file()
        predicted = geosim("predict", "--scenario", str(workdir / "probed.toml"), "--params", str(params),
                           "--model", "tiny", env=env, timeout=120)
        assert predicted.returncode == 0, predicted.stderr
    finally:
        wan.down()  # ends every process left in the namespaces, Ray's included
        tag = hashlib.sha1(str((tmp_path / "geosim-utah-mass-calibrate").resolve()).encode()).hexdigest()[:6]
        for i in range(2):  # the Ray session directories of this slice's nodes (steps.Calibration.tag)
            for temp in glob.glob(f"/tmp/gray-{tag}-{i}-*"):
                shutil.rmtree(temp, ignore_errors=True)
