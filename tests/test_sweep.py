"""The sweep engine: rows on disk, resume after an interruption, the CLI and the report."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import default_sigint
from geosim.cli import main
from geosim.base.errors import GeosimError
from geosim.inputs.records import RunRecord
from geosim.studies.sweep.run import LocalExecutor, SerialExecutor, make_context, run_sweep
from geosim.studies.sweep.grid import Grid, point_key
from geosim.studies.sweep.store import CSV_FILE, RESULTS, read_rows
from test_crossover import synthetic_context

GRID = Grid({"scenario": ["synthetic"], "technique": ["data", "shard"], "model": ["tiny"],
             "rtt_ms": [round(1 + i * 2.5, 3) for i in range(40)]})


def _lines(path):
    return path.read_text().splitlines()


def _check_complete(out, grid):
    """Every point exactly once, in both files, and nothing else."""
    jsonl = [json.loads(line) for line in _lines(out / RESULTS)]
    keys = [r["key"] for r in jsonl]
    assert len(keys) == len(set(keys)) == len(grid)
    assert set(keys) == {point_key(p) for p in grid.points()}
    csv_lines = _lines(out / CSV_FILE)
    assert len(csv_lines) == len(grid) + 1  # header
    assert sorted(line.rsplit(",", 1)[0] for line in csv_lines[1:]) == sorted(
        line.rsplit(",", 1)[0] for line in csv_lines[1:])  # parseable, one per row
    return jsonl


def test_rows_carry_the_full_breakdown(tmp_path):
    ctx = synthetic_context()
    result = run_sweep(GRID, ctx, tmp_path, SerialExecutor(ctx), progress=False)
    assert result.computed == len(GRID) and result.skipped == 0
    row = result.rows[0]
    assert row["status"] == "ok"
    parts = sum(row[f"run_{p}"] for p in ("compute_s", "exposed_comm_s", "bubble_s", "overhead_s"))
    assert parts == pytest.approx(row["total_time_s"], rel=1e-9)
    assert row["wan_rtt_ms"] == pytest.approx(row["rtt_ms"])
    _check_complete(tmp_path, GRID)


def test_interrupted_sweep_resumes_without_duplicates_or_losses(tmp_path):
    ctx = synthetic_context()
    executor = LocalExecutor(ctx, 2)

    def interrupt(done):
        raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            run_sweep(GRID, ctx, tmp_path, executor, progress=False, on_chunk=interrupt)
    finally:
        executor.close()
    on_disk = read_rows(tmp_path)
    assert 0 < len(on_disk) < len(GRID)
    assert len(_lines(tmp_path / RESULTS)) == len(on_disk)
    # a kill in the middle of a write leaves half a line: it is cut off and that point redone
    with open(tmp_path / RESULTS, "a") as f:
        f.write('{"key": "half a li')
    executor = LocalExecutor(ctx, 2)
    try:
        result = run_sweep(GRID, ctx, tmp_path, executor, progress=False)
    finally:
        executor.close()
    assert result.skipped == len(on_disk)
    assert result.computed == len(GRID) - len(on_disk)
    rows = _check_complete(tmp_path, GRID)
    again = run_sweep(GRID, ctx, tmp_path, SerialExecutor(ctx), progress=False)
    assert again.computed == 0 and len(again.rows) == len(GRID)
    fresh = {r["key"]: r["total_time_s"] for r in run_sweep(GRID, ctx, tmp_path / "fresh", SerialExecutor(ctx),
                                                              progress=False).rows}
    assert {r["key"]: r["total_time_s"] for r in rows} == fresh


def test_resume_refuses_rows_from_other_parameters(tmp_path):
    ctx = synthetic_context()
    run_sweep(GRID, ctx, tmp_path, SerialExecutor(ctx), progress=False)
    other = synthetic_context()
    other.params = other.params.with_values(lan_rtt_s=1.0)
    with pytest.raises(GeosimError, match="other simulator parameters"):
        run_sweep(GRID, other, tmp_path, SerialExecutor(other), progress=False)
    assert run_sweep(GRID, other, tmp_path, SerialExecutor(other), progress=False, fresh=True).computed == len(GRID)


@pytest.mark.slow
def test_ctrl_c_on_the_command_line_keeps_rows_and_a_rerun_finishes(tmp_path):
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "geosim", "sweep", "--scenario", "utah-gpn", "--technique", "zero2",
           "--rtt-ms", "0.1:150:x1.05", "--sweep-dir", str(out), "--workers", "2", "--quiet", "--no-best"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=default_sigint)
    deadline = time.monotonic() + 60
    while not (out / RESULTS).exists() or not (out / RESULTS).read_text():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "rerun the same command to resume" in err
    first = read_rows(out)
    assert 0 < len(first) < 150
    done = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["resumed"] == len(first) and summary["computed"] == 150 - len(first)
    keys = [json.loads(line)["key"] for line in _lines(out / RESULTS)]
    assert len(keys) == len(set(keys)) == 150


@pytest.mark.slow
def test_cli_sweep_and_report(tmp_path, capsys):
    out = tmp_path / "sw"
    rc = main(["sweep", "--scenario", "utah-gpn,tacc-tacc", "--technique", "data,pipeshard", "--model", "gpt2m,gpt2L",
               "--rtt-ms", "native,1:100:x10", "--sweep-dir", str(out), "--workers", "1", "--json", "--quiet", "--no-best"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["points"] == 2 * 2 * 2 * 4
    assert summary["statuses"].get("out-of-memory", 0) > 0  # gpt2L data parallel does not fit a T4
    assert summary["crossover_axis"] == "rtt_ms"
    record = RunRecord(technique="pipeshard", model="gpt2m", status="ok", scenario="utah-gpn",
                       measured={"total_time_s": 1800.0}, workload={"epochs": 2}, source="live")
    (tmp_path / "runs.jsonl").write_text(record.to_json() + "\n")
    assert main(["report", "--sweep-dir", str(out), "--json", "--records", str(tmp_path / "runs.jsonl")]) == 0
    written = json.loads(capsys.readouterr().out)
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "Crossovers on rtt_ms" in page
    for path in written["plots"]:
        assert os.path.getsize(path) > 5000
    # the study's Table II (UTAH-GPN and TACC-TACC, gpt2m, data and pipeshard) and the one record
    assert written["measured_points"] == 4 + 1


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert main(["sweep", "--rtt-ms", "10:1:5", "--sweep-dir", str(tmp_path)]) == 2
    assert "START must not exceed STOP" in capsys.readouterr().err
    assert main(["sweep", "--technique", "magic", "--sweep-dir", str(tmp_path)]) == 2
    assert "unknown technique 'magic'" in capsys.readouterr().err
    assert main(["report", "--sweep-dir", str(tmp_path / "nothing")]) == 2


def test_generated_cluster_points(tmp_path):
    grid = Grid({"scenario": ["scale:2x2x4:A30"], "technique": ["data", "pipeshard"], "model": ["gpt2m"],
                 "rtt_ms": [1.0, 50.0]})
    ctx = make_context(grid)
    rows = run_sweep(grid, ctx, tmp_path, SerialExecutor(ctx), progress=False).rows
    assert {r["num_gpus"] for r in rows} == {16}
    assert all(r["status"] == "ok" for r in rows)
    by = {(r["technique"], r["rtt_ms"]): r["total_time_s"] for r in rows}
    assert by[("data", 50.0)] > by[("data", 1.0)]


def test_a_resumed_sweep_summarises_as_a_fresh_one(tmp_path):
    """The summary reads the sweep's table (a status byte and a metric a point), filled from the rows on
    disk on resume: crossovers, orders and statuses come out as a sweep run in one go."""
    from geosim.studies.crossover import crossovers, orders_at_ends

    ctx = synthetic_context()

    def interrupt(done):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(GRID, ctx, tmp_path / "resumed", SerialExecutor(ctx), progress=False, on_chunk=interrupt)
    resumed = run_sweep(GRID, ctx, tmp_path / "resumed", SerialExecutor(ctx), progress=False)
    fresh = run_sweep(GRID, ctx, tmp_path / "fresh", SerialExecutor(ctx), progress=False)
    assert 0 < resumed.skipped < len(GRID) and resumed.computed == len(GRID) - resumed.skipped
    for result in (resumed, fresh):
        assert result.table.statuses() == {"ok": len(GRID)}
    summaries = [(crossovers(r.table, ctx, SerialExecutor(ctx), "rtt_ms", ["data", "shard"]),
                  orders_at_ends(r.table, "rtt_ms", "total_time_s")) for r in (resumed, fresh)]
    assert summaries[0] == summaries[1]
    (flip,) = summaries[0][0]
    assert (flip["faster_below"], flip["faster_above"]) == ("shard", "data")
    # the table's summary is the one the rows themselves give
    assert crossovers(fresh.rows, ctx, SerialExecutor(ctx), "rtt_ms", ["data", "shard"]) == summaries[1][0]


def test_chunks_are_made_as_asked_and_cover_each_point_once():
    """A million-point grid is never a list of points: its first chunk comes at once, in a few KB; a small
    grid's chunks hold every point not yet done exactly once."""
    import tracemalloc

    from geosim.studies.sweep.run import pending_chunks
    from geosim.studies.sweep.table import SweepTable

    big = Grid({"scenario": ["synthetic"], "technique": [f"t{i}" for i in range(10)], "model": ["tiny"],
                "rtt_ms": [1 + i / 1000 for i in range(100_000)]})
    table = SweepTable(big, "total_time_s")
    tracemalloc.start()
    try:
        first = next(pending_chunks(table, 32))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(first) == 32 and peak < 200_000
    table = SweepTable(GRID, "total_time_s")
    for index in range(0, len(GRID), 3):
        table.record(index, "ok", 1.0)
    seen = [point_key(p) for chunk in pending_chunks(table, 7) for p in chunk]
    expected = {point_key(table.point_at(i)) for i in range(len(GRID)) if i % 3}
    assert len(seen) == len(set(seen)) == len(expected) and set(seen) == expected
    assert {point_key(table.point_at(i)) for i in range(len(GRID))} == {point_key(p) for p in GRID.points()}


def test_rows_of_another_grid_are_not_this_grids_points():
    from geosim.studies.sweep.grid import make_point
    from geosim.studies.sweep.table import SweepTable

    grid = Grid({"scenario": ["s"], "technique": ["data"], "model": ["m"], "rtt_ms": ["native", 1.0, 2.0],
                 "checkpointing": [True, False]})
    table = SweepTable(grid, "total_time_s")
    for i in range(len(grid)):
        point = table.point_at(i)
        assert table.index_of({"point": point, "key": point_key(point)}) == i
    others = [make_point("s", "data", "m", rtt_ms=3.0, checkpointing=True),  # a value not swept
              make_point("s", "data", "m", rtt_ms=1.0, checkpointing=1),  # 1 is not True here
              make_point("s", "data", "m", rtt_ms=1.0, checkpointing=True, epochs=2),  # another grid's axis
              make_point("s", "data", "m", rtt_ms=1.0)]  # missing an axis
    for point in others:
        assert table.index_of({"point": point, "key": point_key(point)}) is None
    assert table.index_of({"point": ["not", "a", "point"], "key": "x"}) is None
