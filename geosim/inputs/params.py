"""Read and write the simulator's parameters file (TOML, human units <-> Params, SI units)."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from importlib import resources
from pathlib import Path

from geosim.base import plausibility, parameters
from geosim.base.errors import GeosimError, toml_key_line
from geosim.base.parameters import (COLLECTIVE_ALGORITHMS, DEFAULT_RANGE, FLAG, WHOLE, TABLE_BY_KEY, Scalar,
                               TABLES as DECLARED_TABLES)
from geosim.sim.network import network_parameters
from geosim.inputs.specs import Params
from geosim.techniques._settings import check_value, file_tunables
from geosim.base.fileio import write_atomic
from geosim.inputs.runtime import changed_runtimes, runtime_changes_table
from geosim.inputs.scenario import check_number, read_toml
from geosim.techniques import settings_class, settings_parent, technique_names

# Every simulator-wide parameter is declared once, in geosim/base/parameters.py (key, unit, range,
# prior, fit range, source); the tables below are views of that declaration for reading and
# writing. A technique's own tunables are not here: each technique declares them in its Settings
# (geosim/techniques/<name>.py) and they are read from and written to the table [NAME].
# A network backend's constants are declared by the model (geosim/sim/network/<model>.py, PARAMETERS,
# held by the file's table TABLE: [transport] for tcp) and live in Params.networks[model]; the
# simulator-wide ones are Params fields. ALL_SCALARS is both; NETWORK_KEYS: key -> the model that owns it.
NETWORK_KEYS: dict[str, str] = {p.key: model for model, (_, declared, _) in network_parameters().items()
                                for p in declared}
ALL_SCALARS: tuple[Scalar, ...] = (*parameters.SCALARS,
                                   *(p for _, declared, _ in network_parameters().values() for p in declared))
SCALAR_BY_KEY: dict[str, Scalar] = {p.key: p for p in ALL_SCALARS}
# (TOML key, field, scale from file units to SI; int for whole numbers, None for flags); the field is
# Params' or, for a key of NETWORK_KEYS, the model's Settings' (scalar_si / with_scalar read and set either)
SCALARS: tuple[tuple[str, str, float], ...] = tuple(
    (p.key, p.field, None if p.unit == FLAG else int if p.unit == WHOLE else p.scale) for p in ALL_SCALARS)
BOUNDS = {p.key: p.range for p in ALL_SCALARS if p.unit != FLAG}  # (lowest, highest), file units
TABLE_BOUNDS = {t.key: t.range for t in DECLARED_TABLES if not t.choices}
TABLES = {t.key: t.field for t in DECLARED_TABLES}  # TOML table -> Params field holding a dict
DEFAULTS_FILE = "params-default.toml"
# [runtime.NAME]: a runtime's fixed costs where a fit changed them (Params.runtimes; the keys and units of
# geosim/data/runtimes.toml, which declares them; only what differs from the shipped runtime is written)
RUNTIME_TABLE = "runtime"
# keys of older parameters files that no longer mean anything (the per-GPU default efficiency gave way
# to the op-level kernel timer's fractions; state bytes follow from the precision): read and ignored
RETIRED = {"compute.default_efficiency", "memory.optimizer_bytes_per_param"}
# tables of older parameters files whose values moved: a GPU generation's constants are a runtime's efficiency
# on it now (geosim/data/runtimes.toml [RUNTIME.efficiency.GENERATION]): read and ignored
RETIRED_TABLES = {"compute.gemm_fraction_by_architecture", "compute.memory_fraction_by_architecture",
                  "compute.gemm_half_us_by_architecture"}
# keys an older parameters file may still use -> their current name
RENAMED = {"zero2.bucket_mib": "xla.combine_mib", "compute.efficiency": "compute.flat_fraction"}


def fittable() -> dict[str, Scalar]:
    """Every scalar a fit may move (simulator-wide and the network backends'), key -> declaration."""
    return parameters.fittable(ALL_SCALARS)


def priors() -> dict[str, tuple[float, float]]:
    """key -> (centre, 1-sigma of its log) of every scalar with a prior."""
    return parameters.priors(ALL_SCALARS)


def scalar_si(params: Params, key: str):
    """The value of a declared scalar (a file key), in SI units, wherever it lives."""
    field = SCALAR_BY_KEY[key].field
    model = NETWORK_KEYS.get(key)
    return getattr(params if model is None else params.network(model), field)


def with_scalar(params: Params, key: str, value) -> Params:
    """params with a declared scalar (a file key) set to value, in SI units."""
    field = SCALAR_BY_KEY[key].field
    model = NETWORK_KEYS.get(key)
    return replace(params, **{field: value}) if model is None else params.with_network(model, **{field: value})


def _flatten(table: dict, prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in table.items():
        path = RENAMED.get(f"{prefix}{key}", f"{prefix}{key}")
        if path in RETIRED_TABLES:
            continue
        if isinstance(value, dict) and path not in TABLES:
            flat.update(_flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def _check_number(value, source: str, key: str, bounds: tuple = DEFAULT_RANGE, *, integer: bool = False):
    return check_number(value, source, key, *bounds, integer=integer)


def _apply(params: Params | None, doc: dict, source: str) -> Params:
    values: dict[str, object] = {} if params is None else dict(params.__dict__)
    flat = _flatten({k: v for k, v in doc.items() if k not in ("fitted", RUNTIME_TABLE)})
    by_key = {key: (name, scale) for key, name, scale in SCALARS}
    setting_changes: dict[str, dict[str, object]] = {}
    network_changes: dict[str, dict[str, object]] = {}
    for key, value in flat.items():
        key = RENAMED.get(key, key)
        if key in RETIRED:
            continue
        if key in TABLES:
            values[TABLES[key]] = _read_table(key, value, values.get(TABLES[key]), source)
            continue
        technique, _, leaf = key.partition(".")
        if key not in by_key and leaf and _technique_tunables(technique) is not None:
            tunable = _technique_tunables(technique).get(leaf)
            if tunable is None:
                raise GeosimError(f"unknown setting of technique {technique}", source=source, key=key)
            setting_changes.setdefault(technique, {})[leaf] = check_value(tunable, value, source, key)
            continue
        if key not in by_key:
            raise GeosimError("unknown parameter", source=source, key=key)
        name, scale = by_key[key]
        if scale is None:  # a flag
            if not isinstance(value, bool):
                raise GeosimError(f"must be true or false, got {value!r}", source=source, key=key)
        else:
            value = _check_number(value, source, key, BOUNDS.get(key, DEFAULT_RANGE), integer=scale is int)
            value = int(value) if scale is int else float(value) * scale
        if key in NETWORK_KEYS:
            network_changes.setdefault(NETWORK_KEYS[key], {})[name] = value
        else:
            values[name] = value
    values["technique_settings"] = _merge_settings(values.get("technique_settings") or {}, setting_changes)
    values["networks"] = _network_settings(values.get("networks") or {}, network_changes, source)
    if RUNTIME_TABLE in doc:
        values["runtimes"] = changed_runtimes(doc[RUNTIME_TABLE], values.get("runtimes") or {}, source)
    fitted = doc.get("fitted", {})
    if not isinstance(fitted, dict):
        raise GeosimError("must be a table", source=source, key="fitted")
    if fitted:
        values["fitted_on"] = _strings(fitted.get("on", []), source, "fitted.on")
        values["fit_warnings"] = _strings(fitted.get("warnings", []), source, "fitted.warnings")
        values["fitted_covariance"] = _read_covariance(fitted.get("covariance"), source)
    values["source"] = source
    try:
        return Params(**values)
    except TypeError as exc:  # a defaults file missing a key
        raise GeosimError(f"incomplete parameters ({exc})", source=source) from None


def _strings(value, source: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise GeosimError("must be a list of strings", source=source, key=key)
    return tuple(value)


def _read_table(key: str, table, previous, source: str) -> dict:
    if not isinstance(table, dict):
        raise GeosimError("must be a table", source=source, key=key)
    merged = dict(previous or {})
    for name, value in table.items():
        full = f"{key}.{name}"
        if key == "collectives":
            if not _is_registered_technique(name):
                raise GeosimError("unknown technique", source=source, key=full)
            if value not in COLLECTIVE_ALGORITHMS:
                raise GeosimError(
                    f"must be one of {', '.join(COLLECTIVE_ALGORITHMS)}, got {value!r}", source=source, key=full
                )
            merged[name] = value
        elif key == "host.pcie_gbps":
            if not name.isdigit():
                raise GeosimError("PCIe generation must be a number", source=source, key=full)
            merged[int(name)] = float(_check_number(value, source, full, TABLE_BOUNDS[key])) * TABLE_BY_KEY[key].scale
        else:
            merged[name] = float(_check_number(value, source, full, TABLE_BOUNDS.get(key, DEFAULT_RANGE))) * TABLE_BY_KEY[key].scale
    return merged


def _read_covariance(table, source: str) -> tuple:
    """[fitted.covariance]: names (global parameter keys) and the covariance matrix of their logs."""
    if table is None:
        return ()
    key = "fitted.covariance"
    if not isinstance(table, dict) or not isinstance(table.get("names"), list) or not isinstance(table.get("matrix"), list):
        raise GeosimError("must be a table with names = [...] and matrix = [[...], ...]", source=source, key=key)
    names, matrix = table["names"], table["matrix"]
    by_key = {k for k, _, _ in SCALARS} | {"overhead.iteration_s.shared"}
    for name in names:
        if name not in by_key and not str(name).startswith("overhead.iteration_s."):
            raise GeosimError(f"unknown parameter {name!r}", source=source, key=key + ".names")
    n = len(names)
    if len(matrix) != n or any(not isinstance(row, list) or len(row) != n for row in matrix):
        raise GeosimError(f"matrix must be {n} x {n}, one row per name", source=source, key=key + ".matrix")
    for row in matrix:
        for v in row:
            _check_number(v, source, key + ".matrix", (-1e6, 1e6))
    return (tuple(names), tuple(tuple(float(v) for v in row) for row in matrix))


def _is_registered_technique(name: str) -> bool:

    return name in technique_names()


def _technique_tunables(name: str) -> dict | None:
    """A technique's tunables as its table in the parameters file holds them; None: no such technique."""

    if name not in technique_names():
        return None
    parent = settings_parent(name)
    inherited = set(file_tunables(settings_class(parent))) if parent else set()
    return file_tunables(settings_class(name), inherited)


def _merge_settings(current: dict, changes: dict[str, dict[str, object]]) -> dict:
    """Every technique's Settings with the file's changes; a technique extending another's
    Settings takes the inherited values from that one's table."""
    import dataclasses


    merged = {}
    for name in technique_names():
        merged[name] = dataclasses.replace(current.get(name) or settings_class(name)(), **changes.get(name, {}))
    for name in technique_names():
        parent = settings_parent(name)
        if parent:
            own = set(file_tunables(settings_class(name))) - set(file_tunables(settings_class(parent)))
            inherited = {f: getattr(merged[parent], f) for f in file_tunables(settings_class(parent))}
            merged[name] = dataclasses.replace(merged[name], **inherited,
                                               **{f: getattr(merged[name], f) for f in own})
    return merged


def _network_settings(current: dict, changes: dict[str, dict[str, object]], source: str) -> dict:
    """Every network backend's Settings with the file's changes (the shipped file holds every value)."""
    merged = {}
    for model, (table, declared, network_settings) in network_parameters().items():
        try:
            merged[model] = (replace(current[model], **changes.get(model, {})) if model in current
                             else network_settings(**changes.get(model, {})))
        except TypeError as exc:  # a defaults file missing a key
            raise GeosimError(f"incomplete [{table}] parameters of the {model} network backend ({exc})",
                              source=source) from None
    return merged


def setting_keys() -> list[tuple[str, str]]:
    """(technique, field) of every tunable any parameters file may hold, in technique order."""

    return [(name, leaf) for name in technique_names() for leaf in _technique_tunables(name)]


def default_params() -> Params:
    text = resources.files("geosim.data").joinpath(DEFAULTS_FILE).read_text()
    return _apply(None, tomllib.loads(text), f"geosim/data/{DEFAULTS_FILE}")


def load_params(path: str | Path | None = None) -> Params:
    """The shipped defaults, overridden by the given file's values (any subset)."""
    params = default_params()
    if path is None:
        return params
    doc, text = read_toml(Path(path))
    try:
        loaded = _apply(params, doc, str(path))
        _warn_implausible(doc, str(path))
        return loaded
    except GeosimError as exc:  # point at the line that holds the key
        if exc.source == str(path) and exc.lineno is None:
            raise GeosimError(exc.problem, source=exc.source, key=exc.key, line=toml_key_line(text, exc.key)) from None
        raise


# parameters whose values real networks bound (geosim.base.plausibility's ranges): a valid value outside
# them is usually a unit slip, so it warns once, naming the file and the key
PLAUSIBLE_KEYS = {"host.lan_rtt_ms": "rtt_ms", "host.lan_bandwidth_gbps": "bandwidth_gbps",
                  "transport.window_mib": "window_mib"}


def _warn_implausible(doc: dict, source: str) -> None:
    for key, kind in PLAUSIBLE_KEYS.items():
        node = doc
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, (int, float)) and not isinstance(node, bool):
            plausibility.check(node, source, key, kind)


def params_to_toml(params: Params, fitted: dict | None = None) -> dict:
    """The nested TOML document for params (inverse of load_params)."""
    doc: dict = {}

    def put(key: str, value):
        *parents, leaf = key.split(".")
        node = doc
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value

    for key, name, scale in SCALARS:
        value = scalar_si(params, key)
        if scale is None or scale is int:
            put(key, value)
        else:
            put(key, float(value) / scale)
    for key, name in TABLES.items():
        table = getattr(params, name)
        scale = TABLE_BY_KEY[key].scale
        put(key, {str(k): v if scale == 1.0 else v / scale for k, v in table.items()})
    for technique, leaf in setting_keys():
        put(f"{technique}.{leaf}", getattr(params.settings(technique), leaf))
    for name, runtime in sorted((params.runtimes or {}).items()):
        table = runtime_changes_table(runtime)
        if table:
            doc.setdefault(RUNTIME_TABLE, {})[name] = table
    if fitted:
        doc["fitted"] = fitted
    return doc


def write_params(params: Params, path: str | Path, fitted: dict | None = None) -> None:
    """Write atomically: a reader never sees a half-written parameters file."""
    import tomli_w


    write_atomic(Path(path), tomli_w.dumps(params_to_toml(params, fitted)))
