"""The second hardening round's battery (issue 27): each input a careless user or an attacker gave
that ended in a traceback, a silent accept or a wait without end, run through the real command
line. Every case must end in one line on stderr naming the flag or file, exit 2, nothing written.

In-process (geosim.cli.main) where the command returns at once; in a subprocess, with a timeout,
where a regression would hang (a FIFO) or where what matters is what the process imported (JAX).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from geosim.cli import build_parser, main
from geosim.cli import flag_bounds
from geosim.base.validate import FALLBACK, check_number, command_path, numeric_actions

FLAG_BOUNDS = flag_bounds()

ROOT = Path(__file__).resolve().parents[1]
HUGE = "9" * 400  # an integer beyond float range: math.isfinite raised OverflowError on it
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def run_in_process(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def assert_one_line_refusal(code: int, err: str, needle: str) -> None:
    assert code == 2, err
    assert "\n" not in err and "Traceback" not in err, err
    assert needle in err, err


# --- numbers: flags ---------------------------------------------------------------------------

FLAG_CASES = [
    (["predict", "--epochs", HUGE], "--epochs: must be <= 1e+06"),
    (["predict", "--global-batch", HUGE], "--global-batch: must be <= 1e+07"),
    (["predict", "--rtt-ms", "nan"], "--rtt-ms: must be a finite number"),
    (["predict", "--bandwidth-gbps", "inf"], "--bandwidth-gbps: must be a finite number"),
    (["predict", "--target-tokens", "nan"], "--target-tokens: must be a finite number"),
    (["predict", "--target-tokens", "inf"], "--target-tokens: must be a finite number"),
    (["predict", "--target-tokens", "1e309"], "--target-tokens: must be a finite number"),
    # checked also when no low-communication technique is shown (it was ignored then)
    (["predict", "--technique", "data", "--target-tokens", "-5"], "--target-tokens: must be > 0"),
    (["predict", "--technique", "data", "--target-tokens", "lots"], "--target-tokens: must be a token count"),
    (["predict", "--token-efficiency", "data=nan"], "--token-efficiency: expected TECHNIQUE=VALUE"),
    (["predict", "--token-efficiency", "diloco=inf"], "--token-efficiency: expected TECHNIQUE=VALUE"),
    (["predict", "--token-efficiency", "warp=0.5"], "--token-efficiency: unknown technique 'warp'"),
    (["predict", "--draws", "100000000"], "--draws: must be <= 10000"),
    (["plan", "--deadline", "0"], "--deadline: must be > 0"),
    (["plan", "--deadline", "9" * 400 + "h"], "--deadline: must be a finite number"),
    (["plan", "--sites", "all", "--gpus-per-host", "1000000"], "--gpus-per-host: must be <= 16"),
    (["plan", "--delta", "nan"], "--delta: must be a finite number"),
    (["trace", "--iterations", HUGE], "--iterations: must be <= 100"),
    (["sweep", "--set", "precision=fp8"], "--set precision: unknown precision 'fp8'"),
    (["sweep", "--set", f"epochs={HUGE}"], "--set epochs"),
    (["sweep", "--set", "global_batch=99999999999"], "--global-batch: must be <= 1e+07"),
    (["live", "probe", "--seconds", "nan", "--out", "x.toml"], "--seconds: must be a finite number"),
    (["live", "probe", "--seconds", "inf", "--out", "x.toml"], "--seconds: must be a finite number"),
    (["live", "probe", "--seconds", "0", "--out", "x.toml"], "--seconds: must be > 0"),
    (["live", "wan", "up", "--loss", "nan"], "--loss: must be a finite number"),
    # Ray retried an address where nothing listens for minutes, then another cluster
    (["live", "probe", "--ray-address", "127.0.0.1:1", "--out", "x.toml"], "--ray-address: nothing answers"),
]


@pytest.mark.parametrize("argv, needle", FLAG_CASES, ids=[" ".join(a)[:60] for a, _ in FLAG_CASES])
def test_a_bad_number_on_the_command_line_is_one_line(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written; if it were, not into the checkout
    code, _, err = run_in_process(argv, capsys)
    assert_one_line_refusal(code, err, needle)
    assert list(tmp_path.iterdir()) == []


def _every_subcommand_parser():
    parser = build_parser()
    todo = [((), parser)]
    while todo:
        path, p = todo.pop()
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield " ".join(path), p
        for sub in subs:
            todo += [((*path, name), child) for name, child in sub.choices.items()]


def test_every_numeric_flag_has_an_explicit_bound():
    """A new numeric flag must get its bound (and its reason) in its command module's FLAG_BOUNDS,
    which docs/reference/cli.md lists; the fallback only stops NaN, inf and absurd sizes."""
    parsers = list(_every_subcommand_parser())  # built once (it was rebuilt for every declared bound)
    missing = [f"{path} {flag}" for path, p in parsers for flag, _ in numeric_actions(p)
               if flag not in FLAG_BOUNDS.get(path, {})]
    assert missing == []
    stale = [f"{path} {flag}" for path, bounds in FLAG_BOUNDS.items() for flag in bounds
             if flag not in {f for q, p in parsers if q == path for f, _ in numeric_actions(p)}]
    assert stale == []
    for bounds in FLAG_BOUNDS.values():
        assert all(b.why and b.low <= b.high for b in bounds.values())


def test_every_default_is_within_its_bound():
    for path, p in _every_subcommand_parser():
        for flag, action in numeric_actions(p):
            if isinstance(action.default, (int, float)):
                FLAG_BOUNDS.get(path, {}).get(flag, FALLBACK).check(action.default, flag)


def test_command_path_follows_the_subcommands():
    parser = build_parser("live")
    args = parser.parse_args(["live", "run", "--lr", "0.1"])
    assert command_path(parser, args)[0] == "live run"


@pytest.mark.parametrize("value", [10**400, -10**400, float("nan"), float("inf"), True, "3"])
def test_check_number_refuses_what_is_not_a_finite_number_in_range(value):
    from geosim.base.errors import GeosimError

    with pytest.raises(GeosimError) as info:
        check_number(value, "f.toml", "key", 0, 1e300)
    assert len(info.value.line()) < 200  # a 400-digit value is shortened in the message


def test_the_bounds_leave_room_for_large_real_jobs():
    """Bounds refuse typos, never real work: 1,024 hosts and 8,192 GPUs in one scenario, 10,000 draws."""
    from geosim.inputs.scenario import MAX_GPUS, MAX_HOSTS

    assert MAX_HOSTS >= 1024 and MAX_GPUS >= 8192
    assert FLAG_BOUNDS["predict"]["--draws"].high >= 10_000
    assert FLAG_BOUNDS["live run"]["--gpus-per-host"].high >= 64
    assert FLAG_BOUNDS["plan"]["--gpus-per-host"].high >= 8


# --- numbers: files -----------------------------------------------------------------------------


def _scenario(tmp_path, rtt="20.0", extra=""):
    path = tmp_path / "s.toml"
    path.write_text(f'name = "s"\n[[hosts]]\nname = "vm1"\nsite = "A"\ngpus = ["T4"]\n[[hosts]]\nname = "vm2"\n'
                    f'site = "B"\ngpus = ["T4"]\n[[links]]\nbetween = ["vm1", "vm2"]\nrtt_ms = {rtt}\n'
                    f'bandwidth_gbps = 1.0\n{extra}')
    return path


def test_a_huge_integer_in_a_scenario_is_one_line(tmp_path, capsys):
    code, _, err = run_in_process(["predict", "--scenario", str(_scenario(tmp_path, rtt=HUGE))], capsys)
    assert_one_line_refusal(code, err, "links[0].rtt_ms: must be <= 100000")
    code, _, err = run_in_process(["predict", "--scenario",
                                   str(_scenario(tmp_path, extra=f"[workload]\nepochs = {HUGE}\n"))], capsys)
    assert_one_line_refusal(code, err, "workload.epochs: must be <= 1e+06")


def test_a_huge_integer_in_a_parameters_file_is_one_line(tmp_path, capsys):
    params = tmp_path / "p.toml"
    params.write_text(f"iteration_overhead_s = {{ data = {HUGE} }}\n")
    code, _, err = run_in_process(["predict", "--scenario", "utah-gpn", "--params", str(params)], capsys)
    assert_one_line_refusal(code, err, str(params))
    params.write_text(f"[pipeshard]\nintra_stage = \"data\"\n[zero2]\ngather_bytes_per_param = {HUGE}\n")
    code, _, err = run_in_process(["predict", "--scenario", "utah-gpn", "--params", str(params)], capsys)
    assert_one_line_refusal(code, err, "must be")


def test_a_huge_integer_in_a_run_record_is_one_line(tmp_path, capsys):
    runs = tmp_path / "runs.jsonl"
    assert main(["calibrate", "import", "study", "--records-out", str(runs)]) == 0
    capsys.readouterr()
    first, *rest = runs.read_text().splitlines()
    doc = json.loads(first)
    doc["workload"]["epochs"] = 10**400
    runs.write_text("\n".join([json.dumps(doc), *rest]) + "\n")
    code, _, err = run_in_process(["plan", "--records", str(runs), "--scenario", "tacc-tacc"], capsys)
    assert_one_line_refusal(code, err, f"{runs}:1: workload.epochs")


# --- silent accepts -------------------------------------------------------------------------------


@pytest.mark.parametrize("hosts, needle", [("vm1,vm1", "host(s) named twice: vm1"), ("", "empty host name"),
                                           ("vm1,", "empty host name")])
def test_trace_refuses_repeated_or_empty_hosts(hosts, needle, tmp_path, capsys):
    out = tmp_path / "t.json"
    code, _, err = run_in_process(["trace", "--scenario", "utah-gpn", "--hosts", hosts, "--out", str(out)], capsys)
    assert_one_line_refusal(code, err, f"--hosts: {needle}")
    assert not out.exists()


def test_calibrate_import_refuses_a_repeated_host(tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    code, _, err = run_in_process(["calibrate", "import", "alpa-console", str(ROOT / "tests" / "data" /
                                   "alpa-gpt-console.log"), "--scenario", "utah-gpn", "--hosts", "vm1,vm1",
                                   "--records-out", str(out)], capsys)
    assert_one_line_refusal(code, err, "--hosts: host(s) named twice: vm1")
    assert not out.exists()


def test_calibrate_fit_refuses_a_known_link_no_record_is_on(tmp_path, capsys):
    pytest.importorskip("scipy")
    runs, out = tmp_path / "runs.jsonl", tmp_path / "fitted.toml"
    assert main(["calibrate", "import", "study", "--records-out", str(runs)]) == 0
    capsys.readouterr()
    code, _, err = run_in_process(["calibrate", "fit", "--records", str(runs), "--out", str(out), "--known-links", "nowhere"],
                                  capsys)
    assert_one_line_refusal(code, err, "--known-links: no record is on 'nowhere'")
    assert not out.exists()


def test_sweep_out_never_makes_missing_parents(tmp_path, capsys):
    out = tmp_path / "missing" / "deeper" / "sweep"
    code, _, err = run_in_process(["sweep", "--scenario", "utah-gpn", "--technique", "data", "--rtt-ms", "1",
                                   "--workers", "1", "--no-best", "--sweep-dir", str(out)], capsys)
    assert_one_line_refusal(code, err, "--sweep-dir: no such directory")
    assert not (tmp_path / "missing").exists()


def test_live_validate_out_an_existing_file_is_one_line(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("mine\n")
    code, _, err = run_in_process(["live", "validate", "--records", str(tmp_path / "runs.jsonl"), "--out-dir", str(taken)],
                                  capsys)
    assert_one_line_refusal(code, err, "--out-dir: exists and is not a directory")
    assert taken.read_text() == "mine\n"


# --- live run: refused before JAX starts -----------------------------------------------------------

LIVE_RUN_CASES = [
    (["--lr", "-1"], "--lr: must be > 0"),
    (["--lr", "nan"], "--lr: must be a finite number"),
    (["--lr", "inf"], "--lr: must be a finite number"),
    (["--warmup", "-1"], "--warmup: must be >= 0"),
    (["--warmup", "1000", "--steps", "3"], "--warmup: must be fewer than the steps (3)"),
    (["--timeout", "nan"], "--timeout: must be a finite number"),
    (["--loss-curve-window", "0"], "--loss-curve-window: must be >= 1"),
    (["--process-id", "1"], "--process-id and --num-processes start processes by hand: they need --coordinator"),
    (["--num-processes", "2"], "they need --coordinator"),
    (["--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "2"], "--process-id: must be in 0..1"),
    (["--seed", "-1"], "--seed: must be >= 0"),
    (["--log-every", "0"], "--log-every: must be >= 1"),
    (["--gpus-per-host", "100000"], "--gpus-per-host: must be <= 512"),
    (["--steps", HUGE], "--steps: must be <= 1e+07"),
    (["--host-count", "100000"], "--host-count: must be <= 4096"),
    (["--ray-address", "127.0.0.1:1"], "--ray-address: nothing answers at 127.0.0.1:1"),
    (["--data", "/nonexistent/corpus.txt"], "--data: no such file"),
    (["--data", "/dev/null"], "--data: is a device, not a regular file"),
]


def test_live_run_refuses_bad_values_before_importing_jax():
    """One subprocess runs every case (each a call of the real entry point) and reports, per case, the
    exit code, stderr and whether JAX was imported: refusals cost no JAX start-up (10-16 s)."""
    cases = [["live", "run", *argv] for argv, _ in LIVE_RUN_CASES]
    code = ("import contextlib, io, json, sys\nfrom geosim.cli import main\nout = []\n"
            f"for argv in {cases!r}:\n"
            "    err = io.StringIO()\n"
            "    with contextlib.redirect_stderr(err):\n"
            "        rc = main(argv)\n"
            "    out.append([rc, err.getvalue(), 'jax' in sys.modules])\n"
            "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=ENV,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for (argv, needle), (rc, err, jax_loaded) in zip(LIVE_RUN_CASES, results):
        assert_one_line_refusal(rc, err.strip(), needle)
        assert not jax_loaded, argv


# --- hangs: inputs that are not regular files --------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["predict", "--scenario", "{fifo}"],
    ["trace", "--scenario", "{fifo}", "--out", "{tmp}/t.json"],
    ["calibrate", "fit", "--records", "{fifo}", "--out", "{tmp}/p.toml"],
    ["predict", "--scenario", "utah-gpn", "--params", "{fifo}"],
    ["plan", "--scenario", "utah-gpn", "--records", "{fifo}"],
    ["predict", "--scenario", "utah-gpn", "--technique", "diloco", "--loss-curves", "{fifo}"],
], ids=lambda argv: " ".join(a for a in argv[:2]) + (" " + argv[-2] if argv[-1] == "{fifo}" else ""))
def test_a_fifo_as_input_is_refused_not_waited_on(argv, tmp_path):
    """A subprocess with a timeout: reading a FIFO nobody writes blocks for ever."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    argv = [a.format(fifo=fifo, tmp=tmp_path) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "geosim", *argv], capture_output=True, text=True, timeout=60,
                          env=ENV, cwd=tmp_path)
    assert_one_line_refusal(proc.returncode, proc.stderr.strip(), f"{fifo}: is a FIFO, not a regular file")


def test_a_directory_as_input_is_one_line(tmp_path, capsys):
    code, _, err = run_in_process(["predict", "--scenario", str(tmp_path)], capsys)
    assert_one_line_refusal(code, err, "is a directory, not a file")


def test_the_bounds_page_is_up_to_date():
    """docs/reference/bounds.md lists every bound as the code applies it (tools/bounds_reference.py)."""
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bounds_reference.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
