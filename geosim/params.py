"""Read and write the simulator's parameters file (TOML, human units <-> Params, SI units)."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

from geosim.errors import GeosimError
from geosim.specs import MIB, TECHNIQUE_NAMES, Params

# (TOML key, Params field, scale from file units to SI; int for whole numbers,
# None for choices and flags). Scalars only; the
# dictionaries are handled below. This one table drives reading, writing and
# calibration, so a new parameter is one row here and one line in the defaults file.
SCALARS: tuple[tuple[str, str, float], ...] = (
    ("compute.default_efficiency", "default_efficiency", 1.0),
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
    ("zero2.gather_bytes_per_param", "zero2_gather_bytes_per_param", 1.0),
    ("shard.collectives_per_layer", "shard_collectives_per_layer", int),
    ("pipeshard.intra_stage", "pipeshard_intra_stage", None),
    ("pipeshard.schedule", "pipeline_schedule", None),
    ("pipeshard.stage_split", "stage_split", None),
    ("memory.workspace_gib", "workspace_gib", 1.0),
    ("memory.optimizer_bytes_per_param", "optimizer_bytes_per_param", 1.0),
    ("diloco.inner_steps", "diloco_inner_steps", int),
    ("diloco.outer_optimizer", "diloco_outer_optimizer", None),
    ("diloco.overlap", "diloco_overlap", None),
    ("diloco.fragments", "diloco_fragments", int),
    ("diloco.overlap_steps", "diloco_overlap_steps", int),
    ("diloco.sync_dtype_bytes", "diloco_sync_dtype_bytes", 1.0),
    ("sparseloco.inner_steps", "sparseloco_inner_steps", int),
    ("sparseloco.topk_fraction", "sparseloco_topk_fraction", 1.0),
    ("sparseloco.bits", "sparseloco_bits", int),
    ("sparseloco.index_bits", "sparseloco_index_bits", 1.0),
    ("sparseloco.error_feedback", "sparseloco_error_feedback", None),
    ("pipeshard.activation_compression", "pipeshard_activation_compression", 1.0),
    ("hybrid.activation_compression", "hybrid_activation_compression", 1.0),
    ("convergence.compressed_activation_efficiency", "compressed_activation_efficiency", 1.0),
)
# (lowest, highest) for the scalars whose range is narrower than ">= 0"
BOUNDS = {
    "diloco.inner_steps": (1, None),
    "diloco.fragments": (1, None),
    "diloco.sync_dtype_bytes": (0.125, 8.0),
    "sparseloco.inner_steps": (1, None),
    "sparseloco.topk_fraction": (1e-6, 1.0),
    "sparseloco.bits": (1, 32),
    "pipeshard.activation_compression": (1e-6, 1.0),
    "hybrid.activation_compression": (1e-6, 1.0),
    "convergence.compressed_activation_efficiency": (1e-6, None),
}
TABLES = {  # TOML table -> Params field holding a dict
    "compute.efficiency": "efficiency",
    "host.pcie_gbps": "pcie_gbps",
    "collectives": "collectives",
    "overhead.iteration_s": "iteration_overhead_s",
    "overhead.startup_s": "startup_s",
    "convergence.token_efficiency": "token_efficiency",
}
CHOICES = {
    "pipeshard.intra_stage": ("data", "shard"),
    "pipeshard.schedule": ("1f1b", "gpipe"),
    "pipeshard.stage_split": ("uniform", "balanced"),
    "diloco.outer_optimizer": ("nesterov", "sgd"),
}
COLLECTIVE_ALGORITHMS = ("ring", "tree", "hierarchical")
DEFAULTS_FILE = "params-default.toml"
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


def _check_number(value, source: str, key: str, *, minimum: float = 0.0, integer: bool = False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GeosimError(f"must be a number, got {value!r}", source=source, key=key)
    if integer and int(value) != value:
        raise GeosimError(f"must be a whole number, got {value!r}", source=source, key=key)
    if value < minimum:
        raise GeosimError(f"must be >= {minimum}, got {value!r}", source=source, key=key)
    return value


def _apply(params: Params | None, doc: dict, source: str) -> Params:
    values: dict[str, object] = {} if params is None else dict(params.__dict__)
    flat = _flatten({k: v for k, v in doc.items() if k != "fitted"})
    by_key = {key: (name, scale) for key, name, scale in SCALARS}
    for key, value in flat.items():
        key = RENAMED.get(key, key)
        if key in TABLES:
            values[TABLES[key]] = _read_table(key, value, values.get(TABLES[key]), source)
            continue
        if key not in by_key:
            raise GeosimError("unknown parameter", source=source, key=key)
        name, scale = by_key[key]
        if scale is None:  # a choice or a flag
            if key in CHOICES and value not in CHOICES[key]:
                raise GeosimError(f"must be one of {', '.join(CHOICES[key])}, got {value!r}", source=source, key=key)
            if key not in CHOICES and not isinstance(value, bool):
                raise GeosimError(f"must be true or false, got {value!r}", source=source, key=key)
            values[name] = value
        else:
            _check_number(value, source, key, integer=scale is int)
            low, high = BOUNDS.get(key, (0.0, None))
            if value < low or (high is not None and value > high):
                raise GeosimError(f"must be in [{low:g}, {'inf' if high is None else f'{high:g}'}], got {value!r}",
                                  source=source, key=key)
            values[name] = int(value) if scale is int else float(value) * scale
    fitted = doc.get("fitted", {})
    if fitted:
        values["fitted_on"] = tuple(str(x) for x in fitted.get("on", ()))
    values["source"] = source
    try:
        return Params(**values)
    except TypeError as exc:  # a defaults file missing a key
        raise GeosimError(f"incomplete parameters ({exc})", source=source) from None


def _read_table(key: str, table, previous, source: str) -> dict:
    if not isinstance(table, dict):
        raise GeosimError("must be a table", source=source, key=key)
    merged = dict(previous or {})
    for name, value in table.items():
        full = f"{key}.{name}"
        if key == "collectives":
            if name not in TECHNIQUE_NAMES and not _is_registered_technique(name):
                raise GeosimError("unknown technique", source=source, key=full)
            if value not in COLLECTIVE_ALGORITHMS:
                raise GeosimError(
                    f"must be one of {', '.join(COLLECTIVE_ALGORITHMS)}, got {value!r}", source=source, key=full
                )
            merged[name] = value
        elif key == "host.pcie_gbps":
            if not name.isdigit():
                raise GeosimError("PCIe generation must be a number", source=source, key=full)
            merged[int(name)] = float(_check_number(value, source, full))
        else:
            merged[name] = float(_check_number(value, source, full))
    return merged


def _is_registered_technique(name: str) -> bool:
    from geosim.techniques import technique_names

    return name in technique_names()


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise GeosimError("no such file", source=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise GeosimError(f"not valid TOML ({exc})", source=str(path)) from None


def default_params() -> Params:
    text = resources.files("geosim.data").joinpath(DEFAULTS_FILE).read_text()
    return _apply(None, tomllib.loads(text), f"geosim/data/{DEFAULTS_FILE}")


def load_params(path: str | Path | None = None) -> Params:
    """The shipped defaults, overridden by the given file's values (any subset)."""
    params = default_params()
    if path is None:
        return params
    return _apply(params, _read_toml(Path(path)), str(path))


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
    if fitted:
        doc["fitted"] = fitted
    return doc


def write_params(params: Params, path: str | Path, fitted: dict | None = None) -> None:
    """Write atomically: a reader never sees a half-written parameters file."""
    import os
    import tempfile

    import tomli_w

    path = Path(path)
    text = tomli_w.dumps(params_to_toml(params, fitted))
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)

