"""Importers: the study's measurements, Alpa's benchmark TSV and Alpa's GPT-2 training log -> run records.

Every importer returns geosim.records.RunRecord objects (schema geosim.run/1), so a
fit reads them exactly as it reads what live/ writes. Alpa's files do not say which
slice they ran on, so their importers take the scenario (and what else the file
lacks) as arguments; a line that cannot be read is an error naming file and line.
"""

from __future__ import annotations

import ast
import re
import statistics
from pathlib import Path

from geosim.errors import GeosimError
from geosim.records import RunRecord, validate
from geosim.scenario import model_catalog
from geosim.techniques import is_pipelined

ALPA_COLUMNS = ("Type", "Model Config", "#Microbatch", "#GPU", "Parallel Config", "Mean Time (s)", "Std Time (s)",
                "#Params (Billion)", "TFLOPs", "Peak Mem (GB)", "Metadata")
# Alpa's GPTModelConfig fields, in order, for the older plain-tuple form (batch size first)
ALPA_OLD_TUPLE = ("batch_size", "seq_len", "hidden_size", "num_layers", "num_heads", "vocab_size")
LOG_LINE = re.compile(
    r"Step\.\.\.\s*(?P<step>\d+)\s*\|\s*Loss:\s*(?P<loss>[-+.\deEnaif]+),\s*Learning Rate:\s*(?P<lr>[-+.\deE]+),\s*"
    r"Throughput:\s*(?P<tokens>[-+.\deE]+)\s*token/s,\s*(?P<tflops>[-+.\deE]+)\s*TFLOP/s")


