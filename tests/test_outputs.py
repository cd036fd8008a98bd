"""Every file geosim writes goes through geosim/base/fileio.py (issue 36): it never replaces a device
or a FIFO, keeps a file's mode and honours the umask, turns a failing disk or stdout into one
line, cleans up on SIGTERM as on SIGINT, sweeps its own stale temporary files and neutralises
spreadsheet formulas. Each situation is built for real: a device node made with mknod where the
machine allows it (else a FIFO), ENOSPC on a small tmpfs where mount is allowed (else a write
that fails as a full disk would)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import run_cli

from geosim.base.errors import GeosimError
from geosim.base.fileio import append_lines, csv_cell, locked, sweep_stale_temporaries, write_atomic

ROOT = Path(__file__).resolve().parents[1]
TRACE = ("trace", "--scenario", "utah-gpn", "--iterations", "1")


def geosim(*args, cwd=None, timeout=120, umask=None, stdout=subprocess.PIPE, **kw):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    pre = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([sys.executable, "-m", "geosim", *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, cwd=cwd, env=env, preexec_fn=pre, **kw)


def geosim_here(*args, cwd, umask=None):
    """`geosim ARGS` in this process, in CWD and under UMASK: the same exit code, stdout and stderr as
    geosim() for a check that needs no process of its own (no signal, no closed or full stdout, no
    FIFO a hang would wait on), without a Python start and geosim's imports each."""
    old = os.umask(umask) if umask is not None else None
    try:
        with contextlib.chdir(cwd):
            code, out, err = run_cli(list(args))
    finally:
        if old is not None:
            os.umask(old)
    return subprocess.CompletedProcess(list(args), code, out, err)


