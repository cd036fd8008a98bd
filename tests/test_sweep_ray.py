"""The Ray path: a local Ray instance runs the same points and finds the same crossover as one process."""

import os

import pytest

from geosim.studies.crossover import crossovers
from geosim.studies.sweep.run import RayExecutor, SerialExecutor, run_sweep
from test_crossover import analytic_rtt_ms, synthetic_context
from test_sweep import GRID, _check_complete

pytestmark = pytest.mark.slow


def test_ray_executor_matches_one_process(tmp_path):
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    ctx = synthetic_context()
    executor = RayExecutor(ctx, "local", num_cpus=2)
    try:
        assert executor.workers == 2
        result = run_sweep(GRID, ctx, tmp_path / "ray", executor, progress=False)
        found = crossovers(result.rows, ctx, executor, "rtt_ms", ["data", "shard"])
    finally:
        executor.close()
    assert not ray.is_initialized()  # the instance we started is gone
    assert result.computed == len(GRID)
    _check_complete(tmp_path / "ray", GRID)
    serial = run_sweep(GRID, ctx, tmp_path / "serial", SerialExecutor(ctx), progress=False)
    times = {r["key"]: r["total_time_s"] for r in serial.rows}
    assert {r["key"]: r["total_time_s"] for r in result.rows} == times
    assert len(found) == 1 and found[0]["at"] == pytest.approx(analytic_rtt_ms(), rel=1.5e-3)


LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def test_a_local_ray_listens_only_on_loopback_in_a_private_temp_dir(tmp_path):
    """`geosim sweep --ray-address local`: every socket Ray's processes listen on (GCS, raylet, workers,
    dashboard and runtime-env agents) is on loopback, never 0.0.0.0 or ::; its session directory is
    private (mkdtemp, 0700) and gone after close (geosim/studies/sweep/local_ray.py)."""
    ray = pytest.importorskip("ray")
    psutil = pytest.importorskip("psutil")
    assert not ray.is_initialized()
    executor = RayExecutor(synthetic_context(), "local", num_cpus=1)
    temp = executor._temp
    try:
        assert run_sweep(GRID, synthetic_context(), tmp_path / "ray", executor, progress=False).computed == len(GRID)  # worker processes are up too
        me = psutil.Process()
        listening = [(p.name(), c.laddr.ip, c.laddr.port) for p in [me, *me.children(recursive=True)]
                     for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert len({name for name, _, _ in listening}) >= 3, listening  # gcs_server, raylet, a worker at least
        assert [x for x in listening if x[1] not in LOOPBACK] == []
        # Ray makes its own directory world-writable: the private parent (mkdtemp) keeps others out
        assert os.stat(temp).st_mode & 0o077 == 0 and os.path.basename(temp).startswith("geosim-ray-")
        assert os.listdir(temp) == ["r"] and os.path.isdir(os.path.join(temp, "r", "session_latest"))
    finally:
        executor.close()
    assert not ray.is_initialized() and not os.path.exists(temp)


@pytest.mark.slow
def test_a_killed_driver_takes_its_local_ray_with_it_and_home_is_not_touched():
    """SIGKILL of `geosim sweep --ray-address local`: the watchdog stops Ray's processes (GCS, raylet,
    dashboard and runtime-env agents) and removes the session directory; HOME, unusable here, is
    never needed (Ray's auth token stays in the environment)."""
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    pytest.importorskip("ray")
    from geosim.studies.sweep.local_ray import processes_naming

    short = tempfile.mkdtemp(prefix="g", dir="/tmp")  # Ray's socket paths have a length limit
    env = {**os.environ, "TMPDIR": short, "HOME": "/dev/null/no-home"}
    proc = subprocess.Popen([sys.executable, "-m", "geosim", "sweep", "--scenario", "utah-gpn,utah-mass,tacc-tacc",
                             "--rtt-ms", "1:200:400", "--ray-address", "local", "--sweep-dir", os.path.join(short, "sw"),
                             "--quiet", "--no-best"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        temp = None
        while time.monotonic() < deadline and proc.poll() is None:
            temps = [os.path.join(short, n) for n in os.listdir(short) if n.startswith("geosim-ray-")]
            if temps and os.path.isdir(os.path.join(temps[0], "r", "session_latest")) and processes_naming(temps[0]):
                temp = temps[0]
                break
            time.sleep(0.2)
        assert temp is not None, proc.stderr.read().decode() if proc.poll() is not None else "Ray never started"
        time.sleep(2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (processes_naming(temp) or os.path.exists(temp)):
            time.sleep(0.2)
        assert processes_naming(temp) == [] and not os.path.exists(temp)
    finally:
        if proc.poll() is None:
            proc.kill()
        import shutil

        shutil.rmtree(short, ignore_errors=True)
