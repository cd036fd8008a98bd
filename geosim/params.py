"""Read and write the simulator's parameters file (TOML, human units <-> Params, SI units)."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

from geosim.errors import GeosimError, toml_key_line
from geosim.specs import MIB, Params
from geosim.techniques._settings import check_value, file_tunables

# (TOML key, Params field, scale from file units to SI; int for whole numbers,
# None for flags). Scalars only; the dictionaries are handled below. This one table
# drives reading, writing and calibration of the simulator-wide parameters. A
# technique's own tunables are not here: each technique declares them in its Settings
# (geosim/techniques/<name>.py) and they are read from and written to the table [NAME].
SCALARS: tuple[tuple[str, str, float], ...] = (
    ("compute.gemm_fraction", "gemm_fraction", 1.0),
    ("compute.gemm_half_us", "gemm_half_s", 1e-6),
    ("compute.memory_fraction", "memory_fraction", 1.0),
    ("compute.kernel_us", "kernel_s", 1e-6),
    ("transport.window_mib", "window_bytes", float(MIB)),
    ("transport.streams", "streams", int),
    ("transport.stream_rate_gbps", "stream_rate_gbps", 1.0),
    ("transport.per_message_overhead_us", "per_message_overhead_s", 1e-6),
    ("transport.p2p_handshake_rtts", "p2p_handshake_rtts", 1.0),
    ("transport.collective_step_rtts", "collective_step_rtts", 1.0),
    ("transport.slow_start_after_idle", "slow_start_after_idle", None),
    ("transport.initial_window_kib", "initial_window_bytes", 1024.0),
    ("transport.idle_restart_ms", "idle_restart_s", 1e-3),
    ("host.latency_us", "intra_host_latency_s", 1e-6),
    ("host.nvlink_gbps", "nvlink_gbps", 1.0),
    ("host.lan_rtt_ms", "lan_rtt_s", 1e-3),
    ("host.lan_bandwidth_gbps", "lan_bandwidth_gbps", 1.0),
    ("xla.combine_mib", "combine_bytes", float(MIB)),
    ("memory.workspace_gib", "workspace_gib", 1.0),
    ("memory.usable_fraction", "usable_memory_fraction", 1.0),
    ("memory.margin_fraction", "memory_margin_fraction", 1.0),
    ("convergence.compressed_activation_efficiency", "compressed_activation_efficiency", 1.0),
)
# (lowest, highest) of each number; every value must also be finite. The ranges are wide
# (far beyond any real machine) and exist so that no parameters file can make a prediction
# infinite or NaN: a rate or an efficiency of 0 would divide by zero.
DEFAULT_BOUNDS = (0.0, 1e9)
BOUNDS = {
    "compute.gemm_fraction": (1e-4, 1.0),
    "compute.gemm_half_us": (0.0, 1e6),
    "compute.memory_fraction": (1e-4, 1.0),
    "compute.kernel_us": (0.0, 1e6),
    "transport.window_mib": (1e-3, 1e5),
    "transport.streams": (1, 1024),
    "transport.stream_rate_gbps": (1e-6, 1e5),
    "transport.per_message_overhead_us": (0.0, 1e6),
    "transport.p2p_handshake_rtts": (0.0, 1e3),
    "transport.collective_step_rtts": (0.0, 1e3),
    "transport.initial_window_kib": (1e-3, 1e8),
    "transport.idle_restart_ms": (0.0, 1e8),
    "host.latency_us": (0.0, 1e6),
    "host.nvlink_gbps": (1e-6, 1e6),
    "host.lan_rtt_ms": (0.0, 1e5),
    "host.lan_bandwidth_gbps": (1e-6, 1e5),
    "xla.combine_mib": (1e-3, 1e6),
    "memory.workspace_gib": (0.0, 1e5),
    "memory.usable_fraction": (0.05, 1.0),
    "memory.margin_fraction": (0.0, 0.9),
    "convergence.compressed_activation_efficiency": (1e-6, 10.0),
}
TABLE_BOUNDS = {
    "compute.efficiency": (1e-6, 1.0),
    "compute.gemm_fraction_by_architecture": (1e-4, 1.0),
    "host.pcie_gbps": (1e-6, 1e6),
    "overhead.iteration_s": (0.0, 1e5),
    "overhead.startup_s": (0.0, 1e8),
    "convergence.token_efficiency": (1e-6, 10.0),
}
TABLES = {  # TOML table -> Params field holding a dict
    "compute.efficiency": "efficiency",
    "compute.gemm_fraction_by_architecture": "gemm_fraction_by_architecture",
    "host.pcie_gbps": "pcie_gbps",
    "collectives": "collectives",
    "overhead.iteration_s": "iteration_overhead_s",
    "overhead.startup_s": "startup_s",
    "convergence.token_efficiency": "token_efficiency",
}
COLLECTIVE_ALGORITHMS = ("ring", "tree", "hierarchical")
DEFAULTS_FILE = "params-default.toml"
# keys of older parameters files that no longer mean anything (the per-GPU default efficiency gave way
# to the op-level compute model's fractions; state bytes follow from the precision): read and ignored
RETIRED = {"compute.default_efficiency", "memory.optimizer_bytes_per_param"}
# keys an older parameters file may still use -> their current name
RENAMED = {"zero2.bucket_mib": "xla.combine_mib"}


def _flatten(table: dict, prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path not in TABLES:
            flat.update(_flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def _check_number(value, source: str, key: str, bounds: tuple = DEFAULT_BOUNDS, *, integer: bool = False):
    from geosim.scenario import check_number

    return check_number(value, source, key, *bounds, integer=integer)


def _apply(params: Params | None, doc: dict, source: str) -> Params:
    values: dict[str, object] = {} if params is None else dict(params.__dict__)
    flat = _flatten({k: v for k, v in doc.items() if k != "fitted"})
    by_key = {key: (name, scale) for key, name, scale in SCALARS}
    setting_changes: dict[str, dict[str, object]] = {}
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
            values[name] = value
        else:
            value = _check_number(value, source, key, BOUNDS.get(key, DEFAULT_BOUNDS), integer=scale is int)
            values[name] = int(value) if scale is int else float(value) * scale
    values["technique_settings"] = _merge_settings(values.get("technique_settings") or {}, setting_changes)
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
            merged[int(name)] = float(_check_number(value, source, full, TABLE_BOUNDS[key]))
        else:
            merged[name] = float(_check_number(value, source, full, TABLE_BOUNDS.get(key, DEFAULT_BOUNDS)))
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
    from geosim.techniques import technique_names

    return name in technique_names()


def _technique_tunables(name: str) -> dict | None:
    """A technique's tunables as its table in the parameters file holds them; None: no such technique."""
    from geosim.techniques import settings_class, settings_parent, technique_names

    if name not in technique_names():
        return None
    parent = settings_parent(name)
    inherited = set(file_tunables(settings_class(parent))) if parent else set()
    return file_tunables(settings_class(name), inherited)