def one_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def device_or_fifo(path: Path) -> str:
    """A character device like /dev/null (mknod c 1 3) where allowed, else a FIFO."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return "device"
    except (PermissionError, OSError):
        os.mkfifo(path)
        return "fifo"


@contextlib.contextmanager
def fifo_reader(path: Path):
    """Read a FIFO to its end in a thread; yields the bytes read (a list filled when the writer closes)."""
    got: list[bytes] = []

    def read():
        with open(path, "rb") as f:
            got.append(f.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    yield got
    thread.join(30)


# ---------------------------------------------------------------- devices, FIFOs, modes


def test_trace_into_a_device_or_fifo_writes_through_and_leaves_it_in_place(tmp_path):
    out = tmp_path / "out"
    kind = device_or_fifo(out)
    with (fifo_reader(out) if kind == "fifo" else contextlib.nullcontext([b"-"])) as got:
        proc = geosim(*TRACE, "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    mode = os.stat(out).st_mode
    assert (stat.S_ISCHR(mode) if kind == "device" else stat.S_ISFIFO(mode)), "the output was replaced"
    assert got and got[0], "nothing was written through"
    if kind == "fifo":
        assert json.loads(got[0])["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary file, no .lock


def test_a_fifo_without_reader_is_one_line_not_a_hang(tmp_path):
    out = tmp_path / "fifo"
    os.mkfifo(out)
    proc = geosim(*TRACE, "--out", str(out), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "no reader" in one_line(proc)
    assert stat.S_ISFIFO(os.stat(out).st_mode)


def test_records_into_a_device_leave_no_lock_beside_it(tmp_path):
    dev = tmp_path / "records"
    kind = device_or_fifo(dev)
    for append in ((), ("--append",)):
        with (fifo_reader(dev) if kind == "fifo" else contextlib.nullcontext([b"-"])) as got:
            proc = geosim("calibrate", "import", "study", "--records-out", str(dev), *append, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert got and got[0]
        assert stat.S_ISCHR(os.stat(dev).st_mode) or stat.S_ISFIFO(os.stat(dev).st_mode)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["records"]  # no records.lock, no temporary


def test_a_block_device_or_socket_is_refused_before_the_work(tmp_path):
    import socket

    sock_path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock_path))
    try:
        proc = geosim_here(*TRACE, "--out", str(sock_path), cwd=tmp_path)
        assert proc.returncode == 2 and "--out" in one_line(proc) and "socket" in proc.stderr
    finally:
        s.close()
    assert stat.S_ISSOCK(os.stat(sock_path).st_mode)


def test_an_existing_files_mode_is_kept_and_a_new_one_follows_the_umask(tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    os.chmod(kept, 0o600)
    assert geosim_here(*TRACE, "--out", str(kept), cwd=tmp_path).returncode == 0
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o600 and kept.stat().st_size > 2
    new = tmp_path / "new.json"
    assert geosim_here(*TRACE, "--out", str(new), cwd=tmp_path, umask=0o077).returncode == 0
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o600
    other = tmp_path / "other.json"
    assert geosim_here(*TRACE, "--out", str(other), cwd=tmp_path, umask=0o022).returncode == 0
    assert stat.S_IMODE(os.stat(other).st_mode) == 0o644


# ---------------------------------------------------------------- full disks, read-only places, stdout


@contextlib.contextmanager
def full_disk(tmp_path: Path):
    """A directory on a 64 KiB tmpfs, filled up; None where mount is not allowed."""
    where = tmp_path / "small"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
                      capture_output=True).returncode != 0:
        yield None
        return
    try:
        (where / "existing.json").write_text('{"kept": true}')
        fd = os.open(where / "filler", os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"x" * 4096)
        os.close(fd)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_no_space_is_one_line_and_the_old_file_is_kept(tmp_path, monkeypatch):
    with full_disk(tmp_path) as where:
        if where is not None:
            proc = geosim(*TRACE, "--out", str(where / "existing.json"), cwd=tmp_path)
            line = one_line(proc)
            assert proc.returncode == 2 and "no space left" in line and "existing.json" in line
            assert json.loads((where / "existing.json").read_text()) == {"kept": True}
            assert sorted(p.name for p in where.iterdir()) == ["existing.json", "filler"]  # no temporary left
            return
    # no mount here: the same failure, simulated where the bytes reach the disk
    existing = tmp_path / "existing.json"
    existing.write_text('{"kept": true}')

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(GeosimError, match="no space left"):
        write_atomic(existing, "x" * 1000)
    assert json.loads(existing.read_text()) == {"kept": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.json"]


def test_appending_to_a_full_disk_is_one_line(tmp_path, monkeypatch):
    target = tmp_path / "rows.jsonl"

    def no_space(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", no_space)
    with pytest.raises(GeosimError, match=r"rows\.jsonl: cannot append: no space left"):
        append_lines(target, ["{}"])


def test_a_plot_into_a_directory_or_a_missing_one_fails_before_the_fits(tmp_path):
    pytest.importorskip("scipy")
    (tmp_path / "adir").mkdir()
    for plot, why in ((tmp_path / "adir", "directory"), (tmp_path / "missing" / "x.png", "no such directory")):
        started = time.monotonic()
        proc = geosim_here("calibrate", "crossval", "--plot", str(plot), cwd=tmp_path)
        assert proc.returncode == 2 and "--plot" in one_line(proc) and why in proc.stderr
        assert time.monotonic() - started < 30  # refused before any fit (crossval itself takes minutes)


# an answer to print, in text and JSON: one technique's is answer enough for a closed or full stdout
# (every technique's took a second of CPU more each, for the same check)
ANSWER = ("predict", "--scenario", "utah-gpn", "--technique", "data")


def test_a_closed_stdout_is_one_line_not_an_answer_lost(tmp_path):
    for args in (ANSWER, (*ANSWER, "--json"), ("models", "--json")):
        proc = subprocess.run([sys.executable, "-m", "geosim", *args], stdin=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, timeout=120, cwd=tmp_path,
                              preexec_fn=lambda: os.close(1))
        assert proc.returncode == 2 and "stdout is closed" in one_line(proc), proc.stderr


def test_a_full_stdout_is_one_line(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    for args in (ANSWER, (*ANSWER, "--json")):
        with open("/dev/full", "w") as full:
            proc = geosim(*args, cwd=tmp_path, stdout=full)
        assert proc.returncode == 2 and "stdout: cannot write the answer: no space left" in one_line(proc)


def test_json_errors_are_one_json_document_on_stdout(tmp_path):
    proc = geosim("predict", "--scenario", "nowhere", "--json", cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 2 and doc["schema"] == "geosim.error/1" and doc["error"] in one_line(proc)
    proc = geosim("predict", "--global-batch", "x", "--json", cwd=tmp_path)
    assert proc.returncode == 2 and "--global-batch" in json.loads(proc.stdout)["error"]
    assert "usage" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- interruptions, leftovers, CSV


def test_sigterm_unwinds_like_sigint_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "slow.json"
    script = (
        "import os, sys, time\n"
        "from geosim.cli import _process\n"
        "from geosim.base import fileio\n"
        "_process.terminate_as_interrupt()\n"
        "os.fsync = lambda fd: time.sleep(60)  # a slow disk: SIGTERM arrives mid-write\n"
        "try:\n"
        f"    fileio.write_atomic({str(out)!r}, 'x' * 100000)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(143)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path)
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".slow.json.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.glob(".slow.json.*.tmp")), "the writer never started"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 143
    assert list(tmp_path.iterdir()) == []


def test_a_dead_writers_temporary_is_swept_a_live_ones_kept(tmp_path):
    out = tmp_path / "trace.json"
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".trace.json.{dead.pid}.abc123.tmp"
    stale.write_bytes(b"x" * 1000)
    running = tmp_path / f".trace.json.{os.getppid()}.def456.tmp"
    running.write_bytes(b"y")
    unrelated = tmp_path / ".other.json.1.abc.tmp"
    unrelated.write_bytes(b"z")
    write_atomic(out, "{}")
    assert not stale.exists() and running.exists() and unrelated.exists() and out.read_text() == "{}"
    assert sweep_stale_temporaries(out) == 0


def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised(tmp_path):
    assert [csv_cell(v) for v in ("=1+1", "+A1", "-2+3", "@SUM(A1)", "utah", 1.5, -2)] == \
        ["'=1+1", "'+A1", "'-2+3", "'@SUM(A1)", "utah", 1.5, -2]
    from geosim.studies.sweep.store import _csv_line

    assert _csv_line({"scenario": "=HYPERLINK(\"x\")", "technique": "data"}).startswith("\"'=HYPERLINK")


def test_a_lock_is_not_made_beside_a_fifo(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with locked(fifo):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


# ---------------------------------------------------------------- the writers

# Every place in geosim that writes a file by itself, not through geosim/base/fileio.py, and why.
RAW_WRITERS = {
    "geosim/base/fileio.py": "the one output module",
    "geosim/studies/sweep/store.py": "a sweep's rows appended with O_APPEND to files fileio made (errors via output_error)",
    "geosim/fabric/steps.py": "a wheel pip built in a temporary directory, moved into the workdir",
    "geosim/report/figures.py": "matplotlib renders into memory (BytesIO); the PNG goes through write_atomic",
    "geosim/fabric/choose_command.py": "JSON to stdout",
    "geosim/fabric/sites_command.py": "JSON to stdout",
    "live/cli.py": "opens the records file for appending to test that it can be (check_appendable), writes nothing",
    "live/wan/emulator.py": "the forwarder's log, a file mkstemp made",
    "live/wan/netns.py": "the TUN device and /etc/netns/<ns>/hosts of a namespace it made",
    "tools/refresh_docs_outputs.py": "a maintainer's tool rewriting docs pages",
}
_RAW = re.compile(r"open\([^)]*['\"](w|a|x|wb|ab|w\+)['\"]|write_text\(|write_bytes\(|os\.replace\(|os\.rename\(|"
                  r"shutil\.(copy|move)|O_WRONLY|O_CREAT|O_RDWR|\.savefig\(|json\.dump\(|os\.fdopen\([^)]*['\"]w")


def test_every_writer_is_the_output_module_or_listed_with_its_reason():
    found = set()
    for top in ("geosim", "calibrate", "live", "tools"):
        for path in (ROOT / top).rglob("*.py"):
            if _RAW.search(path.read_text()):
                found.add(str(path.relative_to(ROOT)))
    assert found == set(RAW_WRITERS), (f"new raw writers (use geosim.base.fileio): {sorted(found - set(RAW_WRITERS))}; "
                                       f"listed but gone: {sorted(set(RAW_WRITERS) - found)}")


def test_sigterm_to_a_command_is_one_line_and_under_json_one_document(tmp_path):
    """A long prediction (Megatron-LM's 76.1B layout on 1,024 A100s, about 12 s of CPU on two cores;
    planning 10 million sequences no longer lasts: its options are out of memory before any build)
    stopped with SIGTERM: exit 143, one line on stderr besides progress, and under --json the error
    object on stdout."""
    proc = subprocess.Popen([sys.executable, "-m", "geosim", "predict", "--scenario",
                             str(ROOT / "bench" / "clusters" / "a100-1x128.toml"), "--model", "megatron-76.1b",
                             "--global-batch", "1792", "--technique", "pipeshard", "--tensor-parallel", "8",
                             "--pipeline-parallel", "4", "--data-parallel", "32", "--microbatches", "56",
                             "--seq-len", "2048", "--remat", "--hosts", "all", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    # its announcement of the long row (an indented progress line) comes before minutes of simulating:
    # SIGTERM then arrives mid-work, without a guess at how long the start takes (a sleep of 4 s was)
    announced = proc.stderr.readline()
    assert announced.startswith("  ") and "pipeshard" in announced, announced
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    err = announced + err
    assert proc.returncode == 143, err
    assert json.loads(out) == {"schema": "geosim.error/1", "command": "predict", "error": "terminated", "exit": 143}
    lines = [line for line in err.splitlines() if not line.startswith("  ")]  # progress lines are indented
    assert lines == ["geosim predict: terminated"] and "Traceback" not in err


def test_sigterm_to_a_sweep_stops_its_workers_without_tracebacks(tmp_path):
    """The pool's workers are forked from a process whose SIGTERM unwinds: they must still die at
    once when the pool terminates them, not print a traceback each."""
    proc = subprocess.Popen([sys.executable, "-m", "geosim", "sweep", "--scenario", "utah-gpn", "--technique",
                             "data,zero2", "--rtt-ms", "1:200:0.1", "--workers", "2", "--sweep-dir", "sw", "--no-best"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not ((tmp_path / "sw" / "results.jsonl").exists()
                                               and (tmp_path / "sw" / "results.jsonl").stat().st_size):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "geosim sweep: terminated"
