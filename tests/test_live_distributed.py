"""Multi-host runs on this machine: two JAX processes over loopback (gloo), and a
two-node local Ray cluster running the probe and a run. Slow: marked."""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geosim.inputs.records import read_records
from geosim.inputs.scenario import load_scenario

ENV = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
# The test cluster keeps Ray's token authentication on (Ray >= 2.5x): every `ray start`, driver
# and `geosim live` process gets the same token, and the nodes announce loopback addresses.
# Ray's own servers still listen on every interface: disabling authentication would open them.
ENV["RAY_AUTH_MODE"] = "token"
ENV["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
pytestmark = pytest.mark.slow


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_processes(technique, tmp_path):
    port = free_port()
    common = [sys.executable, "-m", "geosim", "live", "run", "--technique", technique, "--steps", "4", "--gpus-per-host", "1",
              "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    runs = tmp_path / f"{technique}.jsonl"
    procs = [subprocess.Popen(common + ["--process-id", str(i)] + (["--json", "--records-out", str(runs)] if i == 0 else []),
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    assert outs[1][0].strip() == ""  # only process 0 reports
    return json.loads(outs[0][0]), read_records(runs)


def test_two_processes_data_and_pipeshard_over_gloo(tmp_path):
    data, (data_record,) = two_processes("data", tmp_path)
    pipe, (pipe_record,) = two_processes("pipeshard", tmp_path)
    for doc, record in ((data, data_record), (pipe, pipe_record)):
        assert record.status == "ok" and record.collective_impl == "gloo"
        assert [h["name"] for h in record.cluster["hosts"]] == ["host0", "host1"]
        assert "2 process(es)" in record.note
        # what live validate reads: the fastest step, the process's CPU per step and the machine's load
        m = record.measured
        assert 0 < m["fastest_iteration_s"] <= m["time_per_iteration_s"] and m["cpu_per_iteration_s"] > 0
        assert m["load_before"] >= 0 and m["load_after"] >= 0 and m["cores"] == os.cpu_count()
    assert "2 stages" in pipe_record.note
    assert data["losses"] == pytest.approx(pipe["losses"], rel=2e-5)  # same model, same losses


@pytest.fixture
def ray_cluster(tmp_path):
    """A head and a worker node on this machine, each a `ray start --block` we own and stop by process group."""
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent))
    temp = Path("/tmp") / f"geosim-live-ray-{os.getpid()}"
    port = free_port()
    procs = []

    def start(*args):
        p = subprocess.Popen([ray_bin, "start", "--block", "--num-cpus", "1", "--disable-usage-stats",
                              "--node-ip-address", "127.0.0.1", *args], env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(p)

    try:
        start("--head", "--port", str(port), "--temp-dir", str(temp), "--include-dashboard", "false")
        address = f"127.0.0.1:{port}"
        import ray

        deadline = time.time() + 60
        while True:  # wait for the head, then add the second node
            probe = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address='{address}'); print(len(ray.nodes()))"],
                                   env=ENV, capture_output=True, text=True, timeout=60)
            if probe.returncode == 0 or time.time() > deadline:
                break
            time.sleep(1)
        start("--address", address)
        while time.time() < deadline + 60:
            probe = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address='{address}'); "
                                    "print(sum(n['Alive'] for n in ray.nodes()))"], env=ENV, capture_output=True, text=True)
            if probe.stdout.strip().endswith("2"):
                break
            time.sleep(1)
        else:
            pytest.fail("second Ray node did not join")
        del ray
        yield address
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_two_nodes_probe_and_run(ray_cluster, tmp_path):
    out = tmp_path / "slice.toml"
    probe = subprocess.run([sys.executable, "-m", "geosim", "live", "probe", "--ray-address", ray_cluster, "--out", str(out),
                            "--seconds", "0.5", "--streams", "2", "--pings", "5"], env=ENV, capture_output=True, text=True,
                           timeout=180)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert "rtt" in probe.stdout and f"wrote {out}" in probe.stdout
    cluster = load_scenario(out).cluster
    assert len(cluster.hosts) == 2 and len(cluster.links) == 1
    assert cluster.links[0].bandwidth_bps > 1e7 and cluster.links[0].rtt_s < 0.05

    runs = tmp_path / "runs.jsonl"
    run = subprocess.run([sys.executable, "-m", "geosim", "live", "run", "--ray-address", ray_cluster, "--technique", "data",
                          "--steps", "4", "--gpus-per-host", "1", "--scenario", str(out), "--records-out", str(runs)],
                         env=ENV, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    (record,) = read_records(runs)
    assert record.status == "ok" and record.collective_impl == "gloo" and record.scenario == str(out)
    assert "2 process(es)" in record.note