def _merge_settings(current: dict, changes: dict[str, dict[str, object]]) -> dict:
    """Every technique's Settings with the file's changes; a technique extending another's
    Settings takes the inherited values from that one's table."""
    import dataclasses

    from geosim.techniques import settings_class, settings_parent, technique_names

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


def setting_keys() -> list[tuple[str, str]]:
    """(technique, field) of every tunable any parameters file may hold, in technique order."""
    from geosim.techniques import technique_names

    return [(name, leaf) for name in technique_names() for leaf in _technique_tunables(name)]


def _read_toml(path: Path) -> tuple[dict, str]:
    from geosim.scenario import _toml_text, read_text

    text = read_text(path)
    return _toml_text(text, str(path)), text


def default_params() -> Params:
    text = resources.files("geosim.data").joinpath(DEFAULTS_FILE).read_text()
    return _apply(None, tomllib.loads(text), f"geosim/data/{DEFAULTS_FILE}")


def load_params(path: str | Path | None = None) -> Params:
    """The shipped defaults, overridden by the given file's values (any subset)."""
    params = default_params()
    if path is None:
        return params
    doc, text = _read_toml(Path(path))
    try:
        return _apply(params, doc, str(path))
    except GeosimError as exc:  # point at the line that holds the key
        if exc.source == str(path) and exc.lineno is None:
            raise GeosimError(exc.problem, source=exc.source, key=exc.key, line=toml_key_line(text, exc.key)) from None
        raise


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
        value = getattr(params, name)
        if scale is None or scale is int:
            put(key, value)
        else:
            put(key, float(value) / scale)
    for key, name in TABLES.items():
        table = getattr(params, name)
        put(key, {str(k): v for k, v in table.items()})
    for technique, leaf in setting_keys():
        put(f"{technique}.{leaf}", getattr(params.settings(technique), leaf))
    if fitted:
        doc["fitted"] = fitted
    return doc


def write_params(params: Params, path: str | Path, fitted: dict | None = None) -> None:
    """Write atomically: a reader never sees a half-written parameters file."""
    import tomli_w

    from geosim.fileio import write_atomic

    write_atomic(Path(path), tomli_w.dumps(params_to_toml(params, fitted)))
