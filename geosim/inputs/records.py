"""Run records: one measured (or imported) training run per JSON line.

The one schema shared by live/ (which writes records), calibrate/ (which fits on
them) and the selector (which reads measured probes). Documented in
docs/reference/run-records.md (schema, validation, locks, appends and deduplication).
"""

from __future__ import annotations

import json
import os
import platform
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from geosim.base.errors import GeosimError
from geosim.base.fileio import append_lines, locked, write_atomic
from geosim.base.input_limits import LINE_MAX_BYTES, RECORDS_MAX_BYTES, check_json_text
from geosim.inputs.model_config import model_from_table
from geosim.inputs.scenario import check_number, make_workload, read_text

SCHEMA = "geosim.run/1"
STATUSES = ("ok", "out-of-memory", "failed", "interrupted")
MEASURED_KEYS = {
    "total_time_s": "wall-clock time of the whole run (all epochs), seconds",
    "time_per_iteration_s": "steady-state time per training iteration (warm-up excluded), seconds",
    "tflops_per_gpu": "Alpa's per-GPU TFLOP/s (alpa.util.compute_gpt_tflops)",
    "tokens_per_s": "training tokens per second, whole cluster",
    "peak_memory_gib": "peak device memory of the busiest GPU, GiB",
    "compile_time_s": "compilation / first-step time, seconds",
    "steps": "iterations measured",
    # how loaded the machine was (live runs): the simulator predicts an uncontended step
    "fastest_iteration_s": "fastest timed iteration (warm-up excluded), seconds: the least disturbed step",
    "cpu_per_iteration_s": "the process's CPU time per timed iteration (median; all its threads), seconds",
    "load_before": "the machine's 1-minute load average when the timed steps began",
    "load_after": "the machine's 1-minute load average when the timed steps ended",
    "cores": "CPU cores of the machine the run shared (os.cpu_count)",
    # live runs on the emulated WAN (live/wan/connections.py)
    "tcp_window_kib": "the TCP window the run's own connections were given, read with `ss`: the peer's advertised "
                      "window while data moved, or what was in flight while more waited, if less; KiB",
}
WORKLOAD_KEYS = ("tokens_per_epoch", "seq_len", "global_batch", "microbatches", "precision", "epochs", "checkpointing",
                 "runtime")


@dataclass
class RunRecord:
    technique: str  # data | zero2 | shard | pipeshard | ...
    model: str  # a catalog name (geosim/data/models.toml) or the name of model_dims
    status: str  # ok | out-of-memory | failed | interrupted
    scenario: str | None = None  # built-in scenario name or scenario file path
    cluster: dict | None = None  # or the scenario inline, in scenario-file form
    hosts: list[str] | None = None  # the VMs used; None = all hosts of the scenario
    model_dims: dict | None = None  # n_layer, n_embd, n_head, vocab, n_ctx for models not in the catalog
    workload: dict = field(default_factory=dict)  # subset of WORKLOAD_KEYS; absent = unknown
    options: dict | None = None  # the technique's settings for this run (predict's options), e.g. layer_split
    measured: dict = field(default_factory=dict)  # subset of MEASURED_KEYS
    source: str = "live"  # fabric-slm-2026 | alpa-benchmark | alpa-console | alpa-log | live | simulated
    backend: str | None = None  # jax | alpa | None (unknown)
    collective_impl: str | None = None  # nccl | gloo | xla-cpu ...
    error: str | None = None
    note: str | None = None
    when: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    software: dict = field(default_factory=lambda: {"python": platform.python_version()})
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    schema: str = SCHEMA

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, sort_keys=True, allow_nan=False)


# (lowest, highest) of each measured figure: a time of 0 would divide by zero in a fit, and a
# time of 1e-300 s is no measurement
MEASURED_RANGES = {
    "total_time_s": (1e-6, 1e10), "time_per_iteration_s": (1e-6, 1e8), "tflops_per_gpu": (1e-9, 1e7),
    "tokens_per_s": (1e-6, 1e13), "peak_memory_gib": (0.0, 1e5), "compile_time_s": (0.0, 1e8), "steps": (0, 1e12),
    "fastest_iteration_s": (1e-6, 1e8), "cpu_per_iteration_s": (0.0, 1e8), "load_before": (0.0, 1e6),
    "load_after": (0.0, 1e6), "cores": (1, 1e7), "tcp_window_kib": (1.0, 1e9),
}
OPTIONAL_STRINGS = ("scenario", "source", "backend", "collective_impl", "error", "note", "when", "run_id")


