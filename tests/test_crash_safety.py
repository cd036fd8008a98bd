"""Crash-safe outputs: two sweeps into one directory, concurrent record appends, SIGKILL of a
sweep and of an appender, then resume; unique temporary files that never follow a symlink."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import default_sigint
from geosim.base.errors import GeosimError
from geosim.base.fileio import locked, write_atomic
from geosim.inputs.records import RunRecord, append_record, append_records, read_runs
from geosim.studies.sweep.grid import point_key
from geosim.studies.sweep.store import CSV_FILE, MANIFEST, RESULTS, ResultStore, read_manifest, read_rows

ROOT = Path(__file__).resolve().parents[1]
# run the CLI of this checkout in a child process (conftest maps geosim.calibrate to it)
CLI = [sys.executable, "-c", "import sys; sys.path.insert(0, 'tests'); import conftest; from geosim.cli import main; "
                             "sys.exit(main(sys.argv[1:]))"]


def record(i: int, writer: int = 0) -> RunRecord:
    return RunRecord(technique="data", model="gpt2", status="ok", scenario="utah-gpn", source="live",
                     measured={"time_per_iteration_s": 0.5 + i / 1000}, workload={"global_batch": 8},
                     note=f"writer {writer} run {i}")


def wait_for(predicate, proc, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# --- sweeps ---------------------------------------------------------------------------------

def test_a_second_writer_of_a_sweep_directory_is_refused_at_once(tmp_path):
    manifest = {"schema": "geosim.studies.sweep.run/1", "params": "p", "grid": {"rtt_ms": [1]}, "scenarios": {}}
    with ResultStore(tmp_path).open(manifest):
        with pytest.raises(GeosimError, match=r"another geosim \(pid \d+\) is writing this sweep directory"):
            ResultStore(tmp_path).open(manifest)
    with ResultStore(tmp_path).open({**manifest, "grid": {"rtt_ms": [2]}}):  # released on close
        pass
    assert read_manifest(tmp_path)["grids"] == [{"rtt_ms": [1]}, {"rtt_ms": [2]}]  # every writer's grid kept


def sweep_cmd(out: Path, rtts: str = "0.1:150:1.25") -> list[str]:
    return [sys.executable, "-m", "geosim", "sweep", "--scenario", "utah-gpn", "--technique", "zero2,data",
            "--rtt-ms", rtts, "--sweep-dir", str(out), "--workers", "1", "--quiet", "--crossover-axis", "none", "--json"]


@pytest.mark.slow
def test_two_concurrent_sweeps_into_one_directory_write_no_duplicates(tmp_path):
    out = tmp_path / "sweep"
    first = subprocess.Popen(sweep_cmd(out), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (out / RESULTS).exists(), first)
    second = subprocess.run(sweep_cmd(out), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert second.returncode == 2, second.stderr
    assert "is writing this sweep directory" in second.stderr and "\n" not in second.stderr.strip()
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    keys = [json.loads(line)["key"] for line in (out / RESULTS).read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 240


@pytest.mark.slow
def test_four_small_sweeps_at_once_never_crash_or_duplicate(tmp_path):
    out = tmp_path / "sweep"
    procs = [subprocess.Popen(sweep_cmd(out, "1:20:2"), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert all(code in (0, 2) for code, _ in results), results
    assert any(code == 0 for code, _ in results)
    for code, err in results:
        if code == 2:  # refused at once, in one line, never a traceback
            assert "is writing this sweep directory" in err and "Traceback" not in err
    keys = [json.loads(line)["key"] for line in (out / RESULTS).read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 20
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_a_killed_sweep_resumes_without_losses_or_duplicates(tmp_path, sig):
    out = tmp_path / "sweep"
    proc = subprocess.Popen(sweep_cmd(out), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_sigint)
    wait_for(lambda: (out / RESULTS).exists() and len((out / RESULTS).read_bytes().splitlines()) >= 10, proc)
    os.killpg(proc.pid, sig)
    proc.communicate(timeout=60)
    assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 130)
    kept = read_rows(out)
    assert 10 <= len(kept) < 240
    done = subprocess.run(sweep_cmd(out), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr  # the dead writer's lock went with it
    summary = json.loads(done.stdout)
    assert summary["resumed"] == len(kept) and summary["computed"] == 240 - len(kept)
    rows = [json.loads(line) for line in (out / RESULTS).read_text().splitlines()]
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)) == 240
    assert len((out / CSV_FILE).read_text().splitlines()) == 241  # header + the same rows
    assert json.loads((out / MANIFEST).read_text())["grids"]


# --- record files ---------------------------------------------------------------------------

def _append_many(path: str, writer: int, count: int) -> None:
    for i in range(count):
        append_records(path, [record(i, writer)])


@pytest.mark.parametrize("writers,each", [(4, 15), pytest.param(8, 50, marks=pytest.mark.slow)])
def test_concurrent_appends_lose_nothing_and_duplicate_nothing(tmp_path, writers, each):
    path = tmp_path / "runs.jsonl"
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_append_many, args=(str(path), w, each)) for w in range(writers)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(60)
        assert p.exitcode == 0
    runs = read_runs(path)
    assert len(runs) == writers * each
    assert {r.note for _, r in runs} == {f"writer {w} run {i}" for w in range(writers) for i in range(each)}
    assert append_records(path, [record(3, 2)]) == (0, 1)  # already there: not appended twice


@pytest.mark.slow
def test_concurrent_cli_imports_with_append_keep_every_record(tmp_path):
    sources = []
    for w in range(4):
        src = tmp_path / f"live{w}.jsonl"
        src.write_text("".join(record(i, w).to_json() + "\n" for i in range(100)))
        sources.append(src)
    out = tmp_path / "all.jsonl"
    procs = [subprocess.Popen(CLI + ["calibrate", "import", "live", str(s), "--records-out", str(out), "--append"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in sources]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    runs = read_runs(out)
    assert len(runs) == 400 and len({r.note for _, r in runs}) == 400


def _append_forever(path: str) -> None:
    i = 0
    while True:
        append_record(path, record(i))
        i += 1


def test_sigkill_of_an_appender_leaves_whole_lines_and_the_lock_free(tmp_path):
    path = tmp_path / "runs.jsonl"
    proc = multiprocessing.get_context("fork").Process(target=_append_forever, args=(str(path),))
    proc.start()
    deadline = time.monotonic() + 30
    while not path.exists() or path.read_bytes().count(b"\n") < 20:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    data = path.read_bytes()
    assert data.endswith(b"\n")  # one write per line: a kill never leaves half of one
    before = len(read_runs(path))
    with locked(path, wait=False):  # the killed writer's lock died with it
        pass
    append_record(path, record(10**6))
    assert len(read_runs(path)) == before + 1


# --- temporary files ------------------------------------------------------------------------

def test_atomic_writes_use_unique_temporary_files_and_never_follow_symlinks(tmp_path):
    target = tmp_path / "out.json"
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    for name in ("out.json.tmp", ".out.json.tmp"):  # the old fixed names, planted as symlinks
        (tmp_path / name).symlink_to(victim)
    write_atomic(target, "new")
    assert target.read_text() == "new" and victim.read_text() == "keep me"
    assert not target.is_symlink()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]
    assert leftovers == []
    (tmp_path / "runs.jsonl.lock").symlink_to(victim)
    with pytest.raises(GeosimError, match="lock file is a symbolic link"):
        with locked(tmp_path / "runs.jsonl"):
            pass
    assert victim.read_text() == "keep me"


def test_sweep_row_without_key_and_corrupt_manifest_are_one_line_errors(tmp_path):
    (tmp_path / RESULTS).write_text('{"a": 1}\n')
    with pytest.raises(GeosimError, match=r"results.jsonl:1: key: not a sweep row"):
        read_rows(tmp_path)
    (tmp_path / MANIFEST).write_text("{broken")
    with pytest.raises(GeosimError, match="the manifest is corrupt"):
        read_manifest(tmp_path)


def test_point_keys_are_stable():
    assert point_key({"b": 1, "a": 2}) == point_key({"a": 2, "b": 1})
