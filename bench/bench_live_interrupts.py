"""How fast `geosim live run` stops, and what it leaves: medians of several runs.

    python bench/bench_live_interrupts.py [--repeats 3]

Figures: seconds from SIGINT to exit when the signal lands during the compilation and
during the steps (the record is checked to be `interrupted`), and seconds from start to
exit of a run the memory check refuses before allocating (gpt2-xl, 1 GiB limit).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
ENV["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, ENV.get("PYTHONPATH")) if p)


def run(extra, wait_for=None, record=None):
    argv = [sys.executable, "-m", "geosim", "live", "run", "--log-every", "1", "--gpus-per-host", "2",
            "--records-out", record, *extra]
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sent = None
    if wait_for:
        for line in proc.stderr:
            if line.startswith(wait_for):
                sent = time.monotonic()
                proc.send_signal(signal.SIGINT)
                break
    proc.communicate(timeout=300)
    end = time.monotonic()
    with open(record) as f:
        doc = json.loads(f.read().splitlines()[-1])
    return end - (sent or started), proc.returncode, doc["status"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cases = {"SIGINT during compilation": (["--steps", "100000"], "compiling "),
             "SIGINT during steps": (["--steps", "100000"], "step 5/"),
             "memory refused (gpt2-xl, 1 GiB)": (["--model", "gpt2-xl", "--memory-limit-gib", "1", "--steps", "2"], None)}
    with tempfile.TemporaryDirectory() as tmp:
        for label, (extra, wait_for) in cases.items():
            times, outcomes = [], set()
            for i in range(args.repeats):
                seconds, code, status = run(extra, wait_for, os.path.join(tmp, f"{i}-{len(label)}.jsonl"))
                times.append(seconds)
                outcomes.add((code, status))
            print(f"{label:<34} median {statistics.median(times):6.2f} s (min {min(times):.2f}, max {max(times):.2f}; "
                  f"{args.repeats} runs)  exit/status {sorted(outcomes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
