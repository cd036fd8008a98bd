"""A sweep's directory: results.jsonl (the record), results.csv (the same rows, flat),
manifest.json (what produced them), crossovers.json.

results.jsonl is the source of truth. Each row is appended with one O_APPEND write
and the file is fsynced after every chunk, so an interrupted sweep keeps every row it
reported. On reopening, a half-written last line (a kill mid-write) is cut off and
results.csv is rebuilt from the JSONL rows, so the two never disagree.

One sweep at a time writes a directory: ResultStore.open takes an exclusive lock
(`DIR/.lock`, released when the sweep ends or dies) and a second sweep into the same
directory fails at once with a one-line error instead of writing duplicate rows. The
manifest keeps every grid run into the directory (`grids`), not only the last.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import os
from pathlib import Path

from geosim.base.errors import GeosimError
from geosim.base.input_limits import check_json_text, read_json_file
from geosim.studies.sweep.table import SweepTable
from geosim.base.fileio import csv_cell, locked, make_output_dir, output_error, write_atomic

SCHEMA = "geosim.studies.sweep.run/1"
RESULTS = "results.jsonl"
CSV_FILE = "results.csv"
MANIFEST = "manifest.json"
CROSSOVERS = "crossovers.json"
BEST = "best.json"  # the planner's best option at each RTT of each panel (studies/sweep/best.py)

# CSV columns, in order; the JSONL rows carry the same keys plus the point itself.
COLUMNS = (
    "scenario", "cluster", "technique", "model", "rtt_ms", "bandwidth_gbps", "gpu", "hosts",
    "wan_rtt_ms", "wan_bandwidth_gbps", "num_gpus", "gpus",
    "tokens_per_epoch", "seq_len", "global_batch", "microbatches", "precision", "epochs", "checkpointing",
    "status", "reason", "total_time_s", "time_per_epoch_s", "iteration_time_s", "first_iteration_s", "startup_s",
    "tflops_per_gpu", "tokens_per_s", "peak_memory_gib", "memory_verdict", "bytes_per_iteration",
    "run_compute_s", "run_exposed_comm_s", "run_bubble_s", "run_overhead_s",
    "iter_compute_s", "iter_exposed_comm_s", "iter_bubble_s", "iter_overhead_s",
    "description", "reference_slice", "wall_s", "key",
)


def fingerprint(obj) -> str:
    """A short stable hash of a dataclass tree (its repr is deterministic)."""
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


def _csv_line(row: dict) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(["" if row.get(c) is None else csv_cell(row.get(c)) for c in COLUMNS])
    return buffer.getvalue()


def _write_atomic(path: Path, text: str) -> None:
    write_atomic(path, text)


def _load_json(path: Path, what: str):
    try:
        return read_json_file(path)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GeosimError(f"{what} is corrupt ({exc}); move the directory away to start afresh, or use --fresh",
                          source=str(path)) from None


def read_rows(out_dir: str | Path, *, repair: bool = False) -> list[dict]:
    """The rows of results.jsonl, one per point (first wins). `repair` cuts a half-written tail."""
    return list(iter_rows(out_dir, repair=repair))


def count_lines(out_dir: str | Path) -> int:
    """Lines of results.jsonl, counted a megabyte at a time without parsing (a bound on its rows)."""
    path = Path(out_dir) / RESULTS
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


def iter_rows(out_dir: str | Path, *, repair: bool = False, unique: bool = True):
    """read_rows one row at a time, reading the file line by line (a million rows are never in memory at
    once). `unique` drops a repeated point's later rows, at the cost of a set of every key: a sweep,
    whose memory must not grow with its rows, passes False and drops repeats by its table instead."""
    path = Path(out_dir) / RESULTS
    if not path.exists():
        return
    size = path.stat().st_size
    with open(path, "r+b" if repair else "rb") as f:
        if size:
            f.seek(size - 1)
            if f.read(1) != b"\n":  # a half-written last line (a kill mid-write): cut it, or stop before it
                f.seek(0)
                keep = 0
                for line in iter(f.readline, b""):
                    if line.endswith(b"\n"):
                        keep += len(line)
                if repair:
                    f.truncate(keep)
                size = keep
        f.seek(0)
        seen, offset = set(), 0
        for number, raw in enumerate(iter(f.readline, b""), start=1):
            offset += len(raw)
            if offset > size:
                break
            line = raw.decode(errors="replace")
            if not line.strip():
                continue
            try:
                check_json_text(line, f"{path}:{number}")
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise GeosimError(f"not valid JSON ({exc.msg}); move the file away to start afresh",
                                  source=f"{path}:{number}") from None
            if not isinstance(row, dict) or not isinstance(row.get("key"), str):
                raise GeosimError("not a sweep row (no 'key'); move the file away to start afresh",
                                  source=f"{path}:{number}", key="key")
            if not unique:
                yield row
            elif row["key"] not in seen:
                seen.add(row["key"])
                yield row


def _manifest_text(manifest: dict) -> str:
    """One line per key: json's indented form is made by its Python encoder, a string object per token
    (~70 MB passing through for a grid of 100,000 RTTs); each line here is one call of the C encoder."""
    lines = (f"{json.dumps(k)}: {json.dumps(v, default=str, separators=(', ', ': '))}" for k, v in manifest.items())
    return "{\n" + ",\n".join(lines) + "\n}\n"


def read_manifest(out_dir: str | Path) -> dict | None:
    path = Path(out_dir) / MANIFEST
    if not path.exists():
        return None
    doc = _load_json(path, "the manifest")
    if not isinstance(doc, dict) or not isinstance(doc.get("scenarios", {}), dict):
        raise GeosimError("the manifest is not a sweep manifest; move the directory away or use --fresh",
                          source=str(path))
    return doc


def read_crossovers(out_dir: str | Path) -> list[dict]:
    path = Path(out_dir) / CROSSOVERS
    doc = _load_json(path, "the crossovers file") if path.exists() else []
    if not isinstance(doc, list):
        raise GeosimError("not a list of crossovers", source=str(path))
    return doc


def write_crossovers(out_dir: str | Path, crossovers: list[dict]) -> None:
    _write_atomic(Path(out_dir) / CROSSOVERS, json.dumps(crossovers, indent=1, allow_nan=False) + "\n")


def read_best(out_dir: str | Path) -> list[dict]:
    path = Path(out_dir) / BEST
    doc = _load_json(path, "the best-options file") if path.exists() else []
    if not isinstance(doc, list):
        raise GeosimError("not a list of best options", source=str(path))
    return doc


def write_best(out_dir: str | Path, best: list[dict]) -> None:
    _write_atomic(Path(out_dir) / BEST, json.dumps(best, indent=1, allow_nan=False) + "\n")


class ResultStore:
    """Append-only rows of one sweep directory. With a table (studies/sweep/table.py) it knows which
    points of the table's grid are done, records each row there and never writes a point twice."""

    def __init__(self, out_dir: str | Path, table: SweepTable | None = None):
        self.dir = Path(out_dir)
        self.table = table
        self._fds: list[int] = []
        self._lock = None

    def open(self, manifest: dict, fresh: bool = False) -> "ResultStore":
        make_output_dir(self.dir, "--sweep-dir")  # the directory, never its missing parents
        self._lock = locked(self.dir, wait=False, what="sweep directory")
        self._lock.__enter__()  # held until close(): a second sweep into this directory fails at once
        try:
            return self._open(manifest, fresh)
        except BaseException:
            self.close()
            raise

    def _open(self, manifest: dict, fresh: bool) -> "ResultStore":
        if fresh:
            self._check_ours()
            for name in (RESULTS, CSV_FILE, MANIFEST, CROSSOVERS, BEST):
                (self.dir / name).unlink(missing_ok=True)
        old = read_manifest(self.dir)
        grids = list(old.get("grids", [old["grid"]] if "grid" in old else [])) if old else []
        if manifest.get("grid") not in grids:
            grids.append(manifest.get("grid"))
        if old is not None:
            self._check_compatible(old, manifest)
            manifest = {**old, **manifest, "scenarios": {**old.get("scenarios", {}), **manifest["scenarios"]}}
        manifest["grids"] = grids  # every grid run into this directory; "grid" is the latest
        _write_atomic(self.dir / MANIFEST, _manifest_text(manifest))
        # one pass over the rows on disk: each is recorded in the table as the CSV is rebuilt from it
        resumed = (r for r in iter_rows(self.dir, repair=True, unique=False) if self._record(r))
        write_atomic(self.dir / CSV_FILE, itertools.chain([",".join(COLUMNS) + "\n"], map(_csv_line, resumed)))
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        try:
            self._fds = [os.open(self.dir / RESULTS, flags, 0o666), os.open(self.dir / CSV_FILE, flags, 0o666)]
        except OSError as exc:
            raise output_error(self.dir, exc, "cannot open its rows") from None
        return self

    def _check_ours(self) -> None:
        """--fresh deletes a sweep's files only in a directory a sweep made (its manifest says so): a
        results.jsonl or results.csv of something else, in a directory given by mistake, is left alone."""
        present = [n for n in (RESULTS, CSV_FILE, MANIFEST, CROSSOVERS, BEST) if (self.dir / n).exists()]
        if not present:
            return
        try:
            old = read_manifest(self.dir)
        except GeosimError:
            old = None
        if not isinstance(old, dict) or old.get("schema") != SCHEMA:
            raise GeosimError(f"not a directory geosim sweep made (no sweep manifest), so --fresh leaves its "
                              f"{', '.join(present)} alone; use another --sweep-dir", source=str(self.dir))
        for name in present:
            if (self.dir / name).is_symlink() or not (self.dir / name).is_file():
                raise GeosimError(f"{name} is not a regular file, so --fresh leaves it alone", source=str(self.dir))

    def _check_compatible(self, old: dict, new: dict) -> None:
        hint = f"use another --sweep-dir, or --fresh to discard the rows in {self.dir}"
        if old.get("schema") != SCHEMA:
            raise GeosimError(f"not a sweep directory of this geosim ({old.get('schema')!r}); {hint}", source=str(self.dir))
        if old.get("params") != new.get("params"):
            raise GeosimError(f"its rows were predicted with other simulator parameters; {hint}", source=str(self.dir))
        if old.get("network", "tcp") != new.get("network", "tcp"):  # directories from before --network: tcp
            raise GeosimError(f"its rows were predicted on the {old.get('network', 'tcp')} network backend, not "
                              f"{new.get('network', 'tcp')}; {hint}", source=str(self.dir))
        for name, print_ in new["scenarios"].items():
            if old.get("scenarios", {}).get(name, print_) != print_:
                raise GeosimError(f"scenario {name!r} changed since its rows were predicted; {hint}", source=str(self.dir))

    def append(self, rows: list[dict]) -> None:
        """One write per line (O_APPEND: a line is never split), then fsync: on disk once this returns."""
        jsonl_fd, csv_fd = self._fds
        for row in rows:
            index = self.table.index_of(row) if self.table is not None else None
            if index is not None and self.table.done(index):
                continue  # a point can come back twice only through a bug; never write it twice
            try:
                os.write(jsonl_fd, (json.dumps(row, separators=(",", ":"), allow_nan=False) + "\n").encode())
                os.write(csv_fd, _csv_line(row).encode())
            except OSError as exc:  # no space: the rows before this one are whole; a rerun resumes here
                raise output_error(self.dir / RESULTS, exc, "cannot append a row") from None
            if index is not None:
                self.table.record(index, str(row.get("status")), row.get(self.table.metric), row.get("estimated") or "")
        try:
            os.fsync(jsonl_fd)
            os.fsync(csv_fd)
        except OSError as exc:
            raise output_error(self.dir / RESULTS, exc, "cannot append a row") from None

    def _record(self, row: dict) -> bool:
        """False for a repeat of a point of the table's grid (the first row wins); rows of other grids
        run into this directory pass."""
        if self.table is None:
            return True
        index = self.table.index_of(row)
        if index is None:
            return True
        if self.table.done(index):
            return False
        self.table.record(index, str(row.get("status")), row.get(self.table.metric), row.get("estimated") or "")
        return True

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        if self._lock is not None:
            self._lock.__exit__(None, None, None)
            self._lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