def _config_fields(text: str, where: str, key: str) -> tuple[str, dict]:
    """'Name(a=1, b=(1, 2))' -> ('Name', {'a': 1, 'b': (1, 2)}); '(8, 1024, ...)' -> ('', {0: 8, ...})."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise GeosimError(f"cannot read {text.strip()[:60]!r}", source=where, key=key) from None
    try:
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            fields = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
            fields.update({i: ast.literal_eval(a) for i, a in enumerate(node.args)})
            return name, fields
        value = ast.literal_eval(node)
    except ValueError:
        raise GeosimError(f"cannot read {text.strip()[:60]!r}", source=where, key=key) from None
    if isinstance(value, (tuple, list)):
        return "", dict(enumerate(value))
    raise GeosimError(f"expected a config tuple, got {text.strip()[:60]!r}", source=where, key=key)


def _model_from_alpa(fields: dict, where: str) -> tuple[str, dict | None, int | None]:
    """(model name, model_dims or None for a catalog model, batch size if the config carries it)."""
    if 0 in fields:  # the older plain tuple: (batch, seq_len, hidden, layers, heads, vocab)
        fields = {name: fields[i] for i, name in enumerate(ALPA_OLD_TUPLE) if i in fields}
    try:
        dims = {"n_layer": int(fields["num_layers"]), "n_embd": int(fields["hidden_size"]),
                "n_head": int(fields["num_heads"]), "vocab": int(fields.get("vocab_size", 50257)),
                "n_ctx": int(fields.get("seq_len", 1024))}
    except (KeyError, TypeError, ValueError):
        raise GeosimError("needs num_layers, hidden_size and num_heads", source=where, key="Model Config") from None
    batch = fields.get("batch_size")
    for name, model in model_catalog().items():
        if (model.n_layer, model.n_embd, model.n_head, model.vocab) == (dims["n_layer"], dims["n_embd"], dims["n_head"],
                                                                       dims["vocab"]) and dims["n_ctx"] <= model.n_ctx:
            return name, None, batch
    return f"gpt-{dims['n_layer']}x{dims['n_embd']}-v{dims['vocab']}", dims, batch


def _technique_from_alpa(name: str, fields: dict, microbatches: int, where: str) -> str:
    """Alpa's parallel arguments -> the study's technique names (Alpa's four methods)."""
    if name in ("SearchParallelArgs", "LoadSolutionParallelArgs"):
        return "pipeshard"
    if name == "UniformParallelArgs":
        dp, op, pp = (int(fields.get(k, 1)) for k in ("dp", "op", "pp"))
    elif name == "ShardParallelArgs":
        shape = fields.get("logical_mesh_shape") or (1, 1)
        dp, op, pp = int(shape[0]), int(shape[1]) if len(shape) > 1 else 1, 1
    else:
        raise GeosimError(f"unknown parallel config {name or 'tuple'!r} (expected UniformParallelArgs, "
                          f"ShardParallelArgs, SearchParallelArgs or LoadSolutionParallelArgs)",
                          source=where, key="Parallel Config")
    if pp > 1:
        return "pipeshard"
    if op > 1:
        return "shard"
    # data parallel only: Alpa's Zero2Parallel is data parallel with reduce-scatter preferred
    return "zero2" if fields.get("prefer_reduce_scatter") else "data"


def _number(text: str, where: str, key: str) -> float:
    try:
        return float(text.strip().rstrip("B"))
    except ValueError:
        raise GeosimError(f"not a number: {text.strip()!r}", source=where, key=key) from None


def alpa_benchmark_records(path: str | Path, scenario: str, *, global_batch: int | None = None,
                           hosts: list[str] | None = None) -> list[RunRecord]:
    """Alpa's benchmark result file: tab-separated, no header, the 11 ALPA_COLUMNS in order.
    A failed case is written with -1 times: imported as out-of-memory (Alpa does not say why a case
    failed; on these GPUs it is most often memory), which the fit uses to check the memory model."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise GeosimError("no such file", source=str(path)) from None
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
        if row["Type"].strip() not in ("gpt", "bert"):
            raise GeosimError(f"only GPT benchmarks can be simulated, got {row['Type'].strip()!r}", source=where, key="Type")
        _, model_fields = _config_fields(row["Model Config"], where, "Model Config")
        model, dims, batch = _model_from_alpa(model_fields, where)
        microbatches = int(_number(row["#Microbatch"], where, "#Microbatch"))
        pname, pfields = _config_fields(row["Parallel Config"], where, "Parallel Config")
        technique = _technique_from_alpa(pname, pfields, microbatches, where)
        mean, std = _number(row["Mean Time (s)"], where, "Mean Time (s)"), _number(row["Std Time (s)"], where, "Std Time (s)")
        tflops, peak = _number(row["TFLOPs"], where, "TFLOPs"), _number(row["Peak Mem (GB)"], where, "Peak Mem (GB)")
        batch = global_batch or batch
        workload = {"seq_len": int(model_fields.get("seq_len", model_fields.get(1, 1024)))}
        if batch:
            workload["global_batch"] = int(batch)
        if is_pipelined(technique):  # microbatches are a pipeline's; the others accumulate
            workload["microbatches"] = microbatches
        failed = mean < 0
        measured = {} if failed else {"time_per_iteration_s": mean, "tflops_per_gpu": tflops,
                                      "peak_memory_gib": peak}
        doc = RunRecord(
            technique=technique, model=model, status="out-of-memory" if failed else "ok", scenario=scenario,
            hosts=hosts, model_dims=dims, workload=workload, measured=measured, source="alpa-benchmark",
            backend="alpa", collective_impl="nccl",
            error="Alpa wrote -1 (the case failed; treated as out of memory)" if failed else None,
            note=f"{where}: {pname or 'parallel config'}, {int(_number(row['#GPU'], where, '#GPU'))} GPUs, "
                 f"std {std:g} s, #params {row['#Params (Billion)'].strip()}",
        )
        records.append(validate({k: v for k, v in doc.__dict__.items() if v is not None}, where))
    if not records:
        raise GeosimError("no benchmark rows in file (empty)", source=str(path))
    return records


def alpa_log_record(path: str | Path, scenario: str, technique: str, model: str, *, global_batch: int | None = None,
                    microbatches: int | None = None, hosts: list[str] | None = None, skip: int = 1) -> RunRecord:
    """One run from Alpa's GPT-2 example log ('Step... N | Loss: L, Learning Rate: R, Throughput: T token/s,
    F TFLOP/s'): the median of the logged windows after the first `skip` (compilation and warm-up)."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise GeosimError("no such file", source=str(path)) from None
    steps = []
    for number, line in enumerate(lines, start=1):
        if "Step..." not in line:
            continue
        match = LOG_LINE.search(line)
        if not match:
            raise GeosimError("a 'Step...' line not in Alpa's format ('Step... N | Loss: L, Learning Rate: R, "
                              "Throughput: T token/s, F TFLOP/s')", source=f"{path}:{number}")
        steps.append((int(match["step"]), float(match["tokens"]), float(match["tflops"])))
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
