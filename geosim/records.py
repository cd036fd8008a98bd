"""Run records: one measured (or imported) training run per JSON line.

The one schema shared by live/ (which writes records), calibrate/ (which fits on
them) and the selector (which reads measured probes). Documented in the README.
"""

from __future__ import annotations

import json
import os
import platform
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from geosim.errors import GeosimError

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
}
WORKLOAD_KEYS = ("tokens_per_epoch", "seq_len", "global_batch", "microbatches", "precision", "epochs", "checkpointing")


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
    measured: dict = field(default_factory=dict)  # subset of MEASURED_KEYS
    source: str = "live"  # fabric-slm-2026 | alpa-benchmark | alpa-log | live | simulated
    backend: str | None = None  # jax | alpa | None (unknown)
    collective_impl: str | None = None  # nccl | gloo | xla-cpu ...
    error: str | None = None
    note: str | None = None
    when: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    software: dict = field(default_factory=lambda: {"python": platform.python_version()})
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    schema: str = SCHEMA

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, sort_keys=True)


def validate(doc: object, where: str) -> RunRecord:
    """One decoded JSON line -> RunRecord, or a GeosimError naming line and key."""
    if not isinstance(doc, dict):
        raise GeosimError("a record must be a JSON object", source=where)
    known = set(RunRecord.__dataclass_fields__)
    for key in doc:
        if key not in known:
            raise GeosimError(f"unknown key (expected: {', '.join(sorted(known))})", source=where, key=key)
    for key in ("technique", "model", "status"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise GeosimError("missing or not a string", source=where, key=key)
    if doc.get("schema", SCHEMA) != SCHEMA:
        raise GeosimError(f"unsupported schema {doc['schema']!r} (this geosim reads {SCHEMA})", source=where, key="schema")
    if doc["status"] not in STATUSES:
        raise GeosimError(f"must be one of {', '.join(STATUSES)}, got {doc['status']!r}", source=where, key="status")
    if doc.get("scenario") is None and doc.get("cluster") is None:
        raise GeosimError("a record needs 'scenario' (name or path) or 'cluster' (inline)", source=where, key="scenario")
    workload = doc.get("workload", {})
    if not isinstance(workload, dict):
        raise GeosimError("must be an object", source=where, key="workload")
    for key, value in workload.items():
        if key not in WORKLOAD_KEYS:
            raise GeosimError(f"unknown workload key (expected: {', '.join(WORKLOAD_KEYS)})", source=where, key=f"workload.{key}")
        if key == "precision" and value not in ("fp16", "bf16", "fp32"):
            raise GeosimError(f"must be fp16, bf16 or fp32, got {value!r}", source=where, key="workload.precision")
        if key not in ("precision", "checkpointing") and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise GeosimError(f"must be a positive whole number, got {value!r}", source=where, key=f"workload.{key}")
    measured = doc.get("measured", {})
    if not isinstance(measured, dict):
        raise GeosimError("must be an object", source=where, key="measured")
    for key, value in measured.items():
        if key not in MEASURED_KEYS:
            raise GeosimError(f"unknown measured key (expected: {', '.join(MEASURED_KEYS)})", source=where, key=f"measured.{key}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise GeosimError(f"must be a number >= 0, got {value!r}", source=where, key=f"measured.{key}")
    if doc["status"] == "ok" and not ({"total_time_s", "time_per_iteration_s", "tflops_per_gpu", "tokens_per_s"} & set(measured)):
        raise GeosimError("an 'ok' record needs a time or a throughput", source=where, key="measured")
    hosts = doc.get("hosts")
    if hosts is not None and (not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts) or not hosts):
        raise GeosimError("must be a non-empty list of host names", source=where, key="hosts")
    return RunRecord(**doc)


def numbered_lines(path: str | Path):
    """(where, text) for each non-blank line of a text file; `where` is 'file:line'."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise GeosimError("no such file", source=str(path)) from None
    except OSError as exc:
        raise GeosimError(f"cannot read ({exc.strerror})", source=str(path)) from None
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield f"{path}:{number}", line


def json_lines(path: str | Path):
    """(where, decoded object) for each non-blank line of a JSON Lines file."""
    for where, line in numbered_lines(path):
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as exc:
            raise GeosimError(f"not valid JSON ({exc.msg} at column {exc.colno})", source=where) from None


def read_records(path: str | Path) -> list[RunRecord]:
    records = [validate(doc, where) for where, doc in json_lines(path)]
    if not records:
        raise GeosimError("no run records in file", source=str(path))
    return records


def append_record(path: str | Path, record: RunRecord) -> None:
    """Append one line with a single O_APPEND write, then fsync: concurrent writers never interleave
    and an interrupted writer leaves every earlier line intact."""
    line = (record.to_json() + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
        if written != len(line):  # regular files do not short-write; refuse to leave half a line
            os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_END) - written)
            raise OSError(f"short write to {path}")
        os.fsync(fd)
    finally:
        os.close(fd)


def write_records(path: str | Path, records: list[RunRecord]) -> None:
    """Replace a file with records, atomically (write a temporary file, then rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(r.to_json() + "\n" for r in records))
    os.replace(tmp, path)
