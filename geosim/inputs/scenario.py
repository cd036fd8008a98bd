"""Load and validate scenario files (TOML) into specs, with one-line errors.

Every value is checked for its type and a finite range before it reaches a spec, so a
mistake in a file is one line (`file:line: key: problem`, exit 2), never a traceback or a
NaN later in the simulator. The ranges are wide (far beyond any real slice) and exist to
keep every prediction finite; they are listed in docs/reference/run-records.md.

Over 400 lines: one reader per table of a scenario file (hosts, links, GPUs, workload), each with
the checks of its keys beside them; the checks are most of it.
"""

from __future__ import annotations

import re

import tomllib
from dataclasses import fields, replace
from functools import cache
from importlib import resources
from pathlib import Path

from geosim.base import plausibility
from geosim.inputs.catalog_match import match_catalog
from geosim.base.errors import GeosimError, toml_key_line
from geosim.base.generations import check_generation, generations
from geosim.base.input_limits import SMALL_TEXT_MAX_BYTES, TOML_MAX_BYTES, loads_toml, read_input
from geosim.inputs.model_config import MODEL_RANGES, model_from_config_file, model_from_table  # noqa: F401 (MODEL_RANGES: the CLI's bounds)
from geosim.base.parameters import STEP_RTTS_RANGE, TCP_STREAMS_RANGE, TCP_WINDOW_MIB_RANGE
from geosim.inputs.specs import GPU, TRANSPORTS, Cluster, Host, Link, Model, Shaper, Workload
from geosim.base.units import KIB, MIB, gbps_to_bps, ms_to_s
from geosim.base.sites import estimate_rtt_ms, find_site
from geosim.base.validate import check_number, regular_input  # noqa: F401 (the one number check; imported from here by others)

BUILTIN_SCENARIOS = ("tacc-tacc", "utah-gpn", "utah-mass", "bris-star", "gat-amst")
PRECISIONS = ("fp16", "bf16", "fp32")
NIC_KINDS = ("shared", "per-gpu")
# a [[hosts]] entry's keys: transport names how it reaches its site's other hosts (tcp or rdma), nic_gbps
# each NIC's rate, tcp_window_mib the TCP window its sockets open (Linux: tcp_rmem's maximum, half advertised)
HOST_KEYS = {"name", "site", "gpus", "intra_host", "nic", "count", "transport", "nic_gbps", "tcp_window_mib"}

# (lowest, highest) of every number a scenario may hold; a lowest of 0 on a "> 0" value is exclusive
# (a link's window, streams and step_rtts override the [transport] parameters': one bound for both)
LINK_RANGES = {"rtt_ms": (0.0, 1e5), "bandwidth_gbps": (1e-6, 1e5), "window_mib": TCP_WINDOW_MIB_RANGE,
               "streams": TCP_STREAMS_RANGE, "step_rtts": STEP_RTTS_RANGE, "loss": (0.0, 0.5),
               "competing_flows": (0.0, 1e6)}
GPU_RANGES = {"memory_gib": (1e-3, 1e5), "memory_bandwidth_gbs": (1e-3, 1e7), "fp32_tflops": (1e-3, 1e7),
              "fp16_tensor_tflops": (1e-3, 1e7), "bf16_tensor_tflops": (1e-3, 1e7), "tf32_tensor_tflops": (1e-3, 1e7),
              "pcie_gen": (1, 9),
              "tdp_w": (1.0, 1e5), "nvlink_gbs": (1e-3, 1e6)}
WORKLOAD_RANGES = {"tokens_per_epoch": (1, 10**13), "seq_len": (1, 1_000_000), "global_batch": (1, 10_000_000),
                   "microbatches": (1, 4096), "epochs": (1, 1_000_000)}
# counts that multiply a prediction's work (docs/reference/cli.md, "Bounds on numbers"): far above
# any slice simulated today (1,024 hosts, 8,192 GPUs are in reach), low enough to refuse a typo
MAX_HOSTS = 4096
MAX_GPUS_PER_HOST = 64
MAX_GPUS = 65_536


def opens_kernel_window(site: str, window_mib: float | None) -> bool:
    """Whether a host opens what its kernel autotunes to ([transport] kernel_window_mib): one that states no
    window and is no FABRIC VM (a site of geosim/data/fabric-sites.toml: those keep FABRIC's fitted
    window_mib). One rule for a scenario file's hosts and a generated cluster's (scale:)."""
    return window_mib is None and find_site(site) is None

