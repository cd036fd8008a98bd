"""Load and validate scenario files (TOML) into specs, with one-line errors."""

from __future__ import annotations

import tomllib
from dataclasses import fields, replace
from functools import cache
from importlib import resources
from pathlib import Path

import networkx as nx

from geosim.errors import GeosimError
from geosim.specs import GPU, Cluster, Host, Link, Model, Workload
from geosim.units import ms_to_s

BUILTIN_SCENARIOS = ("tacc-tacc", "utah-gpn", "utah-mass", "bris-star", "gat-amst")
PRECISIONS = ("fp16", "bf16", "fp32")


def _toml_text(text: str, source: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GeosimError(f"not valid TOML ({exc})", source=source) from None


def _read(path: Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise GeosimError("no such file", source=str(path)) from None
    except OSError as exc:
        raise GeosimError(f"cannot read ({exc.strerror})", source=str(path)) from None
    return _toml_text(text, str(path))


def _only_keys(table: dict, allowed: set[str], required: set[str], source: str, prefix: str):
    for key in table:
        if key not in allowed:
            raise GeosimError(f"unknown key (expected one of: {', '.join(sorted(allowed))})", source=source, key=f"{prefix}{key}")
    for key in sorted(required):
        if key not in table:
            raise GeosimError("missing", source=source, key=f"{prefix}{key}")


def _positive(value, source: str, key: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GeosimError(f"must be a number, got {value!r}", source=source, key=key)
    if value < 0 or (value == 0 and not allow_zero):
        raise GeosimError(f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}", source=source, key=key)
    return float(value)


def _gpu_from_table(name: str, table: dict, source: str, prefix: str) -> GPU:
    numeric = {"memory_gib", "memory_bandwidth_gbs", "fp32_tflops", "fp16_tensor_tflops", "pcie_gen", "bf16_tensor_tflops"}
    _only_keys(table, numeric | {"name"}, numeric - {"bf16_tensor_tflops"}, source, prefix)
    values = {k: _positive(v, source, prefix + k) for k, v in table.items() if k in numeric}
    values["pcie_gen"] = int(values["pcie_gen"])
    return GPU(name=name, **values)


def _model_from_table(name: str, table: dict, source: str, prefix: str) -> Model:
    keys = {"n_layer", "n_embd", "n_head", "vocab", "n_ctx"}
    _only_keys(table, keys, {"n_layer", "n_embd", "n_head"}, source, prefix)
    for k, v in table.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise GeosimError(f"must be a positive whole number, got {v!r}", source=source, key=prefix + k)
    if table["n_embd"] % table["n_head"]:
        raise GeosimError("n_embd must be divisible by n_head", source=source, key=prefix + "n_head")
    return Model(name=name, **table)


@cache
def gpu_catalog() -> dict[str, GPU]:
    doc = _toml_text(resources.files("geosim.data").joinpath("gpus.toml").read_text(), "geosim/data/gpus.toml")
    return {name: _gpu_from_table(name, t, "geosim/data/gpus.toml", f"{name}.") for name, t in doc.items()}


MODELS_TOML = "geosim/data/models.toml"
CATALOG_ONLY_KEYS = {"aliases", "description"}  # a catalog entry's documentation, not the model's shape


@cache
def _catalog_doc() -> dict:
    return _toml_text(resources.files("geosim.data").joinpath("models.toml").read_text(), MODELS_TOML)


@cache
def catalog_models() -> dict[str, Model]:
    """Catalog name -> model, without the aliases (what `geosim models` lists)."""
    return {name: _model_from_table(name, {k: v for k, v in t.items() if k not in CATALOG_ONLY_KEYS}, MODELS_TOML,
                                    f"{name}.") for name, t in _catalog_doc().items()}


@cache
def model_catalog() -> dict[str, Model]:
    """Every name a model loads by: the study's aliases first (what its records and Alpa's logs of
    its runs are named), then the catalog's names. An alias's model carries the alias's name."""
    canonical = catalog_models()
    aliases = {alias: replace(canonical[name], name=alias) for alias, name in model_aliases().items()}
    return {**aliases, **canonical}


@cache
def model_aliases() -> dict[str, str]:
    """Alias -> catalog name (the study's names: gpt2m, gpt2L, gpt2l)."""
    return {alias: name for name, t in _catalog_doc().items() for alias in t.get("aliases", [])}


def model_description(name: str) -> str:
    return _catalog_doc().get(model_aliases().get(name, name), {}).get("description", "")


def get_model(name: str, extra: dict[str, Model] | None = None, source: str = "--model") -> Model:
    """A model by catalog name, alias or the scenario's own; an alias keeps the name it was asked by
    (the study's records say gpt2m, gpt2L)."""
    models = {**model_catalog(), **(extra or {})}
    if name in models:
        return models[name]
    raise GeosimError(f"unknown model {name!r} (known: {', '.join(models)}; `geosim models` lists them)",
                      source=source)


def scenario_path(name_or_path: str) -> Path:
    """A built-in scenario by name (e.g. 'utah-gpn') or a file path."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.exists():
        return candidate
    builtin = resources.files("geosim.scenarios").joinpath(f"{name_or_path.lower()}.toml")
    if builtin.is_file():
        return Path(str(builtin))
    raise GeosimError(
        f"no such scenario file or built-in scenario (built-in: {', '.join(BUILTIN_SCENARIOS)})", source=name_or_path
    )


def builtin_scenarios() -> list[Path]:
    return [scenario_path(name) for name in BUILTIN_SCENARIOS]


class Scenario:
    """A cluster plus the workload overrides and custom models a scenario file carries."""

    def __init__(self, cluster: Cluster, workload_overrides: dict, models: dict[str, Model]):
        self.cluster = cluster
        self.workload_overrides = workload_overrides
        self.models = models

    def workload(self, **overrides) -> Workload:
        values = {**self.workload_overrides, **{k: v for k, v in overrides.items() if v is not None}}
        return make_workload(values, self.cluster.source)


def make_workload(values: dict, source: str = "--workload") -> Workload:
    allowed = {f.name for f in fields(Workload)}
    for key, value in values.items():
        if key not in allowed:
            raise GeosimError(f"unknown key (expected one of: {', '.join(sorted(allowed))})", source=source, key=f"workload.{key}")
        if key == "precision":
            if value not in PRECISIONS:
                raise GeosimError(f"must be one of {', '.join(PRECISIONS)}, got {value!r}", source=source, key="workload.precision")
        elif key == "checkpointing":
            if not isinstance(value, bool):
                raise GeosimError(f"must be true or false, got {value!r}", source=source, key="workload.checkpointing")
        elif isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise GeosimError(f"must be a positive whole number, got {value!r}", source=source, key=f"workload.{key}")
    workload = replace(Workload(), **values)
    if workload.global_batch % workload.microbatches:
        raise GeosimError(
            f"microbatches ({workload.microbatches}) must divide global_batch ({workload.global_batch})",
            source=source, key="workload.microbatches",
        )
    return workload


def load_scenario(name_or_path: str | Path) -> Scenario:
    path = scenario_path(str(name_or_path))
    source = str(path)
    doc = _read(path)
    _only_keys(doc, {"name", "description", "reference_slice", "hosts", "links", "workload", "gpus", "models"},
               {"hosts"}, source, "")
    gpus = dict(gpu_catalog())
    for name, table in doc.get("gpus", {}).items():
        gpus[name] = _gpu_from_table(name, table, source, f"gpus.{name}.")
    models = {name: _model_from_table(name, t, source, f"models.{name}.") for name, t in doc.get("models", {}).items()}

    hosts: list[Host] = []
    if not isinstance(doc["hosts"], list) or not doc["hosts"]:
        raise GeosimError("must be a non-empty array of tables ([[hosts]])", source=source, key="hosts")
    for i, table in enumerate(doc["hosts"]):
        prefix = f"hosts[{i}]."
        _only_keys(table, {"name", "site", "gpus", "intra_host"}, {"name", "site", "gpus"}, source, prefix)
        if not isinstance(table["gpus"], list) or not table["gpus"]:
            raise GeosimError("must be a non-empty list of GPU names", source=source, key=prefix + "gpus")
        for g in table["gpus"]:
            if g not in gpus:
                raise GeosimError(f"unknown GPU {g!r} (known: {', '.join(gpus)})", source=source, key=prefix + "gpus")
        if any(h.name == table["name"] for h in hosts):
            raise GeosimError(f"duplicate host name {table['name']!r}", source=source, key=prefix + "name")
        intra = table.get("intra_host", "pcie")
        if intra not in ("pcie", "nvlink"):
            raise GeosimError(f"must be pcie or nvlink, got {intra!r}", source=source, key=prefix + "intra_host")
        hosts.append(Host(str(table["name"]), str(table["site"]), tuple(gpus[g] for g in table["gpus"]), intra))

    names = {h.name for h in hosts} | {h.site for h in hosts}
    links: list[Link] = []
    for i, table in enumerate(doc.get("links", [])):
        prefix = f"links[{i}]."
        _only_keys(table, {"between", "rtt_ms", "bandwidth_gbps", "window_mib", "streams", "step_rtts", "service"},
                   {"between", "rtt_ms", "bandwidth_gbps"}, source, prefix)
        ends = table["between"]
        if not isinstance(ends, list) or len(ends) != 2 or ends[0] == ends[1]:
            raise GeosimError("must name two different hosts or sites", source=source, key=prefix + "between")
        for end in ends:
            if end not in names:
                raise GeosimError(f"{end!r} is neither a host nor a site of this scenario", source=source, key=prefix + "between")
        streams = table.get("streams")
        if streams is not None and (isinstance(streams, bool) or not isinstance(streams, int) or streams < 1):
            raise GeosimError(f"must be a whole number >= 1, got {streams!r}", source=source, key=prefix + "streams")
        window = table.get("window_mib")
        step_rtts = table.get("step_rtts")
        if step_rtts is not None:
            _positive(step_rtts, source, prefix + "step_rtts", allow_zero=True)
        links.append(Link(
            a=ends[0], b=ends[1],
            rtt_s=ms_to_s(_positive(table["rtt_ms"], source, prefix + "rtt_ms", allow_zero=True)),
            bandwidth_bps=_positive(table["bandwidth_gbps"], source, prefix + "bandwidth_gbps") * 1e9,
            window_bytes=None if window is None else _positive(window, source, prefix + "window_mib") * 1024**2,
            streams=streams, step_rtts=None if step_rtts is None else float(step_rtts),
        ))
    cluster = Cluster(
        name=str(doc.get("name", path.stem)), hosts=tuple(hosts), links=tuple(links), source=source,
        reference_slice=doc.get("reference_slice"),
    )
    check_connected(cluster)
    scenario = Scenario(cluster, dict(doc.get("workload", {})), models)
    scenario.workload()  # validate the overrides now, against the file that holds them
    return scenario


def check_connected(cluster: Cluster) -> None:
    """Hosts at different sites need a link path between them; same-site hosts share a LAN."""
    graph = nx.Graph()
    for h in cluster.hosts:
        graph.add_edge(h.name, h.site)
    for link in cluster.links:
        graph.add_edge(link.a, link.b)
    hosts = [h.name for h in cluster.hosts]
    for other in hosts[1:]:
        if not nx.has_path(graph, hosts[0], other):
            raise GeosimError(f"host {other!r} has no link path to {hosts[0]!r}", source=cluster.source, key="links")
