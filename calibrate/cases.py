"""Run records -> cases the simulator can predict: cluster, model, workload, technique, target.

A record names its slice (a built-in scenario or a scenario file) or carries the
scenario inline; scenario files are parsed once per fit (the fit predicts every
record dozens of times). Errors name the record's file and line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from geosim.base.errors import GeosimError
from geosim.inputs.gpu_names import with_catalog_gpus
from geosim.inputs.records import RunRecord, read_runs as records_read_runs
from geosim.inputs.scale import load_any_scenario
from geosim.inputs.model_config import model_from_table
from geosim.inputs.scenario import Scenario, get_model, scenario_from_doc
from geosim.inputs.specs import Cluster, Model, Workload
from geosim.techniques import get_technique
from geosim.inputs.params import default_params
from geosim.techniques._settings import with_options

# The measured figure a case is fitted to, in order of preference: the steady-state
# iteration time where a run has it (Alpa's benchmark, live runs, whose wall-clock total
# also holds compilation and only a few steps), else the wall-clock total (what the study
# reports), else a throughput (Alpa's logs).
METRICS = ("time_per_iteration_s", "total_time_s", "tokens_per_s", "tflops_per_gpu")
# for these, larger is faster: the residual compares the simulator's figure the same way round
PREDICTION_FIELD = {"total_time_s": "total_time_s", "time_per_iteration_s": "iteration_time_s",
                    "tokens_per_s": "tokens_per_s", "tflops_per_gpu": "tflops_per_gpu"}


@dataclass
class RunCase:
    """A measured run the fit predicts: the simulated case, the technique and what was measured."""

    where: str  # "runs.jsonl:3": where the record came from, for messages
    label: str  # "UTAH-GPN/data": short name for tables
    record: RunRecord
    slice_key: str  # one key per slice: the scenario's name (fitted per-link values are stored under it)
    cluster: Cluster
    model: Model
    workload: Workload
    hosts: tuple[str, ...] | None
    technique: str
    metric: str | None  # None: nothing to fit to (an out-of-memory or failed record)
    measured: float | None
    assumed_workload: tuple[str, ...] = ()  # workload keys the record did not give (defaults used)
    gpus: frozenset[str] = field(default_factory=frozenset)
    options: dict | None = None  # the technique's settings for this run (the record's options)
    networked: bool = False  # True when the run spans hosts, so the transport matters

    @property
    def status(self) -> str:
        return self.record.status


def read_runs(path: str | Path) -> list[tuple[str, RunRecord]]:
    """(file:line, record) for every record of a JSON Lines file; empty files, duplicate runs are errors."""
    return records_read_runs(path)


@lru_cache(maxsize=64)
def _scenario(name_or_path: str) -> Scenario:
    return load_any_scenario(name_or_path)


def _inline_scenario(doc: dict, where: str) -> Scenario:
    """A record's inline cluster is scenario-file TOML as JSON: validated by the same loader."""
    try:
        return scenario_from_doc(with_catalog_gpus(doc), where, "inline")
    except GeosimError as exc:  # name the record's key
        key = f"cluster.{exc.key}" if exc.key else "cluster"
        raise GeosimError(exc.problem, source=where, key=key) from None


def _option_value(name: str, value, where: str):
    """A per-run option from JSON: a settings value as is; the layouts a technique takes as
    tuples (layers per stage; host names per mesh or replica), checked for their shape here
    because the technique's Settings accept any object for them."""
    key = f"options.{name}"
    if name.endswith("_split"):
        if not isinstance(value, (list, tuple)) or not value or not all(
                isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 100_000 for v in value):
            raise GeosimError(f"must be a list of whole numbers >= 1, got {value!r:.60}", source=where, key=key)
        return tuple(value)
    if name in ("meshes", "replicas"):
        if not isinstance(value, (list, tuple)) or not value or not all(
                isinstance(group, (list, tuple)) and group and all(isinstance(h, str) and h for h in group)
                for group in value):
            raise GeosimError(f"must be a list of lists of host names, got {value!r:.60}", source=where, key=key)
        return tuple(tuple(group) for group in value)
    if isinstance(value, (list, tuple, dict)):
        raise GeosimError(f"must be a number, a string or true/false, got {value!r:.60}", source=where, key=key)
    return value


def to_case(where: str, record: RunRecord) -> RunCase:
    try:
        get_technique(record.technique)
    except GeosimError as exc:
        raise GeosimError(exc.problem, source=where, key="technique") from None
    if record.cluster is not None:
        scenario = _inline_scenario(record.cluster, where)
        slice_key = str(record.cluster.get("name", f"inline:{where}"))
    else:
        try:
            scenario = _scenario(record.scenario)
        except GeosimError as exc:  # name the record and the scenario file it points at
            raise GeosimError(f"{exc.line()}", source=where, key="scenario") from None
        slice_key = scenario.cluster.name
    try:
        if record.model_dims is not None:  # the record's own shape (GQA, SwiGLU, experts: geosim.inputs.model_shape)
            model = model_from_table(record.model, record.model_dims, where, "model_dims.")
        else:
            model = get_model(record.model, scenario.models, source=where)
    except TypeError as exc:
        raise GeosimError(f"bad model dimensions ({exc})", source=where, key="model_dims") from None
    try:
        workload = scenario.workload(**record.workload)
    except GeosimError as exc:
        raise GeosimError(exc.problem, source=where, key=exc.key) from None
    options = None
    if record.options:

        try:  # checked like a --params value: known settings, their types and ranges
            with_options(default_params().settings(record.technique), record.options, record.technique)
        except GeosimError as exc:
            raise GeosimError(exc.problem, source=where, key=f"options.{(exc.key or '').split('.', 1)[-1]}") from None
        options = {k: _option_value(k, v, where) for k, v in record.options.items()}
    cluster = scenario.cluster
    hosts = tuple(record.hosts) if record.hosts else None
    if hosts:
        known = {h.name for h in cluster.hosts}
        for h in hosts:
            if h not in known:
                raise GeosimError(f"no host {h!r} in scenario {cluster.name} (hosts: {', '.join(sorted(known))})",
                                  source=where, key="hosts")
    used = cluster.subset(hosts) if hosts else cluster
    timed = record.status == "ok" and record.measured.get("steps") != 0  # 0 steps: interrupted before timing
    metric = next((m for m in METRICS if m in record.measured), None) if timed else None
    technique_label = record.technique if not hosts or len(hosts) == len(cluster.hosts) else f"{record.technique}@{'+'.join(hosts)}"
    return RunCase(
        where=where, label=f"{slice_key}/{technique_label}", record=record, slice_key=slice_key, cluster=cluster,
        model=model, workload=workload, hosts=hosts, technique=record.technique, metric=metric,
        measured=float(record.measured[metric]) if metric else None,
        assumed_workload=tuple(k for k in ("tokens_per_epoch", "global_batch", "microbatches", "epochs")
                               if k not in record.workload and k not in scenario.workload_overrides),
        gpus=frozenset(g.name for h in used.hosts for g in h.gpus), networked=len(used.hosts) > 1, options=options,
    )


def load_cases(path: str | Path) -> list[RunCase]:
    return [to_case(where, record) for where, record in read_runs(path)]


def cases_from_records(records: list[RunRecord], source: str) -> list[RunCase]:
    return [to_case(f"{source}#{i + 1}", r) for i, r in enumerate(records)]