def parse_toml(text: str, source: str) -> dict:
    try:
        return loads_toml(text, source)  # size, nesting and dotted keys bounded first
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        msg = getattr(exc, "msg", None) or str(exc)
        raise GeosimError(f"not valid TOML ({msg})", source=source, line=line) from None


def read_text(path: Path, limit: int = TOML_MAX_BYTES, what: str = "TOML file geosim reads") -> str:
    """A text file's contents, or a one-line error (missing, unreadable, not UTF-8, not a regular
    file: a FIFO would block the read, a device never end it)."""
    return read_input(path, limit, what)  # the one reader: regular, bounded, strict UTF-8


def read_toml(path: Path) -> tuple[dict, str]:
    """A TOML file's document and its text (the text: for the line of a key in an error), or a one-line error."""
    text = read_text(path)
    return parse_toml(text, str(path)), text


def _only_keys(table: dict, allowed: set[str], required: set[str], source: str, prefix: str):
    for key in table:
        if key not in allowed:
            raise GeosimError(f"unknown key (expected one of: {', '.join(sorted(allowed))})", source=source, key=f"{prefix}{key}")
    for key in sorted(required):
        if key not in table:
            raise GeosimError("missing", source=source, key=f"{prefix}{key}")


def _table(value, source: str, key: str) -> dict:
    if not isinstance(value, dict):
        raise GeosimError(f"must be a table, got {type(value).__name__} {_short(value)}", source=source, key=key)
    return value