def _fail(problem: str, where: str, key: str | None = None):
    raise GeosimError(problem, source=where, key=key)


def validate(doc: object, where: str) -> RunRecord:
    """One decoded JSON line -> RunRecord, or a GeosimError naming line and key. Every field is
    checked for its type, and every number for a finite range, so what a fit reads is sound."""

    if not isinstance(doc, dict):
        _fail("a record must be a JSON object", where)
    known = set(RunRecord.__dataclass_fields__)
    for key in doc:
        if key not in known:
            _fail(f"unknown key (expected: {', '.join(sorted(known))})", where, key)
    for key in ("technique", "model", "status"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            _fail("missing or not a string", where, key)
    for key in OPTIONAL_STRINGS:
        if doc.get(key) is not None and (not isinstance(doc[key], str) or not doc[key]):
            _fail(f"must be a non-empty string, got {doc[key]!r:.60}", where, key)
    if doc.get("schema", SCHEMA) != SCHEMA:
        _fail(f"unsupported schema {doc['schema']!r:.60} (this geosim reads {SCHEMA})", where, "schema")
    if doc["status"] not in STATUSES:
        _fail(f"must be one of {', '.join(STATUSES)}, got {doc['status']!r:.60}", where, "status")
    if doc.get("scenario") is None and doc.get("cluster") is None:
        _fail("a record needs 'scenario' (name or path) or 'cluster' (inline)", where, "scenario")
    for key in ("cluster", "software", "options"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            _fail("must be an object", where, key)
    workload = doc.get("workload", {})
    if not isinstance(workload, dict):
        _fail("must be an object", where, "workload")
    for key in workload:
        if key not in WORKLOAD_KEYS:
            _fail(f"unknown workload key (expected: {', '.join(WORKLOAD_KEYS)})", where, f"workload.{key}")
    try:  # the same checks (types, ranges, microbatches dividing the batch) as a scenario's [workload]
        make_workload(workload, where)
    except GeosimError as exc:
        raise GeosimError(exc.problem, source=where, key=exc.key) from None
    dims = doc.get("model_dims")
    if dims is not None:
        if not isinstance(dims, dict):
            _fail("must be an object", where, "model_dims")
        model_from_table(str(doc["model"]), dims, where, "model_dims.")  # the shape's keys, as a scenario's
    measured = doc.get("measured", {})
    if not isinstance(measured, dict):
        _fail("must be an object", where, "measured")
    for key, value in measured.items():
        if key not in MEASURED_KEYS:
            _fail(f"unknown measured key (expected: {', '.join(MEASURED_KEYS)})", where, f"measured.{key}")
        check_number(value, where, f"measured.{key}", *MEASURED_RANGES[key], integer=key in ("steps", "cores"))
    if doc["status"] == "ok" and not ({"total_time_s", "time_per_iteration_s", "tflops_per_gpu", "tokens_per_s"} & set(measured)):
        _fail("an 'ok' record needs a time or a throughput", where, "measured")
    hosts = doc.get("hosts")
    if hosts is not None:
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
            _fail("must be a non-empty list of host names", where, "hosts")
        if len(set(hosts)) != len(hosts):
            _fail("names a host twice", where, "hosts")
    return RunRecord(**doc)


def _no_constants(name: str):
    raise ValueError(f"{name} is not a JSON number")


def content_key(record: RunRecord) -> str:
    """What makes two records the same run: everything but the id and the time of writing."""
    doc = {k: v for k, v in vars(record).items() if k not in ("run_id", "when") and v is not None}
    return json.dumps(doc, sort_keys=True, default=list)


def numbered_lines(path: str | Path):
    """(where, text) for each non-blank line of a text file; `where` is 'file:line'."""

    path = Path(path)
    for number, line in enumerate(read_text(path, RECORDS_MAX_BYTES, "run-records file").splitlines(), start=1):
        if line.strip():
            yield f"{path}:{number}", line


def json_lines(path: str | Path):
    """(where, decoded object) for each non-blank line of a JSON Lines file. NaN and Infinity,
    which Python's json would accept, are refused: they are not JSON."""
    for where, line in numbered_lines(path):
        try:
            if len(line) > LINE_MAX_BYTES:
                raise GeosimError(f"a line of {len(line):,} characters: no run record is that long; not parsed",
                                  source=where)
            check_json_text(line, where)
            yield where, json.loads(line, parse_constant=_no_constants)
        except json.JSONDecodeError as exc:
            raise GeosimError(f"not valid JSON ({exc.msg} at column {exc.colno})", source=where) from None
        except ValueError as exc:
            raise GeosimError(f"not valid JSON ({exc})", source=where) from None
        except RecursionError:
            raise GeosimError("not valid JSON (nested too deeply)", source=where) from None


def is_scenario_file(name: str) -> bool:
    """A record's `scenario` names a file (rather than a built-in scenario) when it looks like a path."""
    return name.endswith(".toml") or "/" in name or os.sep in name


def resolve_scenario(name: str, records_file: str | Path) -> str:
    """A scenario file path in a record is relative to the records file's directory (an absolute
    path stays as it is). Older records held paths relative to where the import ran: if the file is
    not beside the records but is there, that one is used."""
    if not is_scenario_file(name) or os.path.isabs(name):
        return name
    beside = Path(records_file).resolve().parent / name
    if not beside.exists() and Path(name).exists():
        return str(Path(name).resolve())
    return str(beside)


def scenario_for_file(name: str, records_file: str | Path) -> str:
    """How a record written into `records_file` stores a scenario the user named (relative to the
    current directory): a built-in name as it is, a file relative to the records file's directory."""
    if not is_scenario_file(name) and not Path(name).exists():
        return name
    target = Path(name).resolve()
    return os.path.relpath(target, Path(records_file).resolve().parent)


def read_runs(path: str | Path) -> list[tuple[str, RunRecord]]:
    """(file:line, record) for every record of a JSON Lines file, scenario paths resolved against
    the file's directory. An empty file, a run_id used twice, or the same run twice is an error."""
    runs, ids, contents = [], {}, {}
    for where, doc in json_lines(path):
        record = validate(doc, where)
        if record.run_id in ids:
            raise GeosimError(f"run_id {record.run_id!r} is also the run_id of {ids[record.run_id]}",
                              source=where, key="run_id")
        key = content_key(record)
        if key in contents:
            raise GeosimError(f"the same run as {contents[key]} (only run_id/when differ); remove one",
                              source=where)
        ids[record.run_id], contents[key] = where, where
        if record.scenario is not None:
            record.scenario = resolve_scenario(record.scenario, path)
        runs.append((where, record))
    if not runs:
        raise GeosimError("no run records in file (empty)", source=str(path))
    return runs


def read_records(path: str | Path) -> list[RunRecord]:
    return [r for _, r in read_runs(path)]


def append_record(path: str | Path, record: RunRecord) -> None:
    """Append one line with a single O_APPEND write under the file's lock, then fsync: concurrent
    writers never interleave and an interrupted writer leaves every earlier line intact."""

    with locked(path, what="records file"):
        append_lines(path, [record.to_json()])


def append_records(path: str | Path, records: list[RunRecord]) -> tuple[int, int]:
    """Append the records not already in the file (same run: see content_key), under the file's
    lock so that concurrent appends neither lose nor duplicate a record. Returns (appended, skipped)."""

    path = Path(path)
    with locked(path, what="records file"):
        existing = set()
        if path.exists() and path.stat().st_size:
            existing = {_existing_key(doc, where) for where, doc in json_lines(path)}
            data = path.read_bytes()
            if not data.endswith(b"\n"):  # a writer killed mid-line: end that line before appending
                append_lines(path, [""])
        new = []
        for record in records:
            key = content_key(record)
            if key not in existing:
                existing.add(key)
                new.append(record)
        append_lines(path, [r.to_json() for r in new])
    return len(new), len(records) - len(new)


def _existing_key(doc, where: str) -> str:
    """The content key of a line already in a file (checked fully only if it is not a record's shape:
    appending re-reads the whole file each time, so this must be quick)."""
    try:
        return content_key(RunRecord(**doc))
    except TypeError:
        return content_key(validate(doc, where))


def write_records(path: str | Path, records: list[RunRecord]) -> None:
    """Replace a file with records, atomically (a unique temporary file, then rename), under its lock."""

    with locked(path, what="records file"):
        write_atomic(path, "".join(r.to_json() + "\n" for r in records))
