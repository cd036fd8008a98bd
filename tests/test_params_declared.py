"""Each parameter is declared once (geosim/base/parameters.py; a network backend's in its module); the
defaults file, the parameters class, the fit's free set and the reference page are checked against
that declaration."""

from __future__ import annotations

import dataclasses
import sys
import tomllib
from pathlib import Path

import pytest

from geosim.base import parameters
from geosim.inputs.params import ALL_SCALARS, _flatten, load_params, params_to_toml, setting_keys
from geosim.sim.network import network_parameters
from geosim.inputs.specs import Params

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "geosim" / "data" / "params-default.toml"
# Params fields that are not parameters: where the values came from and what a fit said
PROVENANCE = {"source", "fitted_on", "fitted_covariance", "fit_warnings", "technique_settings",
              "networks",  # each network backend's Settings: declared by the model (checked below)
              "runtimes",  # a fit's runtime costs: declared once in geosim/data/runtimes.toml (geosim/inputs/runtime.py)
              "device_compute",  # a runtime's measured device constants: declared there too (device_compute)
              # a runtime's kernel choices and its efficiency per GPU generation: runtimes.toml's keys (geosim/inputs/runtime.py)
              "tf32_matmul", "fused_attention", "efficiency_by_generation", "efficiency_estimate"}


def shipped() -> dict:
    return _flatten({k: v for k, v in tomllib.loads(SHIPPED.read_text()).items() if k != "fitted"})


def test_the_shipped_file_holds_every_declared_key_and_no_other():
    keys = set(shipped())
    declared = {p.key for p in ALL_SCALARS} | {t.key for t in parameters.TABLES}
    settings = {f"{technique}.{leaf}" for technique, leaf in setting_keys()}
    assert declared - keys == set(), "declared but not shipped"
    assert keys - declared - settings == set(), "shipped but not declared"


def test_every_shipped_value_is_in_its_declared_range():
    values = shipped()
    for p in ALL_SCALARS:
        if p.unit != parameters.FLAG:
            assert p.range[0] <= values[p.key] <= p.range[1], p.key
        if p.fit is not None:
            assert p.range[0] <= p.fit[0] <= p.fit[1] <= p.range[1], p.key
    for t in parameters.TABLES:
        for name, value in values[t.key].items():
            assert (value in t.choices) if t.choices else (t.range[0] <= value <= t.range[1]), f"{t.key}.{name}"


def test_every_parameters_field_is_declared_once():
    fields = {f.name for f in dataclasses.fields(Params)} - PROVENANCE
    declared = [p.field for p in (*parameters.SCALARS, *parameters.TABLES)]
    assert len(declared) == len(set(declared)), "a field declared twice"
    assert fields == set(declared)


def test_every_network_models_settings_are_its_declared_parameters():
    """A network backend declares its own constants beside it (PARAMETERS), one Settings field each, all
    under its file table; the parameters file builds them (Params.network)."""
    assert set(network_parameters()) == {"fabric", "tcp"}  # alpha-beta and ideal have no constants of their own
    params = load_params()
    for model, (table, declared, settings_class) in network_parameters().items():
        fields = [p.field for p in declared]
        assert len(fields) == len(set(fields)) and set(fields) == set(settings_class.__dataclass_fields__), model
        assert all(p.key.startswith(table + ".") for p in declared), model
        assert not {p.key for p in declared} & {p.key for p in parameters.SCALARS}, "declared twice"
        assert isinstance(params.network(model), settings_class)


def test_the_file_round_trips_through_the_si_units():
    """Units are converted at the boundary: what is read is written back as the same numbers."""
    values, written = shipped(), _flatten(params_to_toml(load_params()))
    for p in ALL_SCALARS:
        assert written[p.key] == pytest.approx(values[p.key], rel=1e-12), p.key
    params = load_params()
    assert params.network("tcp").window_bytes == values["transport.window_mib"] * 2**20
    assert params.network("tcp").per_message_overhead_s == pytest.approx(values["transport.per_message_overhead_us"] * 1e-6)


def test_the_fit_takes_its_ranges_and_priors_from_the_declaration():
    from geosim.calibrate import free

    assert free.SCALAR_RANGES == {p.key: p.fit for p in ALL_SCALARS if p.fit is not None}
    assert free.SCALAR_PRIORS == {p.key: p.prior for p in ALL_SCALARS if p.prior is not None}
    assert "transport.window_mib" in free.SCALAR_RANGES  # a network backend's own, fitted from its declaration
    assert free.OVERHEAD_RANGE == parameters.TABLE_BY_KEY["overhead.iteration_s"].fit


def test_the_reference_page_is_what_the_declaration_writes():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import write_params_reference as writer
    finally:
        sys.path.remove(str(ROOT / "tools"))
    for page in writer.PAGES:  # params.md's tables and runtimes.md's
        assert writer.render(page.read_text()) == page.read_text(), f"{page.name} is stale: python tools/write_params_reference.py"
    text = writer.PAGE.read_text()
    for p in ALL_SCALARS:  # a network backend's rows too
        assert f"| `{p.key}` | {p.unit} |" in text
    runtimes = writer.RUNTIMES_PAGE.read_text()
    assert all(f"| `{p.key}` | {p.unit} |" in runtimes for p in parameters.RUNTIME_NUMBERS)
    for technique, leaf in setting_keys():
        assert f"| `{technique}.{leaf}` |" in text


