"""Failures are recorded, never crashes: out of memory, and Ctrl-C keeping what was measured."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import default_sigint
from geosim.inputs.records import read_records

ENV = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}


@pytest.mark.slow
def test_out_of_memory_is_recorded(tmp_path):
    runs = tmp_path / "runs.jsonl"
    proc = subprocess.run([sys.executable, "-m", "geosim", "live", "run", "--technique", "data", "--steps", "3",
                           "--memory-limit-gib", "0.001", "--records-out", str(runs)], env=ENV, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "out-of-memory" in proc.stdout
    (record,) = read_records(runs)
    assert record.status == "out-of-memory" and "RESOURCE_EXHAUSTED" in record.error
    assert record.measured["steps"] == 0


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_measured(tmp_path):
    runs = tmp_path / "runs.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "geosim", "live", "run", "--technique", "data", "--steps", "100000",
                             "--log-every", "1", "--records-out", str(runs)], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        deadline = time.time() + 180
        for line in proc.stderr:  # wait for a few measured steps
            if line.startswith("step 6/") or time.time() > deadline:
                break
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    (record,) = read_records(runs)
    assert record.status == "interrupted" and record.measured["steps"] >= 6
    assert record.measured["time_per_iteration_s"] > 0 and "interrupted" in out
