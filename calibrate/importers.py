"""Importers: the study's measurements, Alpa's benchmark TSV and Alpa's GPT-2 training log -> run records.

Every importer returns geosim.inputs.records.RunRecord objects (schema geosim.run/1), so a
fit reads them exactly as it reads what live/ writes. Alpa's files do not say which
slice they ran on, so their importers take the scenario (and what else the file
lacks) as arguments; a line that cannot be read is an error naming file and line.

Over 400 lines: three importers (the study, Alpa's TSV, Alpa's log) with their line-level checks.
"""

from __future__ import annotations

import ast
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from geosim.base.errors import GeosimError
from geosim.inputs.records import RunRecord, validate
from geosim.base.input_limits import RECORDS_MAX_BYTES
from geosim.inputs.scale import is_scale_name, load_any_scenario
from geosim.inputs.scenario import read_toml, dims_name, model_catalog, read_text, scenario_path
from geosim.base.validate import host_names, is_finite

ALPA_COLUMNS = ("Type", "Model Config", "#Microbatch", "#GPU", "Parallel Config", "Mean Time (s)", "Std Time (s)",
                "#Params (Billion)", "TFLOPs", "Peak Mem (GB)", "Metadata")
# Alpa's GPTModelConfig fields, in order, for the older plain-tuple form (batch size first)
ALPA_OLD_TUPLE = ("batch_size", "seq_len", "hidden_size", "num_layers", "num_heads", "vocab_size")
# bounded digits for the step (int() of thousands of digits raises); possessive runs: linear in the line
LOG_LINE = re.compile(
    r"Step\.\.\.\s*+(?P<step>\d{1,12})\s*+\|\s*+Loss:\s*+(?P<loss>[-+.\deEnaif]++),\s*+Learning Rate:\s*+"
    r"(?P<lr>[-+.\deE]++),\s*+Throughput:\s*+(?P<tokens>[-+.\deE]++)\s*+token/s,\s*+(?P<tflops>[-+.\deE]++)\s*+TFLOP/s")


MAX_CONFIG_CHARS = 4_096  # Alpa's Model and Parallel Configs are under 300 characters


def _config_fields(text: str, where: str, key: str) -> tuple[str, dict]:
    """'Name(a=1, b=(1, 2))' -> ('Name', {'a': 1, 'b': (1, 2)}); '(8, 1024, ...)' -> ('', {0: 8, ...})."""
    if len(text) > MAX_CONFIG_CHARS:  # Python's parser spends seconds and gigabytes on megabytes of tuple
        raise GeosimError(f"{len(text):,} characters, more than any of Alpa's configs (at most {MAX_CONFIG_CHARS:,}); "
                          "not read", source=where, key=key)
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise GeosimError(f"cannot read {text.strip()[:60]!r}", source=where, key=key) from None
    try:
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            fields = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
            fields.update({i: ast.literal_eval(a) for i, a in enumerate(node.args)})
            return name, fields
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise GeosimError(f"cannot read {text.strip()[:60]!r}", source=where, key=key) from None
    if isinstance(value, (tuple, list)):
        return "", dict(enumerate(value))
    raise GeosimError(f"expected a config tuple, got {text.strip()[:60]!r}", source=where, key=key)


def _model_from_alpa(fields: dict, where: str) -> tuple[str, dict | None, int | None]:
    """(model name, model_dims or None for a catalog model, batch size if the config carries it)."""
    if 0 in fields:  # the older plain tuple: (batch, seq_len, hidden, layers, heads, vocab)
        fields = {name: fields[i] for i, name in enumerate(ALPA_OLD_TUPLE) if i in fields}
    if not all(k in fields for k in ("num_layers", "hidden_size", "num_heads")):
        raise GeosimError("needs num_layers, hidden_size and num_heads", source=where, key="Model Config")
    dims = {dim: _whole(fields.get(name, default), where, f"Model Config: {name}")
            for dim, name, default in (("n_layer", "num_layers", None), ("n_embd", "hidden_size", None),
                                       ("n_head", "num_heads", None), ("vocab", "vocab_size", 50257),
                                       ("n_ctx", "seq_len", 1024))}
    batch = fields.get("batch_size")
    if batch is not None:
        batch = _whole(batch, where, "Model Config: batch_size")
    for name, model in model_catalog().items():
        if (model.n_layer, model.n_embd, model.n_head, model.vocab) == (dims["n_layer"], dims["n_embd"], dims["n_head"],
                                                                       dims["vocab"]) and dims["n_ctx"] <= model.n_ctx:
            return name, None, batch
    return dims_name(**dims), dims, batch