def _string(value, source: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise GeosimError(f"must be a non-empty string, got {_short(value)}", source=source, key=key)
    return value


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _positive(value, source: str, key: str, *, allow_zero: bool = False) -> float:
    """Kept for callers outside this module: a finite number > 0 (>= 0 with allow_zero)."""
    return check_number(value, source, key, 0.0, 1e300, exclusive_low=not allow_zero)


# how live/train/record.py names a CPU device ("CPU share (2 cores / 1 devices)"): architecture "cpu"
CPU_DEVICE_PREFIX = "CPU share"


def _gpu_from_table(name: str, table, source: str, prefix: str, catalog: dict[str, GPU] | None = None) -> GPU:
    """One GPU's table. Its generation: the `architecture` key; else, in the catalog file, the word in
    parentheses that ends its name ("NVIDIA Tesla T4 (Turing)"); else, in a scenario, the catalog's
    generation for a GPU the catalog knows (by its key or its name, geosim.inputs.catalog_match); else refused."""
    table = _table(table, source, prefix.rstrip("."))
    numeric = set(GPU_RANGES)
    optional = {"bf16_tensor_tflops", "tf32_tensor_tflops", "tdp_w", "nvlink_gbs"}
    _only_keys(table, numeric | {"name", "architecture", "source"}, numeric - optional, source, prefix)
    values = {k: check_number(v, source, prefix + k, *GPU_RANGES[k], integer=k == "pcie_gen")
              for k, v in table.items() if k in numeric}
    for key in ("name", "source"):
        if key in table:
            _string(table[key], source, prefix + key)
    architecture = table.get("architecture")
    if architecture is None and str(table.get("name", "")).startswith(CPU_DEVICE_PREFIX):
        architecture = "cpu"  # a live record's CPU device, written before records named its architecture
    known = None if catalog is None else (name if name in catalog else
                                          match_catalog(str(table.get("name", name)), catalog, values.get("memory_gib")))
    if known is not None:  # a GPU the catalog knows, written by hand: the catalog's generation
        if architecture is not None and str(architecture).lower() != catalog[known].architecture:
            raise GeosimError(f"is the catalog's {known}, a {catalog[known].architecture} GPU, not "
                              f"{architecture!r} (leave architecture out, or rename the GPU)", source=source,
                              key=prefix + "architecture")
        architecture = catalog[known].architecture
    if architecture is None and catalog is None:  # the catalog's descriptions end in the generation
        found = re.search(r"\(([A-Za-z]+)\)\s*$", str(table.get("name", "")))
        architecture = found.group(1) if found else None
    if architecture is None:
        choices = " | ".join(f'"{g}"' for g in generations())
        raise GeosimError(f"a GPU the catalog does not know must name its generation: architecture = {choices} "
                          "(geosim/data/generations.toml)", source=source, key=prefix + "architecture")
    architecture = _string(architecture, source, prefix + "architecture")
    if architecture.lower() != "cpu":  # valid, but does any GPU have it? (the ranges are GPUs'; a CPU share is slower)
        architecture = check_generation(architecture, source, prefix + "architecture")
        for key, value in values.items():
            plausibility.check(value, source, prefix + key)
    return GPU(name=name, architecture=architecture.lower(), **values)


def _model_from_table(name: str, table, source: str, prefix: str) -> Model:
    """A scenario's or the catalog's model: its shape's keys, or `config`, a Hugging Face config.json
    (a path relative to the file that names it)."""
    table = _table(table, source, prefix.rstrip("."))
    if "config" in table:
        _only_keys(table, {"config"}, set(), source, prefix)
        path = Path(_string(table["config"], source, prefix + "config"))
        if not path.is_absolute():
            path = (Path(source).parent if source != MODELS_TOML else CONFIGS_DIR) / path
        return model_from_config_file(path, name, source=f"{source}: {prefix}config ({path.name})")
    return model_from_table(name, table, source, prefix)


@cache
def gpu_catalog() -> dict[str, GPU]:
    doc = parse_toml(resources.files("geosim.data").joinpath("gpus.toml").read_text(), "geosim/data/gpus.toml")
    raw = {name: _gpu_from_table(name, t, "geosim/data/gpus.toml", f"{name}.") for name, t in doc.items()}
    return {name: _with_power_cap(g, _generation_tflops_per_watt(raw)) for name, g in raw.items()}


def _generation_tflops_per_watt(catalog: dict[str, GPU]) -> dict[str, float]:
    """Generation -> the least tensor TFLOP/s per watt of its cards in the catalog: what a card of
    that generation sustains per watt of board power (the kernel timer's cap, sim/compute.py)."""
    per_watt: dict[str, float] = {}
    for g in catalog.values():
        if g.tdp_w:
            ratio = g.fp16_tensor_tflops / g.tdp_w
            per_watt[g.architecture] = min(ratio, per_watt.get(g.architecture, ratio))
    return per_watt


def _with_power_cap(gpu: GPU, per_watt: dict[str, float]) -> GPU:
    return replace(gpu, generation_tflops_per_watt=per_watt.get(gpu.architecture))


MODELS_TOML = "geosim/data/models.toml"
CATALOG_ONLY_KEYS = {"aliases", "description", "source", "published_params", "published_rounded_to"}  # documentation, not the shape
CONFIGS_DIR = Path(str(resources.files("geosim.data").joinpath("model-configs")))  # the catalog's config.json files


@cache
def _catalog_doc() -> dict:
    return parse_toml(resources.files("geosim.data").joinpath("models.toml").read_text(), MODELS_TOML)


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
    by_dims = model_from_name(name)
    if by_dims is not None:
        return by_dims
    raise GeosimError(f"unknown model {name!r} (known: {', '.join(models)}; `geosim models` lists them)",
                      source=source)


# bounded digits (also below): an integer of thousands of digits is past Python's int-string limit, a traceback
DIMS_NAME = re.compile(r"gpt-(?P<n_layer>\d{1,9})x(?P<n_embd>\d{1,9})(?:-a(?P<n_head>\d{1,9}))?-v(?P<vocab>\d{1,9})"
                       r"(?:-s(?P<n_ctx>\d{1,9}))?")


def dims_name(n_layer: int, n_embd: int, n_head: int, vocab: int, n_ctx: int = 1024) -> str:
    """A model's name that says its dimensions: gpt-LAYERSxWIDTH-vVOCAB, with -aHEADS when the heads
    are not 64 wide and -sCONTEXT when the context is not 1024 (what imported records are called)."""
    heads = "" if n_embd % 64 == 0 and n_head == n_embd // 64 else f"-a{n_head}"
    return f"gpt-{n_layer}x{n_embd}{heads}-v{vocab}" + ("" if n_ctx == 1024 else f"-s{n_ctx}")


def model_from_name(name: str) -> Model | None:
    """gpt-24x1536-v51200 (see dims_name) -> that model, or None for a name of another form."""
    match = DIMS_NAME.fullmatch(name)
    if not match:
        return None
    dims = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    dims.setdefault("n_head", max(1, dims["n_embd"] // 64))
    try:
        model = Model(name=name, **dims)
    except TypeError:
        return None
    for key, (low, high) in MODEL_RANGES.items():
        if not low <= getattr(model, key) <= high:
            raise GeosimError(f"{key} {getattr(model, key)} out of range [{low}, {high}]", source=name, key="--model")
    if model.n_embd % model.n_head:
        raise GeosimError(f"the width {model.n_embd} must be divisible by the heads {model.n_head}", source=name,
                          key="--model")
    return model


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
    if not isinstance(values, dict):
        raise GeosimError(f"must be a table, got {_short(values)}", source=source, key="workload")
    for key, value in values.items():
        if key not in allowed:
            raise GeosimError(f"unknown key (expected one of: {', '.join(sorted(allowed))})", source=source, key=f"workload.{key}")
        if key == "precision":
            if value not in PRECISIONS:
                raise GeosimError(f"must be one of {', '.join(PRECISIONS)}, got {_short(value)}", source=source, key="workload.precision")
        elif key == "checkpointing":
            if not isinstance(value, bool):
                raise GeosimError(f"must be true or false, got {_short(value)}", source=source, key="workload.checkpointing")
        elif key == "runtime":  # a shipped runtime, or one a --params file adds: checked when it is run
            _string(value, source, "workload.runtime")
        else:
            check_number(value, source, f"workload.{key}", *WORKLOAD_RANGES[key], integer=True)
    workload = replace(Workload(), **{k: int(v) if k in WORKLOAD_RANGES else v for k, v in values.items()})
    if workload.global_batch % workload.microbatches:
        raise GeosimError(
            f"microbatches ({workload.microbatches}) must divide global_batch ({workload.global_batch})",
            source=source, key="workload.microbatches",
        )
    return workload


def load_scenario(name_or_path: str | Path) -> Scenario:
    path = scenario_path(str(name_or_path))
    source = str(path)
    doc, text = read_toml(path)
    try:
        return scenario_from_doc(doc, source, path.stem)
    except GeosimError as exc:
        if exc.source == source and exc.lineno is None:
            exc = GeosimError(exc.problem, source=exc.source, key=exc.key, line=toml_key_line(text, exc.key))
        raise exc from None


def scenario_from_doc(doc: dict, source: str, default_name: str = "scenario") -> Scenario:
    """A decoded scenario document (a file's TOML, or a record's inline cluster) -> Scenario."""
    _table(doc, source, "cluster")
    _only_keys(doc, {"name", "description", "reference_slice", "hosts", "links", "workload", "gpus", "models"},
               {"hosts"}, source, "")
    for key in ("name", "description", "reference_slice"):
        if key in doc:
            _string(doc[key], source, key)
    gpus = dict(gpu_catalog())
    for name, table in _table(doc.get("gpus", {}), source, "gpus").items():
        gpus[name] = _with_power_cap(_gpu_from_table(name, table, source, f"gpus.{name}.", gpu_catalog()),
                                     _generation_tflops_per_watt(gpu_catalog()))
    models = {name: _model_from_table(name, t, source, f"models.{name}.")
              for name, t in _table(doc.get("models", {}), source, "models").items()}
    hosts = _hosts(doc["hosts"], gpus, source)
    links = _links(doc.get("links", []), hosts, source)
    cluster = Cluster(
        name=str(doc.get("name", default_name)), hosts=tuple(hosts), links=tuple(links), source=source,
        reference_slice=doc.get("reference_slice"),
    )
    check_connected(cluster)
    scenario = Scenario(cluster, dict(_table(doc.get("workload", {}), source, "workload")), models)
    scenario.workload()  # validate the overrides now, against the file that holds them
    return scenario


# a host entry with `count = N` stands for N alike hosts: its name holds their numbers as a range
# (utah-[0-15]) or is their prefix (utah: utah-0 .. utah-15)
_NAME_RANGE = re.compile(r"^(.*)\[(\d{1,9})-(\d{1,9})\](.*)$")


def _expanded_hosts(value, source: str):
    """(entry index, its table, a host name) for every host the [[hosts]] entries stand for."""
    total = 0
    for i, table in enumerate(value):
        prefix = f"hosts[{i}]."
        table = _table(table, source, f"hosts[{i}]")
        _only_keys(table, HOST_KEYS, {"name", "site", "gpus"}, source, prefix)
        name = _string(table["name"], source, prefix + "name")
        names = [name]
        if "count" in table:
            count = check_number(table["count"], source, prefix + "count", 1, MAX_HOSTS, integer=True)
            names = _numbered(name, int(count), source, prefix)
        elif _NAME_RANGE.match(name):
            raise GeosimError(f"a range of names ({name!r}) needs count = the hosts it numbers", source=source,
                              key=prefix + "count")
        total += len(names)
        if total > MAX_HOSTS:
            raise GeosimError(f"at most {MAX_HOSTS} hosts, got more", source=source, key="hosts")
        for one in names:
            yield i, table, one


def _numbered(name: str, count: int, source: str, prefix: str) -> list[str]:
    match = _NAME_RANGE.match(name)
    if not match and re.search(r"\[\d+-\d+\]", name):
        raise GeosimError("a range of names with a number of more than 9 digits", source=source, key=prefix + "name")
    if not match:
        return [f"{name}-{k}" for k in range(count)]
    head, low, high, tail = match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)
    if high - low + 1 != count:
        raise GeosimError(f"{name!r} numbers {max(0, high - low + 1)} hosts, count says {count}", source=source,
                          key=prefix + "name")
    return [f"{head}{k}{tail}" for k in range(low, high + 1)]


def _hosts(value, gpus: dict[str, GPU], source: str) -> list[Host]:
    if not isinstance(value, list) or not value:
        raise GeosimError("must be a non-empty array of tables ([[hosts]])", source=source, key="hosts")
    if len(value) > MAX_HOSTS:
        raise GeosimError(f"at most {MAX_HOSTS} hosts, got {len(value)}", source=source, key="hosts")
    hosts: list[Host] = []
    seen: set[str] = set()
    entry_of: list[int] = []  # each host's [[hosts]] entry (one entry with a count stands for several)
    for i, table, name in _expanded_hosts(value, source):
        prefix = f"hosts[{i}]."
        site = _string(table["site"], source, prefix + "site")
        names = table["gpus"]
        if not isinstance(names, list) or not names:
            raise GeosimError(f"must be a non-empty list of GPU names, got {_short(names)}", source=source, key=prefix + "gpus")
        if len(names) > MAX_GPUS_PER_HOST:
            raise GeosimError(f"at most {MAX_GPUS_PER_HOST} GPUs per host, got {len(names)}", source=source, key=prefix + "gpus")
        for g in names:
            if not isinstance(g, str) or g not in gpus:
                raise GeosimError(f"unknown GPU {_short(g)} (known: {', '.join(gpus)})", source=source, key=prefix + "gpus")
        if name in seen:
            raise GeosimError(f"duplicate host name {name!r}", source=source, key=prefix + "name")
        intra = table.get("intra_host", "pcie")
        if intra not in ("pcie", "nvlink"):
            raise GeosimError(f"must be pcie or nvlink, got {_short(intra)}", source=source, key=prefix + "intra_host")
        nic = table.get("nic", "shared")
        if nic not in NIC_KINDS:
            raise GeosimError(f"must be {' or '.join(NIC_KINDS)}, got {_short(nic)}", source=source, key=prefix + "nic")
        transport = table.get("transport", "tcp")
        if transport not in TRANSPORTS:
            raise GeosimError(f"must be {' or '.join(TRANSPORTS)}, got {_short(transport)}", source=source,
                              key=prefix + "transport")
        nic_gbps = (check_number(table["nic_gbps"], source, prefix + "nic_gbps", *LINK_RANGES["bandwidth_gbps"])
                    if "nic_gbps" in table else None)
        window = (check_number(table["tcp_window_mib"], source, prefix + "tcp_window_mib", *LINK_RANGES["window_mib"])
                  if "tcp_window_mib" in table else None)
        kernel_window = opens_kernel_window(site, window)
        hosts.append(Host(name, site, tuple(gpus[g] for g in names), intra, nic, transport,
                          None if nic_gbps is None else gbps_to_bps(nic_gbps), None if window is None else window * MIB,
                          kernel_window))
        seen.add(name)
        entry_of.append(i)
    total = sum(len(h.gpus) for h in hosts)
    if total > MAX_GPUS:
        raise GeosimError(f"at most {MAX_GPUS:,} GPUs in all, got {total:,}", source=source, key="hosts")
    sites = {h.site for h in hosts}
    for i, h in enumerate(hosts):
        if h.name in sites and h.site != h.name:
            # a link's end names a host or a site: one name for both would be read either way
            raise GeosimError(f"{h.name!r} names a host and another host's site", source=source,
                              key=f"hosts[{entry_of[i]}].name")
    return hosts


def _links(value, hosts: list[Host], source: str) -> list[Link]:
    if not isinstance(value, list):
        raise GeosimError(f"must be an array of tables ([[links]]), got {_short(value)}", source=source, key="links")
    names = {h.name for h in hosts} | {h.site for h in hosts}
    links: list[Link] = []
    seen: dict[frozenset, int] = {}
    for i, table in enumerate(value):
        prefix = f"links[{i}]."
        table = _table(table, source, f"links[{i}]")
        _only_keys(table, {"between", "rtt_ms", "bandwidth_gbps", "window_mib", "streams", "step_rtts", "service",
                           "shaper", "loss", "competing_flows", "bandwidth_samples", "transport"},
                   {"between", "bandwidth_gbps"}, source, prefix)
        ends = table["between"]
        if (not isinstance(ends, list) or len(ends) != 2 or not all(isinstance(e, str) for e in ends)
                or ends[0] == ends[1]):
            raise GeosimError(f"must name two different hosts or sites, got {_short(ends)}", source=source, key=prefix + "between")
        for end in ends:
            if end not in names:
                raise GeosimError(f"{end!r} is neither a host nor a site of this scenario", source=source, key=prefix + "between")
        pair = frozenset(ends)
        if pair in seen:
            raise GeosimError(f"a second link between {ends[0]!r} and {ends[1]!r} (the first is links[{seen[pair]}])",
                              source=source, key=prefix + "between")
        seen[pair] = i
        if "service" in table:
            _string(table["service"], source, prefix + "service")
        number = {k: check_number(table[k], source, prefix + k, *LINK_RANGES[k], integer=k == "streams")
                  for k in LINK_RANGES if k in table}
        window, streams, step_rtts = number.get("window_mib"), number.get("streams"), number.get("step_rtts")
        for key in ("rtt_ms", "bandwidth_gbps", "window_mib"):  # valid, but does anything real have it?
            if key in number:
                plausibility.check(number[key], source, prefix + key)
        if "rtt_ms" in number:
            by_host = {h.name: h.site for h in hosts}
            plausibility.check_light_speed(number["rtt_ms"], by_host.get(ends[0], ends[0]),
                                           by_host.get(ends[1], ends[1]), source, prefix + "rtt_ms")
        estimated = "rtt_ms" not in number  # a measured RTT always wins over an estimate
        rtt_ms = _estimated_rtt_ms(ends, hosts, source, prefix) if estimated else number["rtt_ms"]
        links.append(Link(
            a=ends[0], b=ends[1], rtt_s=ms_to_s(rtt_ms), bandwidth_bps=gbps_to_bps(number["bandwidth_gbps"]),
            window_bytes=None if window is None else window * MIB, streams=streams, step_rtts=step_rtts,
            rtt_estimated=estimated, shaper=_shaper(table["shaper"], source, prefix) if "shaper" in table else None,
            loss=number.get("loss", 0.0), competing_flows=number.get("competing_flows", 0.0),
            bandwidth_samples=_bandwidth_samples(table["bandwidth_samples"], source, prefix + "bandwidth_samples")
            if "bandwidth_samples" in table else (),
            transport=_transport(table, source, prefix, _rdma_between(ends, hosts)),
        ))
    return links


def _rdma_between(ends: list[str], hosts: list[Host]) -> str:
    """A link's transport where it names none: RDMA between two hosts of one site that both run it (their
    InfiniBand or RoCE NICs are its ends: NCCL's IB transport takes it), TCP everywhere else."""
    by_name = {h.name: h for h in hosts}
    a, b = by_name.get(ends[0]), by_name.get(ends[1])
    if a is not None and b is not None and a.site == b.site and a.transport == b.transport == "rdma":
        return "rdma"
    return "tcp"


def _transport(table: dict, source: str, prefix: str, default: str = "tcp") -> str:
    transport = table.get("transport", default)
    if transport not in TRANSPORTS:
        raise GeosimError(f"must be {' or '.join(TRANSPORTS)}, got {_short(transport)}", source=source,
                          key=prefix + "transport")
    return transport


MAX_BANDWIDTH_SAMPLES = 100_000  # a day of one-second samples is far fewer; a draw picks one


def _bandwidth_samples(value, source: str, key: str) -> tuple[float, ...]:
    """A link's `bandwidth_samples`: Gbit/s values, inline (a list) or a file of them (a path relative to
    the scenario: one value a line, `#` comments) -> bit/s."""
    where = source
    if isinstance(value, str):
        path = Path(value) if Path(value).is_absolute() else Path(source).parent / value
        try:
            lines = read_input(path, SMALL_TEXT_MAX_BYTES, "bandwidth samples file").splitlines()
        except GeosimError as exc:  # named from the scenario that names it
            raise GeosimError(f"cannot read the samples file {value!r}: {exc.problem}", source=source, key=key) from None
        value, where = [], str(path)
        for n, line in enumerate(lines, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            try:
                value.append(float(text))
            except ValueError:
                # the line itself is not quoted: a file named by mistake may be a secret (/etc/shadow)
                raise GeosimError(f"line {n} is not a number of Gbit/s (one value a line); is this a samples file?",
                                  source=where, key=key) from None
    if not isinstance(value, list) or not value:
        raise GeosimError(f"must be a non-empty list of Gbit/s values or a file of them, got {_short(value)}",
                          source=source, key=key)
    if len(value) > MAX_BANDWIDTH_SAMPLES:
        raise GeosimError(f"at most {MAX_BANDWIDTH_SAMPLES:,} samples, got {len(value):,}", source=where, key=key)
    low, high = LINK_RANGES["bandwidth_gbps"]
    return tuple(gbps_to_bps(check_number(v, where, f"{key}[{i}]", low, high)) for i, v in enumerate(value))


SHAPER_RANGES = {"burst_kib": (0.0, 1e7), "queue_ms": (0.0, 1e5), "mtu": (576, 65536)}


def _shaper(value, source: str, prefix: str) -> Shaper:
    """A link's `shaper = {burst_kib = 67, queue_ms = 50, mtu = 1500, at_sender = false}`: its bandwidth is a
    token bucket's rate."""
    table = _table(value, source, prefix + "shaper")
    _only_keys(table, {*SHAPER_RANGES, "at_sender"}, {"burst_kib"}, source, prefix + "shaper.")
    number = {k: check_number(table[k], source, f"{prefix}shaper.{k}", *SHAPER_RANGES[k], integer=k == "mtu")
              for k in SHAPER_RANGES if k in table}
    at_sender = table.get("at_sender", False)
    if not isinstance(at_sender, bool):
        raise GeosimError(f"must be true or false, got {_short(at_sender)}", source=source,
                          key=prefix + "shaper.at_sender")
    return Shaper(burst_bytes=number["burst_kib"] * KIB, queue_s=number.get("queue_ms", 50.0) / 1e3,
                  mtu=int(number.get("mtu", 1500)), at_sender=at_sender)


def _estimated_rtt_ms(ends: list[str], hosts: list[Host], source: str, prefix: str) -> float:
    """A link without rtt_ms between two FABRIC sites: the RTT estimated from their distance."""

    by_host = {h.name: h.site for h in hosts}
    sites = [find_site(by_host.get(end, end)) for end in ends]
    if None in sites:
        unknown = [by_host.get(end, end) for end, site in zip(ends, sites) if site is None]
        raise GeosimError(f"missing, and it cannot be estimated: {', '.join(map(repr, unknown))} is not a FABRIC site "
                          f"(`geosim sites` lists them)", source=source, key=prefix + "rtt_ms")
    return estimate_rtt_ms(*sites)


def check_connected(cluster: Cluster) -> None:
    """Hosts at different sites need a link path between them; same-site hosts share a LAN."""
    neighbors: dict[str, set[str]] = {}
    for a, b in [(h.name, h.site) for h in cluster.hosts] + [(link.a, link.b) for link in cluster.links]:
        neighbors.setdefault(a, set()).add(b)
        neighbors.setdefault(b, set()).add(a)
    hosts = [h.name for h in cluster.hosts]
    reached, frontier = {hosts[0]}, [hosts[0]]
    while frontier:
        for node in neighbors.get(frontier.pop(), ()):
            if node not in reached:
                reached.add(node)
                frontier.append(node)
    for other in hosts[1:]:
        if other not in reached:
            raise GeosimError(f"host {other!r} has no link path to {hosts[0]!r}", source=cluster.source, key="links")