def test_every_technique_setting_is_declared_with_its_source_and_unit():
    """A technique's tunable carries the same facts as a simulator-wide parameter: its range (or
    choices), its unit (numbers and flags) and where its default comes from."""
    from geosim.techniques import settings_class, technique_names
    from geosim.techniques._settings import file_tunables

    missing = []
    for name in technique_names():
        for leaf, t in file_tunables(settings_class(name)).items():
            if not t.source or (t.kind is not str and not t.unit):
                missing.append(f"{name}.{leaf}")
    assert missing == []


def test_a_technique_the_file_does_not_name_costs_what_a_typical_one_does():
    """Not 0 s of overhead (it would win by default): the median of the file's entries, else the
    declared default."""
    from dataclasses import replace

    params = load_params()
    assert params.for_technique("iteration_overhead_s", "new") == 0.15
    assert params.for_technique("startup_s", "new") == 60.0  # data, zero2, diloco, ... 60; shard 120; pipeshard 180
    assert params.for_technique("collectives", "new") == "ring"
    fitted = replace(params, iteration_overhead_s={"data": 0.3, "zero2": 0.3, "shard": 0.4})
    assert fitted.for_technique("iteration_overhead_s", "new") == 0.3
    empty = replace(params, iteration_overhead_s={})
    assert empty.for_technique("iteration_overhead_s", "new") == parameters.TABLE_BY_KEY["overhead.iteration_s"].missing


def test_every_shipped_runtime_value_is_declared_and_in_its_range():
    """runtimes.toml's numbers and device constants against their one declaration (geosim/base/parameters.py)."""
    from geosim.inputs.runtime import KEYS

    runtimes = tomllib.loads((ROOT / "geosim" / "data" / "runtimes.toml").read_text())
    device = {p.key: p for p in parameters.DEVICE_COMPUTE}
    outside = []
    for name, table in runtimes.items():
        assert set(table) <= KEYS, name
        for key, value in table.items():
            if key in parameters.RUNTIME_BY_KEY and not parameters.RUNTIME_BY_KEY[key].inside(value):
                outside.append(f"{name}.{key} = {value}")
            for gpu, constants in (table.get("device_compute") or {}).items() if key == "device_compute" else ():
                outside += [f"{name}.device_compute.{gpu}.{k} = {v}" for k, v in constants.items() if not device[k].inside(v)]
    assert outside == []
    for p in (*parameters.RUNTIME_NUMBERS, *parameters.DEVICE_COMPUTE):
        assert p.fit is None or p.range[0] <= p.fit[0] <= p.fit[1] <= p.range[1], p.key


# Modules (or a module's one name) that still write a default of their own for a declared number, and why.
OWN_DEFAULTS = {
    "live/wan/agent.py:streams": "the probe's parallel connections, a measurement's choice, not the TCP model's streams",
}


def declared_fields() -> set[str]:
    return {p.field for p in (*ALL_SCALARS, *parameters.RUNTIME_NUMBERS, *parameters.DEVICE_COMPUTE)
            if p.unit != parameters.FLAG}


def literal_defaults(tree, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every `name: T = 0.7` in a class body and `def f(name=0.7)` for a declared name."""
    import ast

    def literal(node) -> bool:  # a number other than 0 (0: "none of this cost", not a chosen value)
        if isinstance(node, ast.UnaryOp):
            node = node.operand
        return (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
                and not isinstance(node.value, bool) and node.value != 0)

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found += [(s.lineno, s.target.id) for s in node.body if isinstance(s, ast.AnnAssign)
                      and isinstance(s.target, ast.Name) and s.target.id in names and s.value is not None
                      and literal(s.value)]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            found += [(d.lineno, a.arg) for a, d in pairs if a.arg in names and literal(d)]
    return found


def test_no_module_writes_a_literal_default_for_a_declared_number():
    """A declared number's value is the shipped file's (or, for a runtime's, its declared value where absent):
    no dataclass field or function parameter of the same name carries a number of its own."""
    import ast

    names = declared_fields()
    offenders = []
    for folder in ("geosim", "calibrate", "live"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "geosim/base/parameters.py" or rel in OWN_DEFAULTS:
                continue
            offenders += [f"{rel}:{line}: {name}" for line, name in literal_defaults(ast.parse(path.read_text()), names)
                          if f"{rel}:{name}" not in OWN_DEFAULTS]
    assert offenders == []
    # the check finds what it is for
    assert literal_defaults(ast.parse("class A:\n    gemm_fraction: float = 0.7\n"), names) == [(2, "gemm_fraction")]
    assert literal_defaults(ast.parse("def f(x, kernel_s=5e-6):\n    pass\n"), names) == [(1, "kernel_s")]


def test_tcp_bounds_have_one_home():
    """A link's window, streams and step_rtts override the [transport] parameters and a runtime's numbers of
    the same name: all of them read one bound (geosim.base.parameters), and the plausible window lies inside it."""
    from geosim.base import parameters, plausibility
    from geosim.inputs.scenario import LINK_RANGES
    from geosim.sim.network import tcp

    transport = {s.key: s.range for s in tcp.PARAMETERS}
    runtime = {s.key: s.range for s in parameters.RUNTIME_NUMBERS}
    assert LINK_RANGES["window_mib"] is transport["transport.window_mib"] is parameters.TCP_WINDOW_MIB_RANGE
    assert LINK_RANGES["streams"] is transport["transport.streams"] is runtime["streams"] is parameters.TCP_STREAMS_RANGE
    assert (LINK_RANGES["step_rtts"] is transport["transport.collective_step_rtts"]
            is runtime["collective_step_rtts"] is parameters.STEP_RTTS_RANGE)
    low, high = parameters.TCP_WINDOW_MIB_RANGE
    assert low <= plausibility.RANGES["window_mib"].low < plausibility.RANGES["window_mib"].high <= high
