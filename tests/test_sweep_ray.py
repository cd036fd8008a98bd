"""The Ray path: a local Ray instance runs the same points and finds the same crossover as one process."""

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