def _whole(value, where: str, key: str, low: int = 1) -> int:
    """A whole number >= low from a parsed config field (not a string, bool, NaN or fraction)."""
    if not is_finite(value) or value != int(value) or value < low or value > 10**15:
        raise GeosimError(f"must be a whole number >= {low}, got {value!r:.40}", source=where, key=key)
    return int(value)


def _flag(fields: dict, name: str, position: int, where: str) -> bool:
    value = fields.get(name, fields.get(position, False))
    if not isinstance(value, bool):
        raise GeosimError(f"must be True or False, got {value!r:.40}", source=where, key=f"Parallel Config: {name}")
    return value


def _shape(value, where: str, key: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not value:
        raise GeosimError(f"must be a mesh shape like (1, 4), got {value!r:.40}", source=where, key=key)
    return tuple(_whole(v, where, key) for v in value)


# the positional order of Alpa's namedtuples (benchmark/alpa/benchmark_parallel_utils.py)
ALPA_ARGS = {
    "ShardParallelArgs": ("prefer_reduce_scatter", "use_remat", "logical_mesh_shape", "force_batch_dim_mapping"),
    "UniformParallelArgs": ("prefer_reduce_scatter", "use_remat", "dp", "op", "pp", "force_batch_dim_mapping"),
    "SearchParallelArgs": ("prefer_reduce_scatter", "use_remat", "num_auto_layers", "auto_stage_option"),
    "LoadSolutionParallelArgs": ("prefer_reduce_scatter", "use_remat", "num_auto_layers", "forward_stage_layer_ids",
                                 "submesh_physical_shapes", "submesh_logical_shapes",
                                 "submesh_autosharding_option_dicts"),
}


class MismatchedRow(Exception):
    """A result row measured on more GPUs than the slice the import was given."""


def first_gpus_cluster(scenario: str, hosts: list[str] | None, count: int) -> tuple[dict, str]:
    """The slice cut to its first `count` GPUs (VMs in order, each VM's GPUs in order), in
    scenario-file form for a record's inline `cluster`, and a note saying which GPUs those are:
    a log whose runs used 1, 2 and 4 GPUs of a 4-GPU slice is predicted on what each run used."""
    if is_scale_name(scenario):  # a generated cluster has no file: its scenario-file form, from the cluster
        doc, stem = _scenario_doc(load_any_scenario(scenario).cluster), scenario
    else:
        path = scenario_path(scenario)
        (doc, _), stem = read_toml(path), path.stem
    wanted = [h for h in doc["hosts"] if not hosts or h.get("name") in hosts]
    kept, left = [], count
    for host in wanted:
        if left <= 0:
            break
        take = list(host["gpus"])[:left]
        kept.append({**host, "gpus": take})
        left -= len(take)
    names = {h["name"] for h in kept} | {h["site"] for h in kept}
    links = [link for link in doc.get("links", []) if all(end in names for end in link.get("between", []))]
    name = f"{doc.get('name', stem)}-first{count}gpus"
    cut = {**{k: v for k, v in doc.items() if k not in ("hosts", "links", "name")}, "name": name, "hosts": kept}
    if links:
        cut["links"] = links
    where = ", ".join(f"{h['name']}: {len(h['gpus'])}" for h in kept)
    return cut, f"ran on {count} GPU(s): predicted on the first {count} of the slice's ({where})"


def _scenario_doc(cluster) -> dict:
    """A cluster (a generated one: geosim.inputs.scale) in scenario-file form."""
    return {"name": cluster.name,
            "hosts": [{"name": h.name, "site": h.site, "gpus": [g.name for g in h.gpus], "intra_host": h.intra_host}
                      for h in cluster.hosts],
            "links": [{"between": [link.a, link.b], "rtt_ms": link.rtt_s * 1e3, "bandwidth_gbps": link.bandwidth_bps / 1e9}
                      for link in cluster.links]}


@dataclass
class AlpaParallel:
    """What a fit needs from one Parallel Config: the technique, recomputation, the per-run options."""

    technique: str
    use_remat: bool
    prefer_reduce_scatter: bool
    options: dict  # the technique's settings for this run (predict's options)
    layout: str  # a short description for the record's note


def parallel_from_alpa(name: str, fields: dict, n_layer: int, where: str) -> AlpaParallel:
    """Alpa's parallel arguments -> the study's technique names (Alpa's four methods) and options.

    One pipeline stage is not a pipeline: a LoadSolutionParallelArgs with one stage (or a
    UniformParallelArgs with pp=1) is Data, ZeRO-2 or Shard by its mesh, whatever it is called."""
    if name not in ALPA_ARGS:
        raise GeosimError(f"unknown parallel config {name or 'tuple'!r} (expected {', '.join(ALPA_ARGS)})",
                          source=where, key="Parallel Config")
    fields = {ALPA_ARGS[name][k] if isinstance(k, int) and k < len(ALPA_ARGS[name]) else k: v
              for k, v in fields.items()}
    key = "Parallel Config"
    remat = _flag(fields, "use_remat", 1, where)
    reduce_scatter = _flag(fields, "prefer_reduce_scatter", 0, where)
    options: dict = {}
    if name == "SearchParallelArgs":  # Alpa searches the stages itself: a pipeline, layout unknown
        return AlpaParallel("pipeshard", remat, reduce_scatter, {}, "stages searched by Alpa")
    if name == "UniformParallelArgs":
        dp, op, pp = (_whole(fields.get(k, 1), where, f"{key}: {k}") for k in ("dp", "op", "pp"))
        stages, layout = pp, f"dp={dp}, op={op}, pp={pp}"
    elif name == "ShardParallelArgs":
        shape = _shape(fields.get("logical_mesh_shape", (1, 1)), where, f"{key}: logical_mesh_shape")
        dp, op, stages = shape[0], math.prod(shape[1:]) if len(shape) > 1 else 1, 1
        layout = f"mesh {shape}"
    else:  # LoadSolutionParallelArgs: the stages as Alpa's solution lays them out
        ids = fields.get("forward_stage_layer_ids")
        logical = fields.get("submesh_logical_shapes")
        if not isinstance(ids, (list, tuple)) or not ids or not all(isinstance(s, (list, tuple)) and s for s in ids):
            raise GeosimError(f"must be a list of layer-id lists, got {ids!r:.40}", source=where,
                              key=f"{key}: forward_stage_layer_ids")
        if not isinstance(logical, (list, tuple)) or len(logical) != len(ids):
            raise GeosimError(f"must give one mesh shape per stage ({len(ids)}), got {logical!r:.40}", source=where,
                              key=f"{key}: submesh_logical_shapes")
        shapes = [_shape(s, where, f"{key}: submesh_logical_shapes") for s in logical]
        stages = len(ids)
        dp, op = shapes[0][0], math.prod(shapes[0][1:]) if len(shapes[0]) > 1 else 1
        auto_layers = _whole(fields.get("num_auto_layers", sum(len(s) for s in ids)), where, f"{key}: num_auto_layers")
        layout = f"{stages} stage(s), layers {[list(s) for s in ids]}, meshes {shapes}"
        if stages > 1 and n_layer % auto_layers == 0:  # auto-layers group model layers evenly
            per = n_layer // auto_layers
            options["layer_split"] = tuple(len(s) * per for s in ids)
    if stages > 1:
        options["intra_stage"] = "shard" if op > 1 else "data"
        return AlpaParallel("pipeshard", remat, reduce_scatter, options, layout)
    if op > 1:
        return AlpaParallel("shard", remat, reduce_scatter, {}, layout)
    # data parallel only: Alpa's Zero2Parallel is data parallel with reduce-scatter preferred
    # (on one device there is nothing to scatter: that is Data whatever the flag says)
    return AlpaParallel("zero2" if reduce_scatter and dp > 1 else "data", remat, reduce_scatter, {}, layout)


def _number(text: str, where: str, key: str) -> float:
    try:
        value = float(text.strip().rstrip("B"))
    except ValueError:
        raise GeosimError(f"not a number: {text.strip()[:40]!r}", source=where, key=key) from None
    if not math.isfinite(value):
        raise GeosimError(f"not a finite number: {text.strip()[:40]!r}", source=where, key=key)
    return value


def slice_shape(scenario: str, hosts: list[str] | None) -> tuple[int, int]:
    """(VMs, GPUs) of the slice the user says the runs ran on."""

    cluster = load_any_scenario(scenario).cluster  # a file, a built-in or a generated cluster (scale:...)
    if hosts:
        cluster = cluster.subset(host_names(",".join(hosts), [x.name for x in cluster.hosts]))
    return len(cluster.hosts), cluster.num_gpus


def _row_record(row: dict, where: str, scenario: str, *, batch: int | None, hosts: list[str] | None,
                source: str, shape: tuple[int, int] | None = None) -> RunRecord:
    """One of Alpa's result rows (the ALPA_COLUMNS as text) -> a validated run record."""
    if row["Type"].strip() not in ("gpt", "bert"):
        raise GeosimError(f"only GPT benchmarks can be simulated, got {row['Type'].strip()[:40]!r}", source=where, key="Type")
    _, model_fields = _config_fields(row["Model Config"], where, "Model Config")
    model, dims, config_batch = _model_from_alpa(model_fields, where)
    microbatch_value = _number(row["#Microbatch"], where, "#Microbatch")
    microbatches = _whole(microbatch_value, where, "#Microbatch")
    gpus = _whole(_number(row["#GPU"], where, "#GPU"), where, "#GPU")
    pname, pfields = _config_fields(row["Parallel Config"], where, "Parallel Config")
    n_layer = (dims or {}).get("n_layer") or model_catalog()[model].n_layer
    parallel = parallel_from_alpa(pname, pfields, n_layer, where)
    if shape is not None and gpus > shape[1]:
        raise MismatchedRow(f"{where}: ran on {gpus} GPU(s), the slice given has {shape[1]}")
    cluster, cut_note = None, ""
    if shape is not None and gpus < shape[1]:  # a smaller run of a multi-run log: the slice's first GPUs
        cluster, cut_note = first_gpus_cluster(scenario, hosts, gpus)
        shape = (len(cluster["hosts"]), gpus)
    if "layer_split" in parallel.options and shape is not None and len(parallel.options["layer_split"]) != shape[0]:
        # geosim puts a stage on each VM: Alpa's stages on one VM's GPUs cannot be laid out as they ran
        del parallel.options["layer_split"]
    mean, std = _number(row["Mean Time (s)"], where, "Mean Time (s)"), _number(row["Std Time (s)"], where, "Std Time (s)")
    tflops, peak = _number(row["TFLOPs"], where, "TFLOPs"), _number(row["Peak Mem (GB)"], where, "Peak Mem (GB)")
    # Alpa writes a failed case (its worker process died) as latency -1 (benchmark_one_case returns
    # -1, -1, [-1], -1): that exact value only. Any other time <= 0 is a broken file.
    failed = mean == -1.0
    if not failed and mean <= 0:
        raise GeosimError(f"must be > 0 (or -1 for a failed case), got {mean:g}", source=where, key="Mean Time (s)")
    if not failed and (tflops < 0 or peak < 0):
        raise GeosimError("a measured case cannot have a negative TFLOPs or Peak Mem", source=where,
                          key="TFLOPs" if tflops < 0 else "Peak Mem (GB)")
    batch = batch or config_batch
    workload: dict = {"seq_len": _whole(model_fields.get("seq_len", model_fields.get(1, 1024)), where, "Model Config: seq_len"),
                      "microbatches": microbatches}
    if batch:
        workload["global_batch"] = _whole(batch, where, "batch_size")
    if parallel.use_remat:
        workload["checkpointing"] = True
    measured = {} if failed else {"time_per_iteration_s": mean, "tflops_per_gpu": tflops, "peak_memory_gib": peak}
    record = RunRecord(
        technique=parallel.technique, model=model, status="out-of-memory" if failed else "ok",
        scenario=scenario, cluster=cluster, hosts=None if cluster else hosts, model_dims=dims, workload=workload, measured=measured, source=source,
        backend="alpa", collective_impl="nccl", options=parallel.options or None,
        error="Alpa wrote -1 (the case failed; treated as out of memory)" if failed else None,
        note=f"{where}: {pname}, {gpus} GPUs, {parallel.layout}, use_remat={parallel.use_remat}, "
             f"prefer_reduce_scatter={parallel.prefer_reduce_scatter}, std {std:g} s, "
             f"#params {row['#Params (Billion)'].strip()}" + (f"; {cut_note}" if cut_note else ""),
    )
    try:
        return validate({k: v for k, v in record.__dict__.items() if v is not None}, where)
    except GeosimError as exc:
        hint = " (give --global-batch)" if exc.key == "workload.microbatches" and not batch else ""
        raise GeosimError(exc.problem + hint, source=where, key=exc.key) from None


def alpa_benchmark_records(path: str | Path, scenario: str, *, global_batch: int | None = None,
                           hosts: list[str] | None = None, skipped: list[str] | None = None) -> list[RunRecord]:
    """Alpa's benchmark results: its TSV file (tab-separated, no header, the 11 ALPA_COLUMNS in order)
    or its console output (the same row printed by write_tsv as 'Type: gpt  Model Config: ...'),
    whichever the file is. A failed case is written with -1 times: imported as out-of-memory (Alpa
    does not say why a case failed; on these GPUs it is most often memory), which the fit uses to
    check the memory model."""
    path = Path(path)
    lines = read_text(path, RECORDS_MAX_BYTES, "log or records file").splitlines()
    if any(console_row_at(line) >= 0 for line in lines):
        return alpa_console_records(path, scenario, global_batch=global_batch, hosts=hosts, lines=lines,
                                    skipped=skipped)
    shape = slice_shape(scenario, hosts)
    skipped = [] if skipped is None else skipped
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{number}"
        cols = line.split("\t")
        if cols[0].strip() == "Type":  # a header row some versions write: skip it
            continue
        if len(cols) < 10:
            raise GeosimError(f"expected {len(ALPA_COLUMNS)} tab-separated fields ({', '.join(ALPA_COLUMNS)}), "
                              f"got {len(cols)}", source=where)
        row = dict(zip(ALPA_COLUMNS, cols))
        row.setdefault("Metadata", "")
        try:
            records.append(_row_record(row, where, scenario, batch=global_batch, hosts=hosts, source="alpa-benchmark",
                                       shape=shape))
        except MismatchedRow as exc:
            skipped.append(str(exc))
    return _some(records, skipped, path)


def _some(records: list[RunRecord], skipped: list[str], path: Path) -> list[RunRecord]:
    if not records:
        if skipped:
            raise GeosimError(f"no result row ran on the GPUs of the slice given ({'; '.join(skipped[:3])}): "
                              "give the --scenario (and --hosts) the runs used", source=str(path))
        raise GeosimError("no benchmark rows in file (empty)", source=str(path))
    return records


# Alpa's write_tsv also prints each row as 'Head: value  ' for every column (alpa/util.py), among
# the benchmark's progress lines; benchmark.py prints 'Working on case: BenchmarkCase(batch_size=...'
# before each case, the only place the console gives the global batch.
# Both are found in linear time: a pattern such as "Type: ...  Model Config: .*Mean Time" backtracks over
# the rest of the line from every place it could start (a 460 KB line took 36 s, 3.45 MB never ended)
_CONSOLE_HEAD = re.compile(r"Type: \S++\s++Model Config: ")  # possessive: each run scanned once
_CONSOLE_BATCH = re.compile(r"(?:batch_size=)?+([^,]++),")


def console_row_at(line: str) -> int:
    """Where a console result row ('Type: gpt  Model Config: ...  Mean Time (s): ...') begins in the
    line, -1 when it holds none."""
    mean = line.rfind("Mean Time (s): ")
    if mean < 0:
        return -1
    head = _CONSOLE_HEAD.search(line, 0, mean)
    return head.start() if head else -1


def console_case_batch(line: str) -> str | None:
    """The global batch of a 'Working on case: ... BenchmarkCase(batch_size=N, ...' line, None on another line."""
    at = line.find("Working on case: ")
    if at < 0:
        return None
    case = line.find("BenchmarkCase(", at)
    if case < 0:
        return None
    match = _CONSOLE_BATCH.match(line, case + len("BenchmarkCase("))
    return match.group(1) if match else None


def alpa_console_records(path: str | Path, scenario: str, *, global_batch: int | None = None,
                         hosts: list[str] | None = None, lines: list[str] | None = None,
                         skipped: list[str] | None = None) -> list[RunRecord]:
    """The result rows of Alpa's benchmark console output (benchmark/alpa/benchmark.py, which calls
    alpa.util.write_tsv): one 'Type: ...  Model Config: ...  ...  Metadata: ...' line per case."""
    path = Path(path)
    lines = read_text(path, RECORDS_MAX_BYTES, "log or records file").splitlines() if lines is None else lines
    shape = slice_shape(scenario, hosts)
    skipped = [] if skipped is None else skipped
    heads = "|".join(re.escape(h) for h in ALPA_COLUMNS)
    split = re.compile(rf"(?:^|\s\s)({heads}): ")
    records, batch = [], None
    for number, line in enumerate(lines, start=1):
        where = f"{path}:{number}"
        case = console_case_batch(line)
        if case is not None:
            batch = _whole(_number(case, where, "batch_size"), where, "batch_size")
            continue
        at = console_row_at(line)
        if at < 0:
            continue
        text = line[at:]
        parts = split.split(text)  # ['', head, value, head, value, ...]
        row = {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}
        missing = [h for h in ALPA_COLUMNS if h not in row and h != "Metadata"]
        if missing:
            raise GeosimError(f"a result line without {', '.join(missing)}", source=where)
        row.setdefault("Metadata", "")
        try:
            records.append(_row_record(row, where, scenario, batch=global_batch or batch, hosts=hosts,
                                       source="alpa-console", shape=shape))
        except MismatchedRow as exc:
            skipped.append(str(exc))
        batch = None
    if not records and not skipped:
        raise GeosimError("no result lines ('Type: gpt  Model Config: ...  Mean Time (s): ...') in the log",
                          source=str(path))
    return _some(records, skipped, path)


def alpa_log_record(path: str | Path, scenario: str, technique: str, model: str, *, global_batch: int | None = None,
                    microbatches: int | None = None, hosts: list[str] | None = None, skip: int = 1) -> RunRecord:
    """One run from Alpa's GPT-2 example log ('Step... N | Loss: L, Learning Rate: R, Throughput: T token/s,
    F TFLOP/s'): the median of the logged windows after the first `skip` (compilation and warm-up)."""
    path = Path(path)
    lines = read_text(path, RECORDS_MAX_BYTES, "log or records file").splitlines()  # a regular file, UTF-8 (geosim.inputs.scenario.read_text)
    steps = []
    for number, line in enumerate(lines, start=1):
        if "Step..." not in line:
            continue
        match = LOG_LINE.search(line)
        if not match:
            raise GeosimError("a 'Step...' line not in Alpa's format ('Step... N | Loss: L, Learning Rate: R, "
                              "Throughput: T token/s, F TFLOP/s')", source=f"{path}:{number}")
        where = f"{path}:{number}"
        tokens, tflops = _number(match["tokens"], where, "Throughput"), _number(match["tflops"], where, "TFLOP/s")
        if tokens <= 0 or tflops < 0:
            raise GeosimError("a throughput must be > 0 token/s and TFLOP/s >= 0", source=where,
                              key="Throughput" if tokens <= 0 else "TFLOP/s")
        steps.append((int(match["step"]), tokens, tflops))
    if not steps:
        raise GeosimError("no 'Step... N | ... TFLOP/s' lines in the log (empty)", source=str(path))
    steady = steps[skip:] if len(steps) > skip else steps
    tokens_per_s = statistics.median(s[1] for s in steady)
    measured = {"tokens_per_s": tokens_per_s, "tflops_per_gpu": statistics.median(s[2] for s in steady),
                "steps": steps[-1][0]}
    workload = {}
    if global_batch:
        workload["global_batch"] = global_batch
    if microbatches:
        workload["microbatches"] = microbatches
    doc = RunRecord(technique=technique, model=model, status="ok", scenario=scenario, hosts=hosts, workload=workload,
                    measured=measured, source="alpa-log", backend="alpa", collective_impl="nccl",
                    note=f"{path}: median of {len(steady)} logged windows (of {len(steps)})")
    return validate({k: v for k, v in doc.__dict__.items() if v is not None}, str(path))
